//! [`MultiWorkerSequences`]: the requests in flight on a whole fleet, from many threads at once.

use std::collections::HashSet;
use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::clock::Clock;
use super::error::{AddRequestError, ConfigError, UnknownRequest, checked_prefill_tokens};
use super::load::{OverlapTable, PotentialLoad, WorkerLoad};
use super::peers::{PeerPool, start_lanes};
use super::replica::{PeerCounters, SequenceEvent, SequenceEventData, SequencePublisher};
use super::request_index::{Location, RequestIndex};
use super::shard::{Shard, TOGETHER};
use super::{RequestId, error::saturating_prefill_tokens, worker_hash};
use crate::event::{SequenceHash, Worker};
use crate::scores::OverlapScores;
use crate::sync::{Arc, AtomicUsize, Ordering, RwLock};

/// What [`MultiWorkerSequences::update_workers`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerChanges {
    /// Workers now tracked that were not.
    pub added: Vec<Worker>,
    /// Workers no longer tracked, each with the requests it had in flight (now dropped).
    pub removed: Vec<RemovedWorker>,
}

/// A worker that stopped being tracked, with the requests that were dropped with it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovedWorker {
    /// The worker.
    pub worker: Worker,
    /// Its requests in flight, oldest first.
    pub requests: Vec<RequestId>,
}

/// This replica's identity and where its events go.
pub(crate) struct Replica {
    pub(crate) router_id: u64,
    pub(crate) publisher: Box<dyn SequencePublisher>,
}

/// The shared state behind [`MultiWorkerSequences`] (also held by the peer-event lanes).
pub(crate) struct Inner {
    shards: Box<[CachePadded<RwLock<Shard>>]>,
    shard_mask: usize,
    /// Tracked workers, to size a query's output in one allocation instead of growing it shard
    /// by shard (a hint: a racing `update_workers` only makes the output grow once more).
    workers: AtomicUsize,
    index: RequestIndex,
    block_size: u32,
    expiry: Option<Duration>,
    clock: Box<dyn Clock>,
    pub(crate) replica: Option<Replica>,
    pub(crate) peer_counters: PeerCounters,
}

/// Settings [`Inner`] is built from (validated by the builder).
pub(crate) struct InnerConfig {
    pub(crate) block_size: u32,
    pub(crate) expiry: Option<Duration>,
    pub(crate) worker_shards: usize,
    pub(crate) request_shards: usize,
    pub(crate) clock: Box<dyn Clock>,
    pub(crate) replica: Option<Replica>,
}

impl Inner {
    pub(crate) fn new(config: InnerConfig) -> Self {
        let count = config.worker_shards.max(1).next_power_of_two();
        Self {
            shards: (0..count).map(|_| CachePadded::new(RwLock::new(Shard::default()))).collect(),
            shard_mask: count - 1,
            workers: AtomicUsize::new(0),
            index: RequestIndex::new(config.request_shards),
            block_size: config.block_size,
            expiry: config.expiry,
            clock: config.clock,
            replica: config.replica,
            peer_counters: PeerCounters::default(),
        }
    }

    pub(crate) fn block_size(&self) -> u32 {
        self.block_size
    }

    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub(crate) fn shard_of(&self, worker: Worker) -> usize {
        worker_hash(worker) as usize & self.shard_mask
    }

    /// Publishes a change to request `request_id`. Callers hold the request's index-shard
    /// lock, which every change to the request takes first, so a request's events are published
    /// in the order its changes were made: a `Free` published before its `AddRequest` would be
    /// dropped by a peer, which would then keep the request for good.
    fn publish(&self, request_id: RequestId, worker: Worker, data: SequenceEventData) {
        if let Some(replica) = &self.replica {
            let router_id = replica.router_id;
            replica.publisher.publish(SequenceEvent { router_id, request_id, worker, data });
        }
    }

    /// Whether `key` (the index's own copy of an id) still names the request at `location`.
    fn is_live(&self, key: &RequestId, location: Location) -> bool {
        let shard = self.shards[location.shard as usize].read();
        shard.record(location.slot, location.record).is_some_and(|r| r.id.same_allocation(key))
    }

