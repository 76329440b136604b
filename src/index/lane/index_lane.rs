//! [`IndexLane`]: applies the events of the workers assigned to one lane.
//!
//! The lane owns its workers' engine-hash maps ([`HeldBlocks`]) and its [`LaneTrie`] outright
//! (no lock); queries read the lane's runs through its
//! [`RunTable`](crate::index::runs::run_table::RunTable). Each event is all-or-nothing for
//! `Stored` (the whole chain is validated before anything changes) and best-effort for
//! `Removed` (unknown blocks are skipped and reported), exactly like the reference index.
//!
//! A panic while the lane applies an event (a bug) costs only its own workers: the lane clears
//! them and starts over empty ([`crate::index::LaneRestart`]). Workers the lane stops knowing
//! lose their routes once its queue is empty ([`Routes`]).

use std::collections::{HashMap, HashSet};

use crossbeam_utils::CachePadded;

use crate::event::{ApplyError, ApplyErrorKind, KvEventData, RouterEvent, SequenceHash};
use crate::event::{StoredBlock, Worker, WorkerId};
use crate::index::lane::chain::{Chain, PREFETCH_AHEAD};
use crate::index::lane::handback::Handback;
use crate::index::lane::held_blocks::HeldBlocks;
use crate::index::lane::lane_trie::{LaneTrie, shed};
use crate::index::lane::node_ids::NodeId;
use crate::index::lane::restarts::{LaneRestart, RestartLog};
use crate::index::lane::routes::Routes;
use crate::index::lane::seq_hashes::SeqHashes;
use crate::index::lane::spent::{SPENT_BATCH, SpentList};
use crate::index::lane::worker_dump::dump_lane;
use crate::mix::Mixer;
use crate::pool::Lane;
use crate::prefetch::prefetch_slice;
use crate::sync::epoch::{self, Guard};
use crate::sync::{Arc, AtomicU64, AtomicUsize, Mutex, Ordering};

/// A lane reserves allocator room (see [`IndexLane::reserve_heap_as_it_grows`]) when its tree
/// first holds this many blocks (about a megabyte of index), and again at each doubling.
const HEAP_RESERVE_FROM: usize = 16_384;

/// Room reserved per block of the tree at each doubling: about what a block costs the index, so
/// one reservation covers the growth to the next and little of it is left unused.
const HEAP_ROOM_PER_BLOCK: usize = 64;

/// How many lines of an event's block list [`IndexLane::farther`] prefetches (32 stored blocks).
const PAYLOAD_LINES: usize = 8;

/// Tests make a lane panic with an event of this id (a stand-in for a bug in the lane).
#[cfg(test)]
pub(crate) const INJECTED_PANIC: u64 = 0x5EED_DEAD_0000_0001;

/// Counters one lane publishes (only that lane writes them).
#[derive(Default)]
pub(crate) struct LaneCounters {
    pub(crate) events: AtomicU64,
    pub(crate) block_ops: AtomicU64,
    pub(crate) errors: [AtomicU64; ApplyErrorKind::ALL.len()],
    pub(crate) entries: AtomicU64,
    pub(crate) nodes: AtomicU64,
    pub(crate) runs: AtomicU64,
    pub(crate) bytes: AtomicU64,
}

impl LaneCounters {
    fn bump(counter: &AtomicU64, by: u64) {
        // Single writer: a load and a store, no read-modify-write needed.
        counter.store(counter.load(Ordering::Relaxed) + by, Ordering::Relaxed);
    }
}

/// How many (worker, dp_rank) pairs the lanes know, against the configured maximum.
pub(crate) struct WorkerBudget {
    pub(crate) known: AtomicUsize,
    pub(crate) max: usize,
}

/// One lane's state; see the [module docs](self).
pub(crate) struct IndexLane {
    /// This lane's index in the pool, where it records restarts, and the pool's routes.
    lane: usize,
    restarts: Arc<Mutex<RestartLog>>,
    routes: Arc<Routes>,
    /// Workers this lane had events for but does not know (any more): their routes go once the
    /// lane is quiet (see [`Routes::try_drop`]).
    gone: HashSet<Worker, ahash::RandomState>,
    trie: LaneTrie,
    workers: HashMap<Worker, HeldBlocks, ahash::RandomState>,
    /// The pool's secret mixer, for the workers' maps.
    mixer: Mixer,
    budget: Arc<WorkerBudget>,
    counters: Arc<CachePadded<LaneCounters>>,
    /// Block lists of applied events not yet handed back (see [`SpentList`]), where they go,
    /// and events applied since the last hand-over.
    spent: Vec<SpentList>,
    spent_out: Arc<Handback<SpentList>>,
    applied: usize,
    /// The most allocator room to reserve at once (0: none), and the tree size at which to
    /// reserve next (see [`Self::reserve_heap_as_it_grows`]).
    heap_reserve: usize,
    reserve_at: usize,
    /// Reused buffers of one event: what checking a `Stored` chain found, and the nodes a
    /// `Removed` drops.
    chain: Chain,
    nodes: Vec<NodeId>,
}

