//! Recovery's settings.

use std::fmt;
use std::time::Duration;

/// The longest `max_backoff` a config may ask for: a day. Longer waits are never meant, and
/// one near `Duration::MAX` would overflow the clock.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 60 * 60);

/// How recovery buffers and retries. [`Default`]: 1,024 buffered events per stream, 3 failed
/// incremental fetches before a full restore, backoff from 10 ms doubling up to 1 s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// Live events kept per stream while it recovers; past it the oldest are dropped and the
    /// stream is restored from a full dump instead.
    pub buffer_capacity: usize,
    /// Failed incremental fetches of one gap before falling back to a full restore.
    pub incremental_attempts: u32,
    /// Wait before the first retry; doubled per failure.
    pub backoff: Duration,
    /// The longest wait between retries.
    pub max_backoff: Duration,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            buffer_capacity: 1_024,
            incremental_attempts: 3,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RecoveryConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), RecoveryConfigError> {
        if self.buffer_capacity == 0 {
            return Err(RecoveryConfigError::ZeroBuffer);
        }
        if self.max_backoff < self.backoff {
            return Err(RecoveryConfigError::BackoffAboveMax);
        }
        if self.max_backoff > MAX_BACKOFF {
            return Err(RecoveryConfigError::BackoffTooLong);
        }
        Ok(())
    }

    /// The wait after `failures` consecutive failures (at least one).
    pub(crate) fn backoff_after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(30);
        self.backoff.saturating_mul(1 << doublings).min(self.max_backoff)
    }
}

/// Why a [`RecoveryConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryConfigError {
    /// `buffer_capacity` is 0.
    ZeroBuffer,
    /// `max_backoff` is below `backoff`.
    BackoffAboveMax,
    /// `max_backoff` is over [`MAX_BACKOFF`].
    BackoffTooLong,
}

impl fmt::Display for RecoveryConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBuffer => f.write_str("recovery buffer_capacity must be at least 1"),
            Self::BackoffAboveMax => f.write_str("recovery max_backoff is below backoff"),
            Self::BackoffTooLong => write!(f, "recovery max_backoff is over {MAX_BACKOFF:?}"),
        }
    }
}

impl std::error::Error for RecoveryConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let config = RecoveryConfig::default();
        let waits: Vec<u128> = (1..=9).map(|n| config.backoff_after(n).as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1_000, 1_000]);
        assert_eq!(config.backoff_after(u32::MAX), Duration::from_secs(1));
        let bad = RecoveryConfig { buffer_capacity: 0, ..config };
        assert_eq!(bad.validate(), Err(RecoveryConfigError::ZeroBuffer));
    }

    #[test]
    fn an_absurd_backoff_is_a_typed_error() {
        let absurd = RecoveryConfig {
            backoff: Duration::MAX,
            max_backoff: Duration::MAX,
            ..Default::default()
        };
        assert_eq!(absurd.validate(), Err(RecoveryConfigError::BackoffTooLong));
        let day = RecoveryConfig { max_backoff: MAX_BACKOFF, ..Default::default() };
        assert_eq!(day.validate(), Ok(()));
    }
}
