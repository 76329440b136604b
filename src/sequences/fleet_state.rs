//! [`FleetState`]: the requests in flight on a whole fleet, the shared state behind
//! [`MultiWorkerSequences`](super::MultiWorkerSequences) (which the peer-event lanes hold too):
//! the worker shards, the request index and this replica's identity. With replica sync on, a
//! change made here is published to peers under the request's index-shard lock (see
//! [`FleetState::publish`]).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::clock::Clock;
use super::error::{AddRequestError, UnknownRequest, checked_prefill_tokens};
use super::load::{OverlapTable, PotentialLoad, WorkerLoad};
use super::replica::{PeerCounters, SequenceEvent, SequenceEventData, SequencePublisher};
use super::request_index::{Location, RequestIndex};
use super::shard::{Shard, TOGETHER};
use super::trie::LeafEdge;
use super::{RequestId, error::saturating_prefill_tokens, worker_hash};
use crate::event::{SequenceHash, Worker};
use crate::scores::OverlapScores;
use crate::sync::{AtomicUsize, Ordering, RwLock};

/// What [`MultiWorkerSequences::update_workers`](super::MultiWorkerSequences::update_workers)
/// changed.
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

/// See the [module docs](self).
pub(crate) struct FleetState {
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

/// Settings [`FleetState`] is built from (validated by the builder).
pub(crate) struct FleetConfig {
    pub(crate) block_size: u32,
    pub(crate) expiry: Option<Duration>,
    pub(crate) worker_shards: usize,
    pub(crate) request_shards: usize,
    pub(crate) clock: Box<dyn Clock>,
    pub(crate) replica: Option<Replica>,
}

impl FleetState {
    pub(crate) fn new(config: FleetConfig) -> Self {
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

    pub(crate) fn expiry(&self) -> Option<Duration> {
        self.expiry
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
        let blocks = blocks.unwrap_or_default();
        let mut leaves_at = None;
        self.warm(shard_at, |shard| {
            if let Some(slot) = shard.slot_of(worker) {
                leaves_at = Some(shard.warm_add(slot, blocks));
            }
        });
        // The new leaf's blocks are copied here, outside every lock (see `LeafEdge`); one that
        // a concurrent change made stale is dropped at the end, after the locks.
        let mut leaf = leaves_at.and_then(|at| LeafEdge::copy(blocks, at));
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
        let Some(record) =
            shard.add_request(slot, id.clone(), blocks, prefill_tokens, now, &mut leaf)
        else {
            return Err(AddRequestError::UnknownWorker { worker });
        };
        unlock(shard);
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
        unlock(shard);
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

    pub(crate) fn worker_of(&self, id: &RequestId) -> Option<Worker> {
        let ids = self.index.shard(id.as_str()).lock();
        let (key, &location) = ids.get_key_value(id.as_str())?;
        let shard = self.shards[location.shard as usize].read();
        let record = shard.record(location.slot, location.record)?;
        record.id.same_allocation(key).then(|| shard.worker(location.slot)).flatten()
    }

    pub(crate) fn add_worker(&self, worker: Worker) -> bool {
        let mut shard = self.shards[self.shard_of(worker)].write();
        let added = shard.add_worker(worker).1;
        // Counted under the shard lock, so a worker's removal is counted after its addition
        // and the total never wraps below zero.
        if added {
            self.workers.fetch_add(1, Ordering::Relaxed);
        }
        added
    }

    pub(crate) fn remove_worker(&self, worker: Worker) -> Option<Vec<RequestId>> {
        let mut shard = self.shards[self.shard_of(worker)].write();
        let dropped = shard.remove_worker(worker)?;
        self.workers.fetch_sub(1, Ordering::Relaxed);
        drop(shard);
        for id in &dropped {
            self.index.remove_if_same(id);
        }
        Some(dropped)
    }

    pub(crate) fn update_workers(
        &self,
        workers: impl IntoIterator<Item = Worker>,
    ) -> WorkerChanges {
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

    pub(crate) fn expire_stale(&self) -> Vec<RequestId> {
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

    pub(crate) fn potential_loads_into(
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

    pub(crate) fn loads_into(&self, out: &mut Vec<WorkerLoad>) {
        out.clear();
        for shard in self.shards.iter() {
            shard.read().loads_into(out);
        }
    }

    pub(crate) fn load(&self, worker: Worker) -> Option<WorkerLoad> {
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

/// Releases a shard's exclusive lock, then frees the edges its trie retired under it: freeing
/// sometimes takes malloc's slow path, and queries wait for the shard's lock.
fn unlock(mut shard: impl std::ops::DerefMut<Target = Shard>) {
    let retired = shard.take_retired();
    drop(shard);
    drop(retired);
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
