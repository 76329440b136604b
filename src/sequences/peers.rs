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
use super::multi::{Inner, MultiWorkerSequences};
use super::replica::{PeerCounters, PeerStats, SequenceEvent, SequenceEventData};
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
    inner: Arc<Inner>,
}

impl Lane for PeerLane {
    type Message = SequenceEvent;

    fn handle(&mut self, event: SequenceEvent) {
        self.inner.apply_peer_event(event);
    }
}

/// The lane, of `lanes`, that applies every event of request `id`.
fn peer_lane(id: &RequestId, lanes: usize) -> usize {
    (xxhash_rust::xxh3::xxh3_64(id.as_str().as_bytes()) % lanes as u64) as usize
}

/// The lanes of one tracker.
pub(crate) type PeerPool = StickyPool<PeerLane>;

/// Starts `lanes` lanes of `queue` events each over `inner`, moving apart when busy on one CPU
/// if `spread`.
pub(crate) fn start_lanes(
    inner: &Arc<Inner>,
    lanes: usize,
    (queue, spread): (usize, bool),
) -> Result<PeerPool, SpawnError> {
    StickyPool::with_spread(lanes, queue, spread, |_| PeerLane { inner: inner.clone() })
}

impl Inner {
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

impl MultiWorkerSequences {
    /// Queues an event received from a peer replica; it is applied on the lane of its request
    /// (events of one request apply in the order queued), without being published again.
    /// Events this replica made itself (same `router_id`) are skipped. Waits while that lane's
    /// queue is full.
    ///
    /// Outcomes are counted in [`peer_stats`](Self::peer_stats); an event about an unknown
    /// worker or request is skipped, never fatal.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use kvroute::Worker;
    /// use kvroute::sequences::{MultiWorkerSequences, SequenceEvent, SequencePublisher};
    ///
    /// /// Collects published events (a real transport would send them to the peers).
    /// #[derive(Clone, Default)]
    /// struct Outbox(Arc<Mutex<Vec<SequenceEvent>>>);
    /// impl SequencePublisher for Outbox {
    ///     fn publish(&self, event: SequenceEvent) {
    ///         self.0.lock().unwrap().push(event);
    ///     }
    /// }
    ///
    /// let worker = Worker::new(1, 0);
    /// let outbox = Outbox::default();
    /// let a = MultiWorkerSequences::builder(16).replica(1, outbox.clone()).build()?;
    /// let b = MultiWorkerSequences::builder(16).replica(2, Outbox::default()).build()?;
    /// a.update_workers([worker]);
    /// b.update_workers([worker]);
    ///
    /// a.add_request("r".into(), worker, None, 100, 0)?;
    /// for event in outbox.0.lock().unwrap().drain(..) {
    ///     b.apply_peer_event(event)?;
    /// }
    /// b.flush_peer_events()?;
    /// assert_eq!(b.load(worker).map(|l| l.active_tokens), Some(100));
    /// assert_eq!(b.peer_stats().applied, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply_peer_event(&self, event: SequenceEvent) -> Result<(), PeerEventError> {
        let (Some(pool), Some(replica)) = (&self.peers, &self.inner.replica) else {
            return Err(PeerEventError::ReplicaSyncOff);
        };
        if event.router_id == replica.router_id {
            PeerCounters::bump(&self.inner.peer_counters.own);
            return Ok(());
        }
        pool.send(peer_lane(&event.request_id, pool.lanes()), event)?;
        Ok(())
    }

    /// Returns once every peer event queued (by any thread) before this call has been applied.
    pub fn flush_peer_events(&self) -> Result<(), PeerEventError> {
        let pool = self.peers.as_ref().ok_or(PeerEventError::ReplicaSyncOff)?;
        pool.flush()?;
        Ok(())
    }

    /// What happened to the peer events queued so far (applied ones only once applied).
    pub fn peer_stats(&self) -> PeerStats {
        self.inner.peer_counters.snapshot()
    }

    /// This replica's router id, if replica sync is on.
    pub fn router_id(&self) -> Option<u64> {
        self.inner.replica.as_ref().map(|replica| replica.router_id)
    }
}