impl Lane for IndexLane {
    type Message = RouterEvent;

    fn handle(&mut self, event: RouterEvent) {
        let ops = event.block_ops() as u64;
        if let Err(error) = self.apply(&event) {
            LaneCounters::bump(&self.counters.errors[error.kind().index()], 1);
            if !self.workers.contains_key(&event.worker()) {
                // Never admitted, or unknown: its route is not needed.
                self.gone.insert(event.worker());
            }
        }
        #[cfg(test)]
        if event.event.event_id == INJECTED_PANIC {
            // After the event changed the lane's state: recovery must undo it.
            panic!("a panic injected by a test, after applying {event:?}");
        }
        self.trim();
        if self.heap_reserve > 0 && self.trie.node_count() >= self.reserve_at {
            let room = self.reserve_at.saturating_mul(HEAP_ROOM_PER_BLOCK);
            crate::pool::heap_room::reserve(room.min(self.heap_reserve));
            self.reserve_at = self.reserve_at.saturating_mul(2);
        }
        LaneCounters::bump(&self.counters.events, 1);
        LaneCounters::bump(&self.counters.block_ops, ops);
        self.spent.extend(SpentList::of(event));
        self.applied += 1;
    }

    /// The block list of the event after next: the producer wrote it on another core, and
    /// [`Self::ahead`] reads it next to find the buckets to prefetch.
    fn farther(&self, message: &RouterEvent) {
        match &message.event.data {
            KvEventData::Stored { blocks, .. } => prefetch_slice(blocks, PAYLOAD_LINES),
            KvEventData::Removed { blocks } => prefetch_slice(blocks, PAYLOAD_LINES),
            KvEventData::Cleared => {}
        }
    }

    /// The worker map's buckets of the next event's parent and first blocks: for short events
    /// (a dozen blocks) those are most of its lookups, and [`Chain::check`]'s own prefetch,
    /// [`PREFETCH_AHEAD`] blocks ahead, starts too late for them.
    fn ahead(&self, next: &RouterEvent) {
        let Some(held) = self.workers.get(&next.worker()) else { return };
        match &next.event.data {
            KvEventData::Stored { parent, blocks } => {
                if let Some(parent) = parent {
                    held.prefetch(parent.0);
                }
                let names = blocks.iter().take(PREFETCH_AHEAD);
                names.for_each(|block| held.prefetch(block.hash.0));
            }
            KvEventData::Removed { blocks } => {
                blocks.iter().take(PREFETCH_AHEAD).for_each(|name| held.prefetch(name.0));
            }
            KvEventData::Cleared => {}
        }
    }

    /// Every [`SPENT_BATCH`] events: hands their lists over and calls a producer to free them.
    fn wants_producer(&mut self) -> bool {
        if self.applied < SPENT_BATCH {
            return false;
        }
        self.hand_over_spent();
        true
    }

    /// Clears the lane's workers and starts over with an empty tree (see
    /// [`crate::index::LaneRestart`]); nothing of the state a panic left behind is trusted but
    /// the list of workers (a map stays valid through a panic) and the table's slots.
    fn recover(&mut self) -> bool {
        let mut cleared: Vec<Worker> = self.workers.keys().copied().collect();
        cleared.sort_unstable();
        self.trie.reset();
        self.workers = HashMap::default();
        self.budget.known.fetch_sub(cleared.len(), Ordering::Relaxed);
        (self.chain, self.nodes) = (Chain::default(), Vec::new());
        self.publish_sizes();
        self.gone.extend(&cleared);
        let restart = LaneRestart { lane: self.lane, at: std::time::SystemTime::now(), cleared };
        self.restarts.lock().record(restart);
        true
    }

    /// Drops the routes of the workers gone from this lane, now that no event for them can be
    /// queued.
    fn quiet(&mut self, queued: &dyn Fn() -> usize, own_sends: usize) {
        if self.gone.is_empty() {
            return;
        }
        let workers = &self.workers;
        let gone = self.gone.iter().copied().filter(|worker| !workers.contains_key(worker));
        if self.routes.try_drop(self.lane, gone, queued, own_sends) {
            self.gone.clear();
        }
    }

