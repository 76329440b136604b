//! Applying peer replicas' [`SequenceEvent`]s through the sticky lane pool: each request's events
//! go to one lane (by a hash of its id), so they apply in the order they were received, while
//! different requests' events apply in parallel and the caller (a transport's receive loop)
//! never waits for a lock.
//!
//! Per-request order is what a peer's view needs to converge: changes to different requests
//! commute, but a request's `Free` applied before its `AddRequest` is dropped and the request
//! then stays for good. A lane per worker would not do: an id freed on one worker and reused on
//! another has events on two workers.

use std::fmt;

use super::RequestId;
use super::error::AddRequestError;
use super::fleet_state::FleetState;
use super::replica::{PeerCounters, SequenceEvent, SequenceEventData};
use crate::pool::{Lane, LaneDown, SpawnError, StickyPool};
use crate::sync::Arc;

/// Why a peer event was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerEventError {
    /// The tracker was built without [`super::SequencesBuilder::replica`].
    ReplicaSyncOff,
    /// The lanes have stopped (a lane panicked).
    LaneDown,
}

impl fmt::Display for PeerEventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReplicaSyncOff => f.write_str("replica sync is off for this tracker"),
            Self::LaneDown => f.write_str("the peer-event lanes have stopped"),
        }
    }
}

impl std::error::Error for PeerEventError {}

impl From<LaneDown> for PeerEventError {
    fn from(_: LaneDown) -> Self {
        Self::LaneDown
    }
}

/// One lane: applies the events of the workers hashed to it.
pub(crate) struct PeerLane {
    inner: Arc<FleetState>,
}

impl Lane for PeerLane {
    type Message = SequenceEvent;

    fn handle(&mut self, event: SequenceEvent) {
        self.inner.apply_peer_event(event);
    }
}

/// The lane, of `lanes`, that applies every event of request `id`.
pub(crate) fn peer_lane(id: &RequestId, lanes: usize) -> usize {
    (xxhash_rust::xxh3::xxh3_64(id.as_str().as_bytes()) % lanes as u64) as usize
}

/// The lanes of one tracker.
pub(crate) type PeerPool = StickyPool<PeerLane>;

/// Starts `lanes` lanes of `queue` events each over `inner`, moving apart when busy on one CPU
/// if `spread`.
pub(crate) fn start_lanes(
    inner: &Arc<FleetState>,
    lanes: usize,
    (queue, spread): (usize, bool),
) -> Result<PeerPool, SpawnError> {
    StickyPool::with_spread(lanes, queue, spread, |_| PeerLane { inner: inner.clone() })
}

impl FleetState {
    /// Applies one peer event now, on the calling thread, without publishing it again.
    pub(crate) fn apply_peer_event(&self, event: SequenceEvent) {
        let counters = &self.peer_counters;
        let SequenceEvent { request_id, worker, data, .. } = event;
        let counter = match data {
            SequenceEventData::AddRequest { blocks, isl, overlap } => {
                match self.add_request(request_id, worker, blocks.as_deref(), isl, overlap, false) {
                    Ok(_) => &counters.applied,
                    Err(AddRequestError::UnknownWorker { .. }) => &counters.unknown_worker,
                    Err(_) => &counters.rejected_add,
                }
            }
            SequenceEventData::MarkPrefillCompleted => {
                self.outcome(self.mark_prefill_completed(&request_id, false).is_ok())
            }
            SequenceEventData::AddOutputBlock => {
                self.outcome(self.add_output_block(&request_id, false).is_ok())
            }
            SequenceEventData::Free => self.outcome(self.free(&request_id, false).is_ok()),
        };
        PeerCounters::bump(counter);
    }

    fn outcome(&self, applied: bool) -> &crate::sync::AtomicU64 {
        if applied { &self.peer_counters.applied } else { &self.peer_counters.unknown_request }
    }
}
