//! [`SharedCache`]: a fleet-wide KV store (LMCache-style) that every worker can load from.

use std::fmt;

use crate::event::{LocalBlockHash, SequenceHash};

/// A KV store shared by the whole fleet. Its hits count only beyond a worker's own match (the
/// worker loads those blocks instead of computing them), at
/// [`RouterConfig::shared_cache_hit_weight`](super::RouterConfig::shared_cache_hit_weight).
///
/// Called on the routing thread, once per request: keep it fast (a local bloom filter or
/// index, not a network round trip). An error is logged and scored as no hit.
///
/// ```
/// use kvroute::router::{SharedCache, SharedCacheError};
/// use kvroute::{LocalBlockHash, SequenceHash};
///
/// /// A store that holds the first `n` blocks of every prompt (for a test).
/// struct FirstBlocks(usize);
///
/// impl SharedCache for FirstBlocks {
///     fn prefix_hits(&self, local: &[LocalBlockHash], _: &[SequenceHash]) -> Result<usize, SharedCacheError> {
///         Ok(self.0.min(local.len()))
///     }
/// }
/// ```
pub trait SharedCache: Send + Sync + 'static {
    /// How many leading blocks of the request (content hashes `local`, our sequence hashes
    /// `sequence`) the store holds.
    fn prefix_hits(
        &self,
        local: &[LocalBlockHash],
        sequence: &[SequenceHash],
    ) -> Result<usize, SharedCacheError>;
}

/// Why a [`SharedCache`] could not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedCacheError(pub String);

impl fmt::Display for SharedCacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shared cache lookup failed: {}", self.0)
    }
}

impl std::error::Error for SharedCacheError {}
