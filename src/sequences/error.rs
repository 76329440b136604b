//! Errors of the active-sequence trackers. Each leaves the tracker exactly as it was.

use std::fmt;

use super::RequestId;
use crate::event::Worker;
use crate::pool::SpawnError;

/// Why a tracker could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A block must hold at least one token.
    ZeroBlockSize,
    /// A size is beyond its limit (each shard is a lock, each peer lane a thread, each queue
    /// slot an event): which setting, what was asked and the most allowed.
    TooLarge {
        /// The setting (`worker_shards`, `request_shards`, `peer_lanes`, `peer_queue`).
        setting: &'static str,
        /// The value asked for.
        requested: usize,
        /// The most allowed.
        max: usize,
    },
    /// The OS would not start a peer lane's thread.
    Spawn(SpawnError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBlockSize => f.write_str("block size must be at least one token"),
            Self::TooLarge { setting, requested, max } => {
                write!(f, "{setting} of {requested} is more than the {max} allowed")
            }
            Self::Spawn(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {}

impl From<SpawnError> for ConfigError {
    fn from(error: SpawnError) -> Self {
        Self::Spawn(error)
    }
}

/// Why a request was not added. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddRequestError {
    /// A request with this id is already in flight (on any worker).
    DuplicateRequest {
        /// The id.
        id: RequestId,
    },
    /// The prefix overlap covers more tokens than the request has: `overlap * block_size > isl`.
    OverlapExceedsInput {
        /// The overlap, in blocks.
        overlap: u32,
        /// Tokens per block.
        block_size: u32,
        /// The request's input length, in tokens.
        isl: usize,
    },
    /// The worker is not tracked (never added, or removed).
    UnknownWorker {
        /// The worker.
        worker: Worker,
    },
}

impl fmt::Display for AddRequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DuplicateRequest { id } => write!(f, "request {id} is already in flight"),
            Self::OverlapExceedsInput { overlap, block_size, isl } => write!(
                f,
                "overlap of {overlap} blocks of {block_size} tokens exceeds the input of {isl} tokens"
            ),
            Self::UnknownWorker { worker } => write!(f, "worker {worker} is not tracked"),
        }
    }
}

impl std::error::Error for AddRequestError {}

/// The request is not in flight (never added, already freed, expired, or its worker removed).
/// Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownRequest {
    /// The id.
    pub id: RequestId,
}

impl fmt::Display for UnknownRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request {} is not in flight", self.id)
    }
}

impl std::error::Error for UnknownRequest {}

/// The prefill tokens a request adds: `isl - overlap * block_size`, or the typed error when the
/// overlap covers more than the input.
pub(crate) fn checked_prefill_tokens(
    isl: usize,
    overlap: u32,
    block_size: u32,
) -> Result<usize, AddRequestError> {
    (overlap as usize)
        .checked_mul(block_size as usize)
        .and_then(|cached| isl.checked_sub(cached))
        .ok_or(AddRequestError::OverlapExceedsInput { overlap, block_size, isl })
}

/// The prefill tokens a candidate would add, saturating at zero (queries never fail).
pub(crate) fn saturating_prefill_tokens(isl: usize, overlap: u32, block_size: u32) -> usize {
    isl.saturating_sub((overlap as usize).saturating_mul(block_size as usize))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn prefill_tokens_subtract_the_cached_prefix() {
        assert_eq!(checked_prefill_tokens(100, 3, 16), Ok(52));
        assert_eq!(checked_prefill_tokens(48, 3, 16), Ok(0));
        assert_eq!(
            checked_prefill_tokens(47, 3, 16),
            Err(AddRequestError::OverlapExceedsInput { overlap: 3, block_size: 16, isl: 47 })
        );
        assert!(checked_prefill_tokens(usize::MAX, u32::MAX, u32::MAX).is_ok());
        assert_eq!(saturating_prefill_tokens(47, 3, 16), 0);
        assert_eq!(saturating_prefill_tokens(100, 1, 16), 84);
    }

    #[test]
    fn errors_explain_themselves() {
        let id = RequestId::from("r9");
        assert_eq!(
            AddRequestError::DuplicateRequest { id: id.clone() }.to_string(),
            "request r9 is already in flight"
        );
        assert_eq!(UnknownRequest { id }.to_string(), "request r9 is not in flight");
        let worker = Worker::new(3, 1);
        assert_eq!(
            AddRequestError::UnknownWorker { worker }.to_string(),
            "worker 3/1 is not tracked"
        );
        assert!(ConfigError::ZeroBlockSize.to_string().contains("block size"));
    }
}