    pub(crate) fn tracks(&self, worker: Worker) -> bool {
        self.shards[self.shard_of(worker)].read().slot_of(worker).is_some()
    }

    pub(crate) fn add_request(
        &self,
        id: RequestId,
        worker: Worker,
        blocks: Option<&[SequenceHash]>,
        isl: usize,
        overlap: u32,
        publish: bool,
    ) -> Result<Vec<RequestId>, AddRequestError> {
        let prefill_tokens = checked_prefill_tokens(isl, overlap, self.block_size)?;
        // Built before the locks, so they are not held while the blocks are copied.
        let event = (publish && self.replica.is_some()).then(|| {
            let blocks = Some(blocks.unwrap_or_default().to_vec());
            (id.clone(), SequenceEventData::AddRequest { blocks, isl, overlap })
        });
        let shard_at = self.shard_of(worker);
        self.warm(shard_at, |shard| {
            if let Some(slot) = shard.slot_of(worker) {
                shard.warm_add(slot, blocks.unwrap_or_default());
            }
        });
        let mut ids = self.index.shard(id.as_str()).lock();
        if let Some((key, &location)) = ids.get_key_value(id.as_str()) {
            if self.is_live(key, location) {
                return Err(AddRequestError::DuplicateRequest { id });
            }
            // A stale entry: drop it so the new request's allocation becomes the key.
            ids.remove(id.as_str());
        }
        let mut expired = Vec::new();
        let mut shard = self.shards[shard_at].write();
        let Some(slot) = shard.slot_of(worker) else {
            return Err(AddRequestError::UnknownWorker { worker });
        };
        let now = self.clock.now();
        if let Some(expiry) = self.expiry {
            shard.expire(slot, now, expiry, &mut expired);
        }
        let blocks = blocks.unwrap_or_default();
        let Some(record) = shard.add_request(slot, id.clone(), blocks, prefill_tokens, now) else {
            return Err(AddRequestError::UnknownWorker { worker });
        };
        drop(shard);
        let location = Location { shard: shard_at as u32, slot, record };
        ids.insert(id, location);
        if let Some((id, data)) = event {
            // Under `ids`: see `publish`.
            self.publish(id, worker, data);
        }
        drop(ids);
        for expired_id in &expired {
            self.index.remove_if_same(expired_id);
        }
        Ok(expired)
    }

    /// Runs `warm` on shard `at` under a shared lock, if no writer holds it, so what the next
    /// write will touch is in cache: cold misses were most of the exclusive section, which
    /// queries wait for. Queries share the lock, so this never holds them up.
    fn warm(&self, at: usize, warm: impl FnOnce(&Shard)) {
        if let Some(shard) = self.shards[at].try_read() {
            warm(&shard);
        }
    }

    /// Runs `change` on the live request `id` under its index and shard locks, then publishes
    /// `event` (if any) still under the index lock (see `publish`); a stale index entry is
    /// dropped. `remove_entry` also drops the index entry of a live request.
    fn with_request<T>(
        &self,
        id: &RequestId,
        remove_entry: bool,
        event: Option<SequenceEventData>,
        change: impl FnOnce(&mut Shard, Location) -> T,
    ) -> Result<(Worker, T), UnknownRequest> {
        let unknown = || UnknownRequest { id: id.clone() };
        let mut ids = self.index.shard(id.as_str()).lock();
        let (key, &location) = ids.get_key_value(id.as_str()).ok_or_else(unknown)?;
        self.warm(location.shard as usize, |shard| {
            shard.warm_request(location.slot, location.record)
        });
        let mut shard = self.shards[location.shard as usize].write();
        let live = shard
            .record(location.slot, location.record)
            .is_some_and(|record| record.id.same_allocation(key));
        let outcome = match (live, shard.worker(location.slot)) {
            (true, Some(worker)) => Some((worker, change(&mut shard, location))),
            _ => None,
        };
        drop(shard);
        if let (Some((worker, _)), Some(data)) = (&outcome, event) {
            self.publish(id.clone(), *worker, data);
        }
        if remove_entry || outcome.is_none() {
            ids.remove(id.as_str());
        }
        outcome.ok_or_else(unknown)
    }

