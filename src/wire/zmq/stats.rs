//! The subscriber's counters: live atomics per endpoint, read as plain snapshots.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::event::WorkerId;

/// One endpoint's counters, as of the snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// The publisher's address.
    pub publisher: String,
    /// The worker its events are attributed to.
    pub worker: WorkerId,
    /// Messages received live.
    pub messages: u64,
    /// Events applied to the index (live and replayed).
    pub events: u64,
    /// Block operations applied (stored and removed blocks, one per clear).
    pub block_ops: u64,
    /// Events deliberately left out by the decoder (see [`DecodedBatch::skipped`](crate::wire::DecodedBatch)).
    pub skipped_events: u64,
    /// Messages or replayed batches that could not be decoded (each counts as an empty batch, so
    /// the sequence stays whole).
    pub decode_errors: u64,
    /// The last sequence number received live.
    pub last_seq: Option<u64>,
    /// Gaps in the sequence seen (with a replay socket).
    pub gaps: u64,
    /// Gaps healed through the replay socket.
    pub gaps_healed: u64,
    /// Full restores (first contact, an engine restart, a replay that no longer had the gap).
    pub restores: u64,
    /// Replay requests sent.
    pub replay_requests: u64,
    /// Replay requests that failed (no answer in time, another framing, too large).
    pub replay_failures: u64,
    /// True while the endpoint waits on its replay socket (a gap or a restore in progress).
    pub recovering: bool,
    /// Live batches stashed until recovery applies them (at most the recovery buffer's
    /// capacity, [`RecoveryConfig::buffer_capacity`](crate::recovery::RecoveryConfig)).
    pub stashed: u64,
    /// Reconnects of the SUB socket to its publisher: each restores the endpoint in full from
    /// the replay socket (the engine may have restarted and its first batches been lost).
    pub reconnects: u64,
    /// Batches numbered at or below the latest one but stamped later (an engine restart whose
    /// first batches were lost): each restores the endpoint in full.
    pub suspected_restarts: u64,
    /// Live batches dropped because recovery's buffer was full: each sends the endpoint back
    /// to a full restore.
    pub buffer_overflows: u64,
    /// Sequence jumps on an endpoint without a replay socket (lost for good).
    pub unrecovered_gaps: u64,
    /// True once the index refused events because it is down (they are dropped).
    pub index_down: bool,
}

/// Every endpoint's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscriberStats {
    /// Per endpoint, in configuration order.
    pub endpoints: Vec<EndpointStats>,
    /// Time since the subscriber started.
    pub uptime: Duration,
}

impl SubscriberStats {
    /// Events applied, over every endpoint.
    pub fn events(&self) -> u64 {
        self.endpoints.iter().map(|e| e.events).sum()
    }

    /// Block operations applied, over every endpoint.
    pub fn block_ops(&self) -> u64 {
        self.endpoints.iter().map(|e| e.block_ops).sum()
    }

    /// Decode errors, over every endpoint.
    pub fn decode_errors(&self) -> u64 {
        self.endpoints.iter().map(|e| e.decode_errors).sum()
    }

    /// Gaps healed, over every endpoint.
    pub fn gaps_healed(&self) -> u64 {
        self.endpoints.iter().map(|e| e.gaps_healed).sum()
    }

    /// Full restores, over every endpoint.
    pub fn restores(&self) -> u64 {
        self.endpoints.iter().map(|e| e.restores).sum()
    }

    /// Failed replay requests, over every endpoint.
    pub fn replay_failures(&self) -> u64 {
        self.endpoints.iter().map(|e| e.replay_failures).sum()
    }

    /// Events applied per second between `earlier` and this snapshot.
    pub fn events_per_sec(&self, earlier: &SubscriberStats) -> f64 {
        let secs = self.uptime.saturating_sub(earlier.uptime).as_secs_f64();
        if secs == 0.0 { 0.0 } else { self.events().saturating_sub(earlier.events()) as f64 / secs }
    }
}

/// The live counters one endpoint's thread writes.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub messages: AtomicU64,
    pub events: AtomicU64,
    pub block_ops: AtomicU64,
    pub skipped_events: AtomicU64,
    pub decode_errors: AtomicU64,
    /// The last live seq plus one (0: none yet).
    pub next_seq: AtomicU64,
    pub gaps: AtomicU64,
    pub gaps_healed: AtomicU64,
    pub restores: AtomicU64,
    pub replay_requests: AtomicU64,
    pub replay_failures: AtomicU64,
    pub recovering: AtomicBool,
    pub stashed: AtomicU64,
    pub reconnects: AtomicU64,
    pub suspected_restarts: AtomicU64,
    pub buffer_overflows: AtomicU64,
    pub unrecovered_gaps: AtomicU64,
    pub index_down: AtomicBool,
}

impl Counters {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self, publisher: &str, worker: WorkerId) -> EndpointStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EndpointStats {
            publisher: publisher.to_owned(),
            worker,
            messages: get(&self.messages),
            events: get(&self.events),
            block_ops: get(&self.block_ops),
            skipped_events: get(&self.skipped_events),
            decode_errors: get(&self.decode_errors),
            last_seq: get(&self.next_seq).checked_sub(1),
            gaps: get(&self.gaps),
            gaps_healed: get(&self.gaps_healed),
            restores: get(&self.restores),
            replay_requests: get(&self.replay_requests),
            replay_failures: get(&self.replay_failures),
            recovering: self.recovering.load(Ordering::Relaxed),
            stashed: get(&self.stashed),
            reconnects: get(&self.reconnects),
            suspected_restarts: get(&self.suspected_restarts),
            buffer_overflows: get(&self.buffer_overflows),
            unrecovered_gaps: get(&self.unrecovered_gaps),
            index_down: self.index_down.load(Ordering::Relaxed),
        }
    }
}
