//! [`RouterStats`]: what a [`KvRouter`](super::KvRouter) has done and holds.

use std::time::Duration;

use crate::index::PoolStats;
use crate::recovery::RecoveryStats;
use crate::router::ApproxStats;

/// A snapshot of a router's counters and sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouterStats {
    /// Registered (worker, dp_rank) pairs.
    pub workers: usize,
    /// Whether some worker only prefills or only decodes.
    pub disaggregated: bool,
    /// Requests routed.
    pub decisions: u64,
    /// Routing calls refused with an error.
    pub refused: u64,
    /// Requests that stayed on their session's worker.
    pub session_hits: u64,
    /// Requests whose session's worker was gone, not allowed or overloaded.
    pub session_moves: u64,
    /// Sessions used within their idle TTL.
    pub live_sessions: usize,
    /// Shared-cache lookups that failed (scored as no hit).
    pub shared_cache_failures: u64,
    /// Each tier's index counters: device, host-pinned, disk, external.
    pub index: [PoolStats; 4],
    /// Approximate mode's counters, when it is on.
    pub approx: Option<ApproxStats>,
    /// Per-stream recovery counters (gaps, duplicates, restores, buffered events, time from gap
    /// to healed), when recovery is on.
    pub recovery: Option<RecoveryStats>,
    /// Time since the router started.
    pub uptime: Duration,
}
