//! [`MultiWorkerSequences`]: the requests in flight on a whole fleet, from many threads at once:
//! the public face of a [`FleetState`] and the lanes that apply peer replicas' events to it.

use std::fmt;

use super::RequestId;
use super::error::{AddRequestError, ConfigError, UnknownRequest};
use super::fleet_state::{FleetState, WorkerChanges};
use super::load::{PotentialLoad, WorkerLoad};
use super::peers::{PeerEventError, PeerPool, peer_lane, start_lanes};
use super::replica::{PeerCounters, PeerStats, SequenceEvent};
use crate::event::{SequenceHash, Worker};
use crate::scores::OverlapScores;
use crate::sync::Arc;

/// The requests in flight on a fleet of (worker, dp_rank), the blocks they pin and the prefill
/// tokens they still need: the router's load signal. Every method is synchronous and may be
/// called from any number of threads at once; no async runtime is involved.
///
/// Workers are spread over a power-of-two number of cache-padded shards, each behind its own
/// lock; within a shard, the blocks pinned by its workers form one prefix trie with per-worker
/// counts, so an all-worker query walks the candidate once per shard (not once per worker) and
/// a shared system prompt is stored once per shard. Requests are found by id through a separate
/// sharded index, so operations on different requests and workers rarely meet.
///
/// Each worker's figures in a query come from one consistent state of its shard; figures of
/// workers in different shards may be from slightly different moments (a request being added on
/// another thread is either fully counted or not at all).
///
/// ```
/// use kvroute::{OverlapScores, SequenceHash, Worker};
/// use kvroute::sequences::MultiWorkerSequences;
///
/// let blocks = |ids: &[u64]| ids.iter().copied().map(SequenceHash).collect::<Vec<_>>();
/// let fleet = MultiWorkerSequences::builder(16).build()?;
/// let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
/// fleet.update_workers([a, b]);
///
/// fleet.add_request("r1".into(), a, Some(&blocks(&[10, 11, 12])), 48, 0)?;
///
/// // Where would a 4-block request sharing r1's first two blocks cost least?
/// // (Worker a holds those two blocks in its KV cache, says the prefix index.)
/// let candidate = blocks(&[10, 11, 20, 21]);
/// let overlaps = OverlapScores::from_pairs(vec![(a, 2)]);
/// let loads = fleet.potential_loads(&candidate, 64, &overlaps);
/// let on = |w| loads.iter().find(|l| l.worker == w).copied().unwrap_or_default();
/// assert_eq!((on(a).potential_blocks, on(a).potential_tokens), (3 + 2, 48 + 32));
/// assert_eq!((on(b).potential_blocks, on(b).potential_tokens), (4, 64));
///
/// fleet.mark_prefill_completed(&"r1".into())?;
/// fleet.free(&"r1".into())?;
/// assert!(fleet.loads().iter().all(|l| l.active_blocks == 0 && l.active_tokens == 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MultiWorkerSequences {
    pub(crate) inner: Arc<FleetState>,
    /// The lanes applying peer events; present when replica sync is on. Declared after
    /// `inner` only for readability: dropping it joins the lanes, which hold their own `Arc`.
    pub(crate) peers: Option<PeerPool>,
}

impl MultiWorkerSequences {
    /// Starts tracking `worker` (no-op if tracked); true if it is new.
    pub fn add_worker(&self, worker: Worker) -> bool {
        self.inner.add_worker(worker)
    }

    /// Stops tracking `worker`; returns the requests it had in flight (now dropped), oldest
    /// first, or `None` if it was not tracked.
    pub fn remove_worker(&self, worker: Worker) -> Option<Vec<RequestId>> {
        self.inner.remove_worker(worker)
    }

    /// Makes `workers` the tracked set: adds the new ones, removes the others (dropping their
    /// requests, reported in the result).
    pub fn update_workers(&self, workers: impl IntoIterator<Item = Worker>) -> WorkerChanges {
        self.inner.update_workers(workers)
    }

    /// The worker shard `worker` lives (or would live) in: fixed for the tracker's life.
    /// Writers on workers of different shards never wait for each other.
    pub fn shard_of(&self, worker: Worker) -> usize {
        self.inner.shard_of(worker)
    }

    /// How many worker shards the tracker has.
    pub fn shard_count(&self) -> usize {
        self.inner.shard_count()
    }

    /// Whether `worker` is tracked.
    pub fn tracks(&self, worker: Worker) -> bool {
        self.inner.tracks(worker)
    }