    pub(crate) fn free(&self, id: &RequestId, publish: bool) -> Result<(), UnknownRequest> {
        let event = publish.then_some(SequenceEventData::Free);
        self.with_request(id, true, event, |shard, at| shard.free(at.slot, at.record))?;
        Ok(())
    }

    pub(crate) fn mark_prefill_completed(
        &self,
        id: &RequestId,
        publish: bool,
    ) -> Result<(), UnknownRequest> {
        let event = publish.then_some(SequenceEventData::MarkPrefillCompleted);
        self.with_request(id, false, event, |shard, at| {
            shard.mark_prefill_completed(at.slot, at.record)
        })?;
        Ok(())
    }

    pub(crate) fn add_output_block(
        &self,
        id: &RequestId,
        publish: bool,
    ) -> Result<(), UnknownRequest> {
        let event = publish.then_some(SequenceEventData::AddOutputBlock);
        self.with_request(id, false, event, |shard, at| {
            shard.add_output_block(at.slot, at.record)
        })?;
        Ok(())
    }

    fn worker_of(&self, id: &RequestId) -> Option<Worker> {
        let ids = self.index.shard(id.as_str()).lock();
        let (key, &location) = ids.get_key_value(id.as_str())?;
        let shard = self.shards[location.shard as usize].read();
        let record = shard.record(location.slot, location.record)?;
        record.id.same_allocation(key).then(|| shard.worker(location.slot)).flatten()
    }

    fn add_worker(&self, worker: Worker) -> bool {
        let mut shard = self.shards[self.shard_of(worker)].write();
        let added = shard.add_worker(worker).1;
        // Counted under the shard lock, so a worker's removal is counted after its addition
        // and the total never wraps below zero.
        if added {
            self.workers.fetch_add(1, Ordering::Relaxed);
        }
        added
    }

    fn remove_worker(&self, worker: Worker) -> Option<Vec<RequestId>> {
        let mut shard = self.shards[self.shard_of(worker)].write();
        let dropped = shard.remove_worker(worker)?;
        self.workers.fetch_sub(1, Ordering::Relaxed);
        drop(shard);
        for id in &dropped {
            self.index.remove_if_same(id);
        }
        Some(dropped)
    }

    fn update_workers(&self, workers: impl IntoIterator<Item = Worker>) -> WorkerChanges {
        let wanted: HashSet<Worker, ahash::RandomState> = workers.into_iter().collect();
        let mut changes = WorkerChanges::default();
        for shard in self.shards.iter() {
            let stale: Vec<Worker> =
                shard.read().workers().filter(|worker| !wanted.contains(worker)).collect();
            for worker in stale {
                if let Some(requests) = self.remove_worker(worker) {
                    changes.removed.push(RemovedWorker { worker, requests });
                }
            }
        }
        let mut wanted: Vec<Worker> = wanted.into_iter().collect();
        wanted.sort_unstable();
        for worker in wanted {
            if self.add_worker(worker) {
                changes.added.push(worker);
            }
        }
        changes
    }

