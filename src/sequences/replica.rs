//! Replica sync: the events that let several router replicas keep the same load view, whatever
//! carries them between replicas (NATS, Kafka, gRPC, a channel in a test).
//!
//! Each replica publishes every change it makes on its request path as a [`SequenceEvent`]
//! through its [`SequencePublisher`], and applies the events of its peers with
//! [`super::MultiWorkerSequences::apply_peer_event`]. Expiry and worker removal are not
//! published: every replica expires on its own clock and follows the fleet's membership itself.
//!
//! A peer's view converges to the publisher's because each request's events keep their order
//! end to end: they are published in the order the changes were made (under the lock that
//! orders them), a peer applies them in the order received (one lane per request), and the
//! transport must deliver one replica's events in the order they were published. Changes to
//! different requests commute, so nothing else needs ordering.

use std::fmt;

use super::RequestId;
use crate::event::{SequenceHash, Worker};
use crate::sync::{AtomicU64, Ordering};

/// One change to the requests in flight, made by router `router_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SequenceEvent {
    /// The replica that made the change (peers skip their own events).
    pub router_id: u64,
    /// The request.
    pub request_id: RequestId,
    /// The worker the request runs on.
    pub worker: Worker,
    /// What changed.
    pub data: SequenceEventData,
}

/// What a [`SequenceEvent`] changed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum SequenceEventData {
    /// The request was added (see [`super::MultiWorkerSequences::add_request`]).
    AddRequest {
        /// Its block sequence, if known.
        blocks: Option<Vec<SequenceHash>>,
        /// Its input length in tokens.
        isl: usize,
        /// Blocks of it already cached on the worker.
        overlap: u32,
    },
    /// The request's prefill completed.
    MarkPrefillCompleted,
    /// The request decoded one more block.
    AddOutputBlock,
    /// The request finished.
    Free,
}

/// Where a replica sends its own events. Called on the request path, after the change, under
/// the lock that orders the request's changes (one shard of the tracker's request index), so
/// events of one request arrive in the order of its changes: implementations should enqueue
/// and return, not do network I/O inline, and must not call back into the tracker.
pub trait SequencePublisher: Send + Sync + 'static {
    /// Sends one event to the peer replicas.
    fn publish(&self, event: SequenceEvent);
}

/// What happened to the peer events handed to
/// [`super::MultiWorkerSequences::apply_peer_event`] so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerStats {
    /// Applied.
    pub applied: u64,
    /// Skipped because this replica made them.
    pub own: u64,
    /// Skipped because their worker is not tracked here.
    pub unknown_worker: u64,
    /// Rejected: an add of a request already in flight, or with an overlap beyond its input.
    pub rejected_add: u64,
    /// Rejected: about a request not in flight here.
    pub unknown_request: u64,
}

impl fmt::Display for PeerStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "applied {}, own {}, unknown worker {}, rejected add {}, unknown request {}",
            self.applied, self.own, self.unknown_worker, self.rejected_add, self.unknown_request
        )
    }
}

/// The live counters behind [`PeerStats`] (off the hot path: touched once per peer event).
#[derive(Debug, Default)]
pub(crate) struct PeerCounters {
    pub(crate) applied: AtomicU64,
    pub(crate) own: AtomicU64,
    pub(crate) unknown_worker: AtomicU64,
    pub(crate) rejected_add: AtomicU64,
    pub(crate) unknown_request: AtomicU64,
}

impl PeerCounters {
    /// Counts one event in `counter`.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot.
    pub(crate) fn snapshot(&self) -> PeerStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        PeerStats {
            applied: read(&self.applied),
            own: read(&self.own),
            unknown_worker: read(&self.unknown_worker),
            rejected_add: read(&self.rejected_add),
            unknown_request: read(&self.unknown_request),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn peer_stats_display_every_counter() {
        let counters = PeerCounters::default();
        PeerCounters::bump(&counters.applied);
        PeerCounters::bump(&counters.applied);
        PeerCounters::bump(&counters.unknown_request);
        let stats = counters.snapshot();
        assert_eq!((stats.applied, stats.unknown_request, stats.own), (2, 1, 0));
        assert_eq!(
            stats.to_string(),
            "applied 2, own 0, unknown worker 0, rejected add 0, unknown request 1"
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn events_round_trip_through_json() {
        let event = SequenceEvent {
            router_id: 7,
            request_id: RequestId::from("r-1"),
            worker: Worker::new(3, 1),
            data: SequenceEventData::AddRequest {
                blocks: Some(vec![SequenceHash(1), SequenceHash(2)]),
                isl: 40,
                overlap: 1,
            },
        };
        let json = serde_json::to_string(&event).expect("serialize");
        assert!(json.contains("\"request_id\":\"r-1\""));
        let back: SequenceEvent = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, event);
    }
}
