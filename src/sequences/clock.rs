//! Where the trackers read the time, so that request expiry can be tested without sleeping.

use std::fmt;
use std::time::{Duration, Instant};

use crate::sync::{Arc, AtomicU64, Ordering};

/// A source of monotonic time for request expiry.
///
/// The trackers read it once per `add_request` (to stamp the request and to expire stale ones)
/// and once per explicit expiry sweep; queries never read it.
pub trait Clock: Send + Sync + 'static {
    /// The current time. Must never go backwards.
    fn now(&self) -> Instant;
}

/// The real clock: [`Instant::now`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// How far a [`ManualClock`] can be moved: 100 years, so `Instant + elapsed` never overflows.
const MAX_ELAPSED_NANOS: u64 = 100 * 365 * 24 * 3600 * 1_000_000_000;

/// A clock that moves only when told to; clones share one time.
///
/// ```
/// use std::time::Duration;
/// use kvroute::sequences::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let start = clock.now();
/// let handle = clock.clone();
/// handle.advance(Duration::from_secs(301));
/// assert_eq!(clock.now() - start, Duration::from_secs(301));
/// ```
#[derive(Clone)]
pub struct ManualClock {
    base: Instant,
    elapsed_nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at the moment it was made.
    pub fn new() -> Self {
        Self { base: Instant::now(), elapsed_nanos: Arc::new(AtomicU64::new(0)) }
    }

    /// Moves the clock (and every clone) forward by `by`; it stops at 100 years past its start.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let mut current = self.elapsed_nanos.load(Ordering::Relaxed);
        loop {
            let next = current.saturating_add(nanos).min(MAX_ELAPSED_NANOS);
            match self.elapsed_nanos.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// How far the clock has been moved since it was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_nanos.load(Ordering::Relaxed))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + self.elapsed()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock").field("elapsed", &self.elapsed()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        let other = clock.clone();
        other.advance(Duration::from_millis(1500));
        assert_eq!(clock.now() - t0, Duration::from_millis(1500));
        assert_eq!(other.elapsed(), Duration::from_millis(1500));
        clock.advance(Duration::MAX);
        assert_eq!(clock.elapsed(), Duration::from_nanos(MAX_ELAPSED_NANOS));
        assert!(clock.now() > t0);
    }

    #[test]
    fn system_clock_does_not_go_backwards() {
        let a = SystemClock.now();
        let b = SystemClock.now();
        assert!(b >= a);
    }
}