    fn expire_stale(&self) -> Vec<RequestId> {
        let Some(expiry) = self.expiry else { return Vec::new() };
        let now: Instant = self.clock.now();
        let mut expired = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            let workers: Vec<Worker> = shard.workers().collect();
            for worker in workers {
                if let Some(slot) = shard.slot_of(worker) {
                    shard.expire(slot, now, expiry, &mut expired);
                }
            }
        }
        for id in &expired {
            self.index.remove_if_same(id);
        }
        expired
    }

    fn potential_loads_into(
        &self,
        candidate: &[SequenceHash],
        isl: usize,
        overlaps: &OverlapScores,
        out: &mut Vec<PotentialLoad>,
    ) {
        // A query that finds the shards out of cache would take their locks one miss after
        // another (each lock is a read-modify-write the processor waits for): ask for every
        // shard's lock and header lines first, then do the work that needs none of them.
        for shard in self.shards.iter() {
            crate::prefetch::prefetch_all(shard);
        }
        crate::prefetch::prefetch_slice(candidate, 16);
        out.clear();
        out.reserve(self.workers.load(Ordering::Relaxed));
        let table = OverlapTable::new(overlaps);
        let block_size = self.block_size;
        let new_tokens = |worker| {
            let overlap = table.get(worker);
            (overlap, saturating_prefill_tokens(isl, overlap, block_size))
        };
        // Shards are read `TOGETHER` at a time, their tries walked in step so that the
        // walks' cache misses overlap. Their shared locks are taken without waiting: a query
        // never waits for one shard while holding another (with fair locks, two queries each
        // holding a shard the other waits for, behind a queued writer, would deadlock). Shards
        // a writer holds right now are read last, alone, so the wait overlaps other work.
        let mut busy = [0usize; 8];
        let mut busy_count = 0;
        for (group_at, group) in self.shards.chunks(TOGETHER).enumerate() {
            let guards: [Option<_>; TOGETHER] =
                std::array::from_fn(|at| group.get(at).and_then(|shard| shard.try_read()));
            let shards: [Option<&Shard>; TOGETHER] =
                std::array::from_fn(|at| guards[at].as_deref());
            Shard::potential_loads_together(&shards, candidate, new_tokens, out);
            let missed = std::array::from_fn::<bool, TOGETHER, _>(|at| guards[at].is_none());
            drop(guards);
            for (at, shard) in group.iter().enumerate().filter(|&(at, _)| missed[at]) {
                if busy_count < busy.len() {
                    busy[busy_count] = group_at * TOGETHER + at;
                    busy_count += 1;
                } else {
                    shard.read().potential_loads_into(candidate, new_tokens, out);
                }
            }
        }
        for &at in &busy[..busy_count] {
            read_soon(&self.shards[at]).potential_loads_into(candidate, new_tokens, out);
        }
    }

    fn loads_into(&self, out: &mut Vec<WorkerLoad>) {
        out.clear();
        for shard in self.shards.iter() {
            shard.read().loads_into(out);
        }
    }

    fn load(&self, worker: Worker) -> Option<WorkerLoad> {
        let shard = self.shards[self.shard_of(worker)].read();
        shard.load(shard.slot_of(worker)?)
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn assert_consistent(&self) {
        for shard in self.shards.iter() {
            shard.read().assert_consistent();
        }
        let live: usize = self
            .shards
            .iter()
            .map(|s| {
                let shard = s.read();
                shard
                    .workers()
                    .filter_map(|w| shard.load(shard.slot_of(w)?))
                    .map(|l| l.active_requests)
                    .sum::<usize>()
            })
            .sum();
        assert_eq!(self.index.len(), live, "every index entry names a live request");
        let workers: usize = self.shards.iter().map(|s| s.read().worker_count()).sum();
        assert_eq!(self.workers.load(Ordering::Relaxed), workers, "tracked-worker count");
    }
}

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
    pub(crate) inner: Arc<Inner>,
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
            .field("block_size", &self.inner.block_size)
            .field("expiry", &self.inner.expiry)
            .field("worker_shards", &self.inner.shard_count())
            .field("router_id", &self.inner.replica.as_ref().map(|r| r.router_id))
            .finish_non_exhaustive()
    }
}

impl MultiWorkerSequences {
    /// The tracker over `inner`, with peer lanes if replica sync is on: `lanes` of them, with
    /// their queues' capacity and whether they move apart (see [`start_lanes`]).
    pub(crate) fn from_parts(
        inner: Arc<Inner>,
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

/// Shared access to a shard a writer holds now. Writers hold a shard for a microsecond or two,
/// far less than parking and waking a reader costs (that wake-up was the query's p99 under
/// churn), so spin on `try_read` for a bounded while (~20 µs) before blocking.
fn read_soon<T>(lock: &RwLock<T>) -> impl std::ops::Deref<Target = T> + '_ {
    #[cfg(not(loom))]
    for _ in 0..256 {
        if let Some(guard) = lock.try_read() {
            return guard;
        }
        std::hint::spin_loop();
    }
    lock.read()
}