    /// Every tracked worker, in no particular order.
    pub fn workers(&self) -> Vec<Worker> {
        self.loads().into_iter().map(|load| load.worker).collect()
    }

    /// Adds request `id` of `isl` input tokens to `worker`, whose KV cache already holds its
    /// first `overlap` blocks: pins its `blocks` (if known) and counts
    /// `isl - overlap * block_size` tokens to prefill until
    /// [`mark_prefill_completed`](Self::mark_prefill_completed).
    ///
    /// First drops that worker's expired requests and returns their ids (usually none). On error
    /// nothing changes. Published to peers when replica sync is on.
    pub fn add_request(
        &self,
        id: RequestId,
        worker: Worker,
        blocks: Option<&[SequenceHash]>,
        isl: usize,
        overlap: u32,
    ) -> Result<Vec<RequestId>, AddRequestError> {
        self.inner.add_request(id, worker, blocks, isl, overlap, true)
    }

    /// Stops counting the request's prefill tokens (idempotent while it is in flight).
    pub fn mark_prefill_completed(&self, id: &RequestId) -> Result<(), UnknownRequest> {
        self.inner.mark_prefill_completed(id, true)
    }

    /// The request decoded one more block: it pins one more block on its worker.
    pub fn add_output_block(&self, id: &RequestId) -> Result<(), UnknownRequest> {
        self.inner.add_output_block(id, true)
    }

    /// The request finished: unpins its blocks (those no other request on the worker shares)
    /// and uncounts its prefill tokens if prefill had not completed.
    pub fn free(&self, id: &RequestId) -> Result<(), UnknownRequest> {
        self.inner.free(id, true)
    }

    /// The worker running request `id`, if it is in flight.
    pub fn worker_of(&self, id: &RequestId) -> Option<Worker> {
        self.inner.worker_of(id)
    }

    /// Drops every request, on every worker, that has expired now; returns their ids.
    pub fn expire_stale(&self) -> Vec<RequestId> {
        self.inner.expire_stale()
    }

    /// Every worker's load if a request of `candidate` blocks and `isl` tokens were sent to it,
    /// given each worker's cached prefix of it in `overlaps` (in blocks; absent means 0).
    /// The order of workers is unspecified.
    pub fn potential_loads(
        &self,
        candidate: &[SequenceHash],
        isl: usize,
        overlaps: &OverlapScores,
    ) -> Vec<PotentialLoad> {
        let mut out = Vec::new();
        self.inner.potential_loads_into(candidate, isl, overlaps, &mut out);
        out
    }

    /// [`potential_loads`](Self::potential_loads) into a reused buffer (cleared first).
    pub fn potential_loads_into(
        &self,
        candidate: &[SequenceHash],
        isl: usize,
        overlaps: &OverlapScores,
        out: &mut Vec<PotentialLoad>,
    ) {
        self.inner.potential_loads_into(candidate, isl, overlaps, out);
    }

    /// Every worker's load now (active blocks, tokens and requests), in no particular order.
    pub fn loads(&self) -> Vec<WorkerLoad> {
        let mut out = Vec::new();
        self.inner.loads_into(&mut out);
        out
    }

    /// [`loads`](Self::loads) into a reused buffer (cleared first).
    pub fn loads_into(&self, out: &mut Vec<WorkerLoad>) {
        self.inner.loads_into(out);
    }

    /// One worker's load now, `None` if it is not tracked.
    pub fn load(&self, worker: Worker) -> Option<WorkerLoad> {
        self.inner.load(worker)
    }

    /// Tokens per KV block.
    pub fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
}

impl fmt::Debug for MultiWorkerSequences {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiWorkerSequences")
            .field("block_size", &self.inner.block_size())
            .field("expiry", &self.inner.expiry())
            .field("worker_shards", &self.inner.shard_count())
            .field("router_id", &self.inner.replica.as_ref().map(|r| r.router_id))
            .finish_non_exhaustive()
    }
}

impl MultiWorkerSequences {
    /// The tracker over `inner`, with peer lanes if replica sync is on: `lanes` of them, with
    /// their queues' capacity and whether they move apart (see [`start_lanes`]).
    pub(crate) fn from_parts(
        inner: Arc<FleetState>,
        lanes: usize,
        queues: (usize, bool),
    ) -> Result<Self, ConfigError> {
        let peers = match inner.replica {
            Some(_) => Some(start_lanes(&inner, lanes, queues)?),
            None => None,
        };
        Ok(Self { inner, peers })
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