    fn idle(&mut self) {
        self.hand_over_spent();
        self.publish_sizes();
        // Let the epoch see this lane's last batch now, rather than at its next event.
        epoch::pin().flush();
        self.trie.reclaim();
    }
}

impl IndexLane {
    pub(crate) fn new(
        (lane, restarts, routes): (usize, Arc<Mutex<RestartLog>>, Arc<Routes>),
        mixer: Mixer,
        trie: LaneTrie,
        budget: Arc<WorkerBudget>,
        counters: Arc<CachePadded<LaneCounters>>,
        spent_out: Arc<Handback<SpentList>>,
    ) -> Self {
        Self {
            lane,
            restarts,
            routes,
            gone: HashSet::default(),
            trie,
            workers: HashMap::default(),
            mixer,
            budget,
            counters,
            spent: Vec::new(),
            spent_out,
            applied: 0,
            heap_reserve: 0,
            reserve_at: HEAP_RESERVE_FROM,
            chain: Chain::default(),
            nodes: Vec::new(),
        }
    }

    /// Has the lane reserve allocator room on its thread (see `pool/heap_room.rs`) when its tree
    /// passes [`HEAP_RESERVE_FROM`] blocks and at each doubling after, room for as much again
    /// as the tree (at most `bytes` at once): a lane filling a large index grows its heap
    /// without a system call per page. Small pools (tests, a lower tier that sees few events)
    /// never reserve, and what a reservation touches but the lane never grows into stays a
    /// small share of its memory: in the `conversation` comparison, 16 MiB reserved at once
    /// left about 7 B per live entry resident, these steps none measurable (`documents`: 2 B).
    pub(crate) fn reserve_heap_as_it_grows(&mut self, bytes: usize) {
        self.heap_reserve = bytes;
    }

    /// Hands the applied events' block lists over for a producer to free.
    fn hand_over_spent(&mut self) {
        self.applied = 0;
        self.spent_out.hand_over(&mut self.spent);
    }

    pub(crate) fn apply(&mut self, event: &RouterEvent) -> Result<(), ApplyError> {
        let worker = event.worker();
        let guard = epoch::pin();
        let applied = match &event.event.data {
            KvEventData::Stored { parent, blocks } => self.store(worker, *parent, blocks, &guard),
            KvEventData::Removed { blocks } => self.remove(worker, blocks, &guard),
            KvEventData::Cleared => match self.workers.get_mut(&worker) {
                Some(held) => {
                    let held = std::mem::replace(held, HeldBlocks::new(self.mixer));
                    self.release_all(worker, &held, &guard);
                    Ok(())
                }
                None => Err(ApplyError::UnknownWorker { worker }),
            },
        };
        self.trie.end_event(&guard);
        applied
    }

    fn store(
        &mut self,
        worker: Worker,
        parent: Option<SequenceHash>,
        blocks: &[StoredBlock],
        guard: &Guard,
    ) -> Result<(), ApplyError> {
        // One lookup of a known worker for the whole event.
        let known = self.workers.get_mut(&worker);
        let start = match parent {
            None => None,
            Some(parent) => match known.as_deref().and_then(|h| h.get(parent.0, &self.trie)) {
                Some(node) => Some(node),
                None => return Err(ApplyError::UnknownParent { worker, parent }),
            },
        };
        if blocks.len() > self.trie.room() {
            // Blocks already in the tree would take no room, so this may refuse a little early;
            // it never lets ids or offsets overflow.
            let capacity = self.trie.capacity();
            return Err(ApplyError::IndexFull { worker, blocks: blocks.len(), capacity });
        }
        let created = known.is_none();
        let held = match known {
            Some(held) => held,
            None => {
                if self.budget.known.fetch_add(1, Ordering::Relaxed) >= self.budget.max {
                    self.budget.known.fetch_sub(1, Ordering::Relaxed);
                    return Err(ApplyError::TooManyWorkers { worker, capacity: self.budget.max });
                }
                self.workers.entry(worker).or_insert(HeldBlocks::new(self.mixer))
            }
        };
        let chain = &mut self.chain;
        if let Err(block) = chain.check((worker, held), &mut self.trie, start, blocks, guard) {
            if created {
                // A rejected first event registers nobody.
                self.workers.remove(&worker);
                self.budget.known.fetch_sub(1, Ordering::Relaxed);
            }
            return Err(ApplyError::HashConflict { worker, block });
        }
        chain.apply(worker, &mut self.trie, guard);
        Ok(())
    }

    fn remove(
        &mut self,
        worker: Worker,
        blocks: &[SequenceHash],
        guard: &Guard,
    ) -> Result<(), ApplyError> {
        let Some(held) = self.workers.get_mut(&worker) else {
            return Err(ApplyError::UnknownWorker { worker });
        };
        let mut unknown = 0;
        let mut first = None;
        self.nodes.clear();
        for (at, &hash) in blocks.iter().enumerate() {
            if let Some(ahead) = blocks.get(at + PREFETCH_AHEAD) {
                held.prefetch(ahead.0);
            }
            match held.remove(hash.0, &self.trie) {
                Some(node) => self.nodes.push(node),
                None => {
                    unknown += 1;
                    first.get_or_insert(hash);
                }
            }
        }
        self.trie.release(worker, &self.nodes, guard);
        match first {
            None => Ok(()),
            Some(first) => Err(ApplyError::UnknownBlocks { worker, first, count: unknown }),
        }
    }

    /// Keeps memory in line with the live state after large events or mass removals.
    fn trim(&mut self) {
        if self.trie.sparse() {
            let renamed = self.trie.compact();
            for held in self.workers.values_mut() {
                held.nodes_mut().for_each(|node| *node = renamed[*node as usize]);
            }
        }
        // Reused buffers an unusually large event grew give their memory back.
        self.chain.shed();
        shed(&mut self.nodes);
        self.trie.trim_buffers();
    }

    /// Drops `worker` as a holder of every block in `held`, already taken out of its map.
    fn release_all(&mut self, worker: Worker, held: &HeldBlocks, guard: &Guard) {
        self.nodes.clear();
        self.nodes.extend(held.nodes());
        self.trie.release(worker, &self.nodes, guard);
    }

    /// Forgets the workers `matches` selects; returns them.
    pub(crate) fn remove_workers(&mut self, matches: impl Fn(Worker) -> bool) -> Vec<Worker> {
        let doomed: Vec<Worker> = self.workers.keys().copied().filter(|&w| matches(w)).collect();
        for worker in &doomed {
            let guard = epoch::pin();
            let held = self.workers.remove(worker).expect("listed above");
            self.release_all(*worker, &held, &guard);
            self.trie.forget_worker(*worker);
            self.trie.end_event(&guard);
            self.budget.known.fetch_sub(1, Ordering::Relaxed);
        }
        self.gone.extend(&doomed);
        self.trim();
        self.publish_sizes();
        doomed
    }

    /// Forgets every rank of `id`.
    pub(crate) fn remove_worker_id(&mut self, id: WorkerId) -> Vec<Worker> {
        self.remove_workers(|worker| worker.id == id)
    }

    /// The longest run of the lane's tree, for tests.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn longest_run(&self) -> usize {
        self.trie.longest_run()
    }

    /// The lane's workers.
    pub(crate) fn workers(&self) -> impl Iterator<Item = Worker> + '_ {
        self.workers.keys().copied()
    }

    /// Per worker: each engine hash it holds with our sequence hash of the block.
    pub(crate) fn snapshot(&self) -> Vec<(Worker, Vec<(SequenceHash, SequenceHash)>)> {
        let guard = epoch::pin();
        let mut seqs = SeqHashes::new(&self.trie, &guard);
        self.workers
            .iter()
            .map(|(&worker, held)| {
                let blocks =
                    held.iter(&self.trie).map(|(hash, node)| (SequenceHash(hash), seqs.seq(node)));
                (worker, blocks.collect())
            })
            .collect()
    }

    /// Events that rebuild this lane's workers (see [`dump_lane`]).
    pub(crate) fn dump_events(&self) -> Vec<RouterEvent> {
        dump_lane(self.workers.iter(), &self.trie, &epoch::pin())
    }

    fn publish_sizes(&mut self) {
        let entries: usize = self.workers.values().map(HeldBlocks::len).sum();
        let trie_bytes = self.trie.bytes(&epoch::pin());
        let bytes = self.workers.values().map(HeldBlocks::bytes).sum::<usize>() + trie_bytes;
        self.counters.entries.store(entries as u64, Ordering::Relaxed);
        self.counters.nodes.store(self.trie.node_count() as u64, Ordering::Relaxed);
        self.counters.runs.store(self.trie.run_count() as u64, Ordering::Relaxed);
        self.counters.bytes.store(bytes as u64, Ordering::Relaxed);
    }
}
