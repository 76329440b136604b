//! [`EventPool`]: the concurrent index and the lanes that feed it.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::event::{ApplyErrorKind, LocalBlockHash, RouterEvent, Worker, WorkerId};
use crate::index::lane::handback::Handback;
use crate::index::lane::index_lane::{IndexLane, LaneCounters, WorkerBudget};
use crate::index::lane::lane_trie::{LaneTrie, TrieLimits};
use crate::index::lane::restarts::{LaneRestart, RestartLog};
use crate::index::lane::routes::Routes;
use crate::index::lane::spent::{HANDED_MAX, SpentList};
use crate::index::pool_config::{PoolConfig, PoolConfigError};
use crate::index::runs::run_table::{RunTable, RunTableWriter};
use crate::index::walk::{prefetch_query, walk_lanes};
use crate::index::{IndexSnapshot, OverlapScores};
use crate::mix::Mixer;
use crate::pool::{LaneDown, LaneMode, Lanes, TrySend};
use crate::sync::{Arc, AtomicU64, AtomicUsize, Mutex, Ordering, epoch};

/// How many handed-back block lists each lane's [`Handback`] frees per submitted event: twice
/// what the lanes hand back per event, so the lists never pile up.
const FREED_PER_EVENT: usize = 2;

/// Why [`EventPool::apply`] did not take an event.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubmitError {
    /// The worker's lane queue is full; the event comes back. Retry, or use
    /// [`EventPool::apply_blocking`] to wait for room.
    QueueFull(RouterEvent),
    /// The worker's lane has stopped (it panicked and could not start over); the event comes
    /// back.
    LaneDown(RouterEvent),
    /// The event carries more blocks than [`PoolConfig::max_event_blocks`]; it comes back (and
    /// is counted in [`PoolStats::errors`]).
    TooManyBlocks(RouterEvent),
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::QueueFull(_) => f.write_str("the worker's lane queue is full"),
            Self::LaneDown(_) => f.write_str("the index lanes have stopped"),
            Self::TooManyBlocks(event) => {
                write!(f, "an event of {} blocks is more than the index takes", event.block_ops())
            }
        }
    }
}

impl std::error::Error for SubmitError {}

/// Why [`EventPool::apply_blocking`] (or [`TieredIndex::apply_blocking`](super::TieredIndex::apply_blocking),
/// [`KvRouter::apply_event`](crate::KvRouter::apply_event)) did not take an event.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnqueueError {
    /// The worker's lane has stopped (it panicked and could not start over).
    LaneDown,
    /// The event carries more blocks than [`PoolConfig::max_event_blocks`]; it comes back
    /// unqueued (and is counted in [`PoolStats::errors`]). [`RouterEvent::split`] cuts it into
    /// events the index takes.
    TooManyBlocks(RouterEvent),
}

impl fmt::Display for EnqueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LaneDown => f.write_str("the index lanes have stopped"),
            Self::TooManyBlocks(event) => {
                write!(f, "an event of {} blocks is more than the index takes", event.block_ops())
            }
        }
    }
}

impl std::error::Error for EnqueueError {}

impl From<LaneDown> for EnqueueError {
    fn from(_: LaneDown) -> Self {
        Self::LaneDown
    }
}

/// What an [`EventPool`] has done and holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Events applied (successfully or not).
    pub events: u64,
    /// Block operations in those events.
    pub block_ops: u64,
    /// Rejected events, by [`ApplyErrorKind::index`].
    pub errors: [u64; ApplyErrorKind::ALL.len()],
    /// Live (worker, block) entries, as of each lane's last idle moment.
    pub live_entries: u64,
    /// Live tree nodes, summed over lanes (a prefix two lanes' workers share counts twice).
    pub nodes: u64,
    /// Live runs (chains of nodes with the same holders) the nodes form, summed over lanes: a
    /// query visits one run per stretch of matched blocks.
    pub runs: u64,
    /// Approximate heap bytes: the lanes' trees and run tables plus every worker's block map.
    pub bytes: u64,
    /// Lanes that panicked applying an event and started over, clearing their workers.
    pub lane_restarts: u64,
    /// The latest of those restarts (up to 16), oldest first: which lane, when, whom it cleared.
    pub recent_restarts: Vec<LaneRestart>,
}

impl PoolStats {
    /// Rejected events of one kind.
    pub fn errors_of(&self, kind: ApplyErrorKind) -> u64 {
        self.errors[kind.index()]
    }
}

/// The concurrent prefix index: queries on the caller's thread, writes through sticky lanes.
///
/// Every event of one (worker, dp_rank) goes to the same lane while the lane knows the worker
/// or has events of it queued, so it applies in order; different workers apply in parallel.
/// A worker the lanes forget (removed, never admitted) loses its route, and comes back on the
/// least loaded lane. Each lane keeps the tree of its own
/// workers' blocks, so lanes never write the same memory. [`EventPool::find_matches`] never
/// waits for a lane: it walks each lane's tree without locks and merges the answers.
///
/// An applied event's block list is freed by a thread that applies events (the next `apply`,
/// `apply_blocking` or `flush`, or a producer waiting for room), not on the lane: the producer
/// allocated it, and with glibc's allocator a free on another thread waits for the producer's
/// arena lock. Up to a few thousand lists per lane wait for that; the pool's drop frees the rest.
///
/// A lane that panics applying an event (a bug) starts over empty: its workers drop out of
/// answers at once, as if cleared, and [`PoolStats::recent_restarts`] names them; every other
/// lane, and every call, goes on (see [`LaneRestart`]).
///
/// ```
/// use kvroute::index::{EventPool, PoolConfig};
/// use kvroute::{LocalBlockHash, RouterEvent, StoredBlock, Worker};
///
/// let pool = EventPool::new(PoolConfig::default())?;
/// let worker = Worker::new(1, 0);
/// let blocks = vec![StoredBlock::new(11, 1001), StoredBlock::new(12, 1002)];
/// pool.apply(RouterEvent::stored(worker, 0, None, blocks))?;
/// pool.flush()?;
/// let query = [LocalBlockHash(11), LocalBlockHash(12), LocalBlockHash(13)];
/// assert_eq!(pool.find_matches(&query).get(worker), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EventPool {
    tables: Vec<Arc<RunTable>>,
    lanes: Lanes<IndexLane>,
    counters: Vec<Arc<CachePadded<LaneCounters>>>,
    /// Block lists of the events each lane has applied, for the producers to free.
    spent: Vec<Arc<Handback<SpentList>>>,
    routes: Arc<Routes>,
    /// [`PoolConfig::max_event_blocks`], and the events rejected for it.
    max_event_blocks: usize,
    oversized: AtomicU64,
    /// The (worker, dp_rank) pairs the lanes know, which sizes a query's answer.
    budget: Arc<WorkerBudget>,
    restarts: Arc<Mutex<RestartLog>>,
}

impl EventPool {
    /// Checks `config` ([`PoolConfig::validate`]) and starts the lanes. Fails with a typed
    /// error, leaving nothing running, on bad sizes or when the OS will not start a thread.
    pub fn new(config: PoolConfig) -> Result<Self, PoolConfigError> {
        Self::with_limits(config, TrieLimits::default())
    }

    /// [`Self::new`] with the lanes' trees limited to `limits` (tests shrink them).
    fn with_limits(config: PoolConfig, limits: TrieLimits) -> Result<Self, PoolConfigError> {
        config.validate()?;
        let lanes = config.lanes;
        let budget = Arc::new(WorkerBudget { known: AtomicUsize::new(0), max: config.max_workers });
        let mixer = Mixer::random();
        let mut writers: Vec<_> = (0..lanes).map(|_| Some(RunTableWriter::new(mixer))).collect();
        let tables: Vec<_> = writers.iter().flatten().map(|w| w.table().clone()).collect();
        let counters: Vec<_> =
            (0..lanes).map(|_| Arc::new(CachePadded::new(LaneCounters::default()))).collect();
        let spent: Vec<_> = (0..lanes).map(|_| Arc::new(Handback::new(HANDED_MAX))).collect();
        let restarts = Arc::new(Mutex::new(RestartLog::default()));
        let routes = Arc::new(Routes::new(lanes));
        let queues = (config.queue_capacity, config.spread_lanes);
        let pool = Lanes::new(config.mode, lanes, queues, |lane| {
            let table = writers[lane].take().expect("one lane per writer");
            let trie = LaneTrie::with_limits(table, limits);
            let counters = counters[lane].clone();
            let log = (lane, restarts.clone(), routes.clone());
            let mut lane =
                IndexLane::new(log, mixer, trie, budget.clone(), counters, spent[lane].clone());
            // Lanes of their own only: an inline lane allocates on its callers' threads.
            if config.mode == LaneMode::Threads {
                lane.reserve_heap_as_it_grows(config.lane_heap_reserve);
            }
            lane
        })?;
        Ok(Self {
            tables,
            lanes: pool,
            counters,
            spent,
            routes,
            max_event_blocks: config.max_event_blocks,
            oversized: AtomicU64::new(0),
            budget,
            restarts,
        })
    }

    /// The lane of `worker` (placed now if new), for tests.
    #[cfg(all(test, not(loom)))]
    fn lane_of(&self, worker: Worker) -> usize {
        self.routes.with_lane(worker, |lane| lane)
    }

    /// Whether `event` carries more blocks than one event may; if so, it is counted.
    fn oversized(&self, event: &RouterEvent) -> bool {
        let over = event.block_ops() > self.max_event_blocks;
        if over {
            self.oversized.fetch_add(1, Ordering::Relaxed);
        }
        over
    }

    /// Enqueues `event` on its worker's lane without waiting. A full queue returns the event in
    /// [`SubmitError::QueueFull`]. Whether the event itself is valid is found out on the lane;
    /// rejected events are counted in [`PoolStats::errors`].
    pub fn apply(&self, event: RouterEvent) -> Result<(), SubmitError> {
        self.free_some_spent();
        if self.oversized(&event) {
            return Err(SubmitError::TooManyBlocks(event));
        }
        let sent = self.routes.with_lane(event.worker(), |lane| self.lanes.try_send(lane, event));
        match sent {
            Ok(()) => Ok(()),
            Err(TrySend::Full(event)) => Err(SubmitError::QueueFull(event)),
            Err(TrySend::Down(event)) => Err(SubmitError::LaneDown(event)),
        }
    }

    /// Enqueues `event`. If its lane's queue is full, waits until the lane takes its next batch
    /// (or has worked the queue down to half), so a producer that outruns the lanes wakes once
    /// per batch rather than once per event (each wakeup would cost the lane a system call and
    /// the cores a context switch). An event over [`PoolConfig::max_event_blocks`] is refused
    /// at once ([`EnqueueError::TooManyBlocks`]) and counted in [`PoolStats::errors`].
    pub fn apply_blocking(&self, event: RouterEvent) -> Result<(), EnqueueError> {
        self.free_some_spent();
        if self.oversized(&event) {
            return Err(EnqueueError::TooManyBlocks(event));
        }
        let sent = self.routes.with_lane(event.worker(), |lane| {
            self.lanes.send_with(lane, event, || self.free_spent())
        });
        Ok(sent?)
    }

    /// [`Self::apply_blocking`] of `event` cut into pieces this pool takes
    /// ([`RouterEvent::split`]): for producers whose events may be longer than one event may
    /// be (approximate mode, snapshot restores, recovered streams).
    pub fn apply_split(&self, event: RouterEvent) -> Result<(), LaneDown> {
        for piece in event.split(self.max_event_blocks) {
            self.apply_blocking(piece).map_err(|_| LaneDown)?;
        }
        Ok(())
    }

    /// Blocks one event may carry here ([`PoolConfig::max_event_blocks`]).
    pub fn max_event_blocks(&self) -> usize {
        self.max_event_blocks
    }

    /// Returns once every event enqueued before the call is visible to queries.
    pub fn flush(&self) -> Result<(), LaneDown> {
        let flushed = self.lanes.flush();
        self.free_spent();
        flushed
    }

    /// Frees the block lists of applied events the lanes handed back (see `index/lane/spent.rs`).
    fn free_spent(&self) {
        self.spent.iter().for_each(|spent| spent.drop_handed_over());
    }

    /// Frees a few of those lists per lane: enough to keep up with the lanes (a lane hands
    /// back at most one list per event), and few enough that the producer's next allocations
    /// reuse what it just freed (see [`Handback::drop_some`]).
    fn free_some_spent(&self) {
        self.spent.iter().for_each(|spent| spent.drop_some(FREED_PER_EVENT));
    }

    /// Per worker, the number of leading blocks of `query` it holds.
    pub fn find_matches(&self, query: &[LocalBlockHash]) -> OverlapScores {
        // The query's lines load while the answer is allocated.
        prefetch_query(query);
        // One allocation for most answers (a query that matches more than 64 workers grows it).
        let known = self.budget.known.load(Ordering::Relaxed);
        let mut scores = Vec::with_capacity(known.clamp(1, 64));
        self.walk_into(query, &mut scores);
        OverlapScores::from_pairs(scores)
    }

    /// [`Self::find_matches`] into a reused buffer of `(worker, depth)` pairs (cleared first):
    /// the router's allocation-free path.
    pub(crate) fn find_matches_into(&self, query: &[LocalBlockHash], out: &mut Vec<(Worker, u32)>) {
        prefetch_query(query);
        out.clear();
        self.walk_into(query, out);
    }

    /// Appends the answer to `query` to `out`.
    fn walk_into(&self, query: &[LocalBlockHash], out: &mut Vec<(Worker, u32)>) {
        let guard = epoch::pin();
        walk_lanes(&self.tables, query, &guard, out);
    }

    /// Like [`Self::find_matches`], but as if the walk stopped once a single worker still
    /// matched: that worker's depth is then a lower bound (one past the runner-up's). The answer
    /// equals the reference's early-exit walk; it is derived from the full walk, which compares
    /// whole runs and so costs little more.
    pub fn find_matches_early_exit(&self, query: &[LocalBlockHash]) -> OverlapScores {
        let mut scores = self.find_matches(query).into_pairs();
        // The walk stops once one worker is left: right after the runner-up drops out.
        let (mut best, mut second): (Option<usize>, u32) = (None, 0);
        for (at, &(_, depth)) in scores.iter().enumerate() {
            match best {
                Some(top) if depth <= scores[top].1 => second = second.max(depth),
                _ => {
                    second = best.map_or(0, |top| scores[top].1);
                    best = Some(at);
                }
            }
        }
        if let Some(best) = best.filter(|&b| scores[b].1 > second) {
            scores[best].1 = second + 1;
        }
        OverlapScores::from_pairs(scores)
    }

    /// Forgets one (worker, dp_rank) after the events already enqueued for it. Returns whether
    /// it was known.
    pub fn remove_worker_dp_rank(&self, worker: Worker) -> Result<bool, LaneDown> {
        // No route: unknown to every lane, with no event on its way.
        let Some(lane) = self.routes.lane(worker) else { return Ok(false) };
        let removed = self.lanes.run_on_lane(lane, move |l| l.remove_workers(|w| w == worker))?;
        Ok(!removed.is_empty())
    }

    /// Forgets every dp_rank of `id`. Returns how many (worker, dp_rank) pairs were removed.
    pub fn remove_worker(&self, id: WorkerId) -> Result<usize, LaneDown> {
        let removed = self.lanes.run_on_all(move |lane| lane.remove_worker_id(id).len())?;
        Ok(removed.into_iter().sum())
    }

    /// Every known (worker, dp_rank), sorted, after the events enqueued before the call.
    pub fn workers(&self) -> Result<Vec<Worker>, LaneDown> {
        let lists = self.lanes.run_on_all(|lane| lane.workers().collect::<Vec<_>>())?;
        let mut workers: Vec<Worker> = lists.into_iter().flatten().collect();
        workers.sort_unstable();
        Ok(workers)
    }

    /// Per worker, each engine hash it holds with our sequence hash of that block's prefix:
    /// compare with [`crate::index::ReferenceIndex::snapshot`].
    pub fn snapshot(&self) -> Result<IndexSnapshot, LaneDown> {
        let parts = self.lanes.run_on_all(|lane| lane.snapshot())?;
        let snapshot = parts.into_iter().flatten();
        Ok(snapshot.map(|(worker, blocks)| (worker, blocks.into_iter().collect())).collect())
    }

    /// Events that rebuild an equal index when applied to an empty one, taken after the events
    /// enqueued before the call (each lane dumps its workers at one point of its queue).
    pub fn dump_events(&self) -> Result<Vec<RouterEvent>, LaneDown> {
        let parts = self.lanes.run_on_all(|lane| lane.dump_events())?;
        // A chain of runs can be longer than one event may be: dumped in pieces this pool takes.
        let max = self.max_event_blocks;
        Ok(parts.into_iter().flatten().flat_map(|event| event.split(max)).collect())
    }

    /// Counters and sizes. Entries, nodes, runs and bytes are as of each lane's last idle
    /// moment (exact after [`Self::flush`]).
    pub fn stats(&self) -> PoolStats {
        let mut stats = PoolStats::default();
        for counters in &self.counters {
            stats.events += counters.events.load(Ordering::Relaxed);
            stats.block_ops += counters.block_ops.load(Ordering::Relaxed);
            for (total, count) in stats.errors.iter_mut().zip(&counters.errors) {
                *total += count.load(Ordering::Relaxed);
            }
            stats.live_entries += counters.entries.load(Ordering::Relaxed);
            stats.nodes += counters.nodes.load(Ordering::Relaxed);
            stats.runs += counters.runs.load(Ordering::Relaxed);
            stats.bytes += counters.bytes.load(Ordering::Relaxed);
        }
        stats.errors[ApplyErrorKind::TooManyBlocks.index()] +=
            self.oversized.load(Ordering::Relaxed);
        let restarts = self.restarts.lock();
        stats.lane_restarts = restarts.total;
        stats.recent_restarts = restarts.recent.iter().cloned().collect();
        stats
    }

    /// The number of lanes.
    pub fn lanes(&self) -> usize {
        self.lanes.lanes()
    }
}

impl fmt::Debug for EventPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventPool").field("lanes", &self.lanes()).finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::event::{SequenceHash, StoredBlock};
    use crate::index::ReferenceIndex;
    use crate::index::lane::index_lane::INJECTED_PANIC;
    use crate::index::lane::lane_trie::MAX_RUN_BLOCKS;

    fn chain(depth: u64) -> Vec<LocalBlockHash> {
        (1..=depth).map(LocalBlockHash).collect()
    }

    fn store(worker: Worker, id: u64, depth: u64) -> RouterEvent {
        let blocks = (1..=depth).map(|i| StoredBlock::new(i, worker.id.0 * 100 + i)).collect();
        RouterEvent::stored(worker, id, None, blocks)
    }

    /// `spread_lanes` reaches the lanes: on by default where lanes can move (Linux), off when
    /// asked; an index whose lanes do not move works as any other.
    #[test]
    fn spread_lanes_turns_the_lanes_moving_apart_on_and_off() {
        let movable = cfg!(all(target_os = "linux", not(miri)));
        let default = EventPool::new(PoolConfig::default()).unwrap();
        assert_eq!(default.lanes.spreads(), movable);
        let config = PoolConfig { spread_lanes: false, ..PoolConfig::default() };
        let unmoved = EventPool::new(config).unwrap();
        assert!(!unmoved.lanes.spreads());
        let worker = Worker::new(1, 0);
        unmoved.apply_blocking(store(worker, 1, 4)).unwrap();
        unmoved.flush().unwrap();
        assert_eq!(unmoved.find_matches(&chain(4)).get(worker), 4);
    }

    /// A panic while applying one event costs only the state of that lane's
    /// workers: they drop out of answers, are reported, and the lane (and every call) goes on.
    #[test]
    fn a_lane_panic_clears_its_workers_and_the_lane_goes_on() {
        a_lane_panic_clears_its_workers_and_the_lane_goes_on_in(LaneMode::Threads);
    }

    /// The same on lanes driven by the caller.
    #[test]
    fn an_inline_lane_panic_clears_its_workers_and_the_lane_goes_on() {
        a_lane_panic_clears_its_workers_and_the_lane_goes_on_in(LaneMode::Inline);
    }

    fn a_lane_panic_clears_its_workers_and_the_lane_goes_on_in(mode: LaneMode) {
        let pool = EventPool::new(PoolConfig { lanes: 2, mode, ..PoolConfig::default() }).unwrap();
        // New workers go to the least loaded lane: a and c share one, b has the other.
        let (a, b, c) = (Worker::new(1, 0), Worker::new(2, 0), Worker::new(3, 0));
        for (worker, depth) in [(a, 2), (b, 3), (c, 1)] {
            pool.apply(store(worker, 0, depth)).unwrap();
        }
        pool.flush().unwrap();
        let lane = pool.lane_of(a);
        assert_eq!(pool.lane_of(c), lane);
        assert_ne!(pool.lane_of(b), lane);
        let before = std::time::SystemTime::now();
        // Applied (a's new root is stored), then the lane panics.
        let root = vec![StoredBlock::new(50, 5000)];
        pool.apply(RouterEvent::stored(a, INJECTED_PANIC, None, root)).unwrap();
        pool.flush().unwrap();
        let scores = pool.find_matches(&chain(3));
        assert_eq!((scores.get(a), scores.get(b), scores.get(c)), (0, 3, 0));
        assert!(pool.find_matches(&[LocalBlockHash(50)]).is_empty());
        assert_eq!(pool.workers().unwrap(), vec![b]);
        assert_eq!(pool.snapshot().unwrap().keys().copied().collect::<Vec<_>>(), vec![b]);
        assert!(pool.dump_events().unwrap().iter().all(|event| event.worker() == b));
        let stats = pool.stats();
        assert_eq!(stats.lane_restarts, 1);
        let restart = &stats.recent_restarts[0];
        assert_eq!(restart.lane, lane);
        assert_eq!(restart.cleared, vec![a, c]);
        assert!(restart.at >= before && restart.at <= std::time::SystemTime::now());
        assert_eq!(stats.live_entries, 3);
        // The lane takes events again, for old and new workers alike.
        pool.apply(store(a, 1, 1)).unwrap();
        pool.apply(RouterEvent::removed(b, 1, vec![SequenceHash(203)])).unwrap();
        pool.flush().unwrap();
        let scores = pool.find_matches(&chain(3));
        assert_eq!((scores.get(a), scores.get(b)), (1, 2));
        assert_eq!(pool.remove_worker(a.id), Ok(1));
        assert_eq!(pool.workers().unwrap(), vec![b]);
    }

    /// A chain of `events` events of three blocks each (contents 1, 2, …), every one
    /// continuing the last.
    fn long_chain(worker: Worker, events: u64) -> Vec<RouterEvent> {
        (0..events)
            .map(|id| {
                let blocks = (3 * id + 1..=3 * id + 3).map(|i| StoredBlock::new(i, 1000 + i));
                let parent = (id > 0).then(|| SequenceHash(1000 + 3 * id));
                RouterEvent::stored(worker, id, parent, blocks.collect())
            })
            .collect()
    }

    /// However long a worker's chain grows, no run outgrows the run limit (run
    /// offsets are 32-bit): appending past it starts a new run, and the answers stay right.
    #[test]
    fn chains_longer_than_the_run_limit_go_on_in_new_runs() {
        let worker = Worker::new(1, 0);
        for (mode, max_run_blocks) in
            [(LaneMode::Inline, 8), (LaneMode::Threads, 8), (LaneMode::Inline, MAX_RUN_BLOCKS)]
        {
            let limits = TrieLimits { max_run_blocks, ..TrieLimits::default() };
            let config = PoolConfig { lanes: 1, mode, ..PoolConfig::default() };
            let pool = EventPool::with_limits(config, limits).unwrap();
            let mut reference = ReferenceIndex::new();
            for event in long_chain(worker, 17) {
                reference.apply(&event).unwrap();
                pool.apply(event).unwrap();
            }
            pool.flush().unwrap();
            assert_eq!(pool.stats().errors, [0; ApplyErrorKind::ALL.len()]);
            for depth in [1, 8, 9, 50, 51, 52] {
                let query = chain(depth);
                assert_eq!(pool.find_matches(&query), reference.find_matches(&query));
            }
            assert_eq!(pool.find_matches(&chain(60)).get(worker), 51);
            assert_eq!(pool.snapshot().unwrap(), reference.snapshot());
            let longest = pool.lanes.run_on_lane(0, |lane| lane.longest_run()).unwrap();
            assert!(longest <= max_run_blocks, "{mode:?}: a run of {longest}");
            // Without the limit the chain is one run: the limit is what splits it.
            if max_run_blocks > 51 {
                assert_eq!(longest, 51);
            }
        }
    }

    /// A lane that holds the most blocks it can address rejects a `Stored` that
    /// would take it further with a typed error, changes nothing, and takes blocks again once
    /// removals make room.
    #[test]
    fn a_full_lane_rejects_more_blocks_and_takes_them_once_there_is_room() {
        let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
        for mode in [LaneMode::Inline, LaneMode::Threads] {
            let limits = TrieLimits { max_nodes: 10, ..TrieLimits::default() };
            let config = PoolConfig { lanes: 1, mode, ..PoolConfig::default() };
            let pool = EventPool::with_limits(config, limits).unwrap();
            pool.apply(store(a, 0, 8)).unwrap();
            pool.apply(store(b, 0, 3)).unwrap();
            pool.flush().unwrap();
            assert_eq!(pool.stats().errors_of(ApplyErrorKind::IndexFull), 1, "{mode:?}");
            assert_eq!(pool.workers().unwrap(), vec![a]);
            assert_eq!(pool.stats().live_entries, 8);
            let scores = pool.find_matches(&chain(8));
            assert_eq!((scores.get(a), scores.get(b)), (8, 0));
            // a evicts its last five blocks: room for b's three.
            let evicted = (4..=8).rev().map(|i| SequenceHash(100 + i)).collect();
            pool.apply(RouterEvent::removed(a, 1, evicted)).unwrap();
            pool.apply(store(b, 1, 3)).unwrap();
            pool.flush().unwrap();
            let scores = pool.find_matches(&chain(8));
            assert_eq!((scores.get(a), scores.get(b)), (3, 3), "{mode:?}");
            assert_eq!(pool.stats().errors_of(ApplyErrorKind::IndexFull), 1);
        }
    }

    /// Polls `ready` for up to thirty seconds (a loaded machine may keep a lane off-core),
    /// flushing `pool` before each look: a lane drops routes when it is idle and no producer
    /// holds the routes (a look holds them too), and a lane that could not tries again when it
    /// is next idle, which the flush makes it.
    fn eventually(pool: &EventPool, mut ready: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            pool.flush().unwrap();
            if ready() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        false
    }

    /// Events for workers the index never admits (unknown-worker removals,
    /// rejected first stores, removals of unknown workers) leave no route behind.
    #[test]
    fn workers_never_admitted_leave_no_route() {
        let pool = EventPool::new(PoolConfig { lanes: 2, ..PoolConfig::default() }).unwrap();
        for id in 0..300 {
            let unknown = RouterEvent::removed(Worker::new(id, 0), 0, vec![SequenceHash(1)]);
            pool.apply(unknown).unwrap();
            let conflict = vec![StoredBlock::new(1, 7), StoredBlock::new(2, 7)];
            pool.apply(RouterEvent::stored(Worker::new(1000 + id, 0), 0, None, conflict)).unwrap();
            assert_eq!(pool.remove_worker_dp_rank(Worker::new(5000 + id, 0)), Ok(false));
        }
        pool.flush().unwrap();
        let routes = || pool.routes.counts();
        assert!(eventually(&pool, || routes().0 == 0), "routes for no live worker: {:?}", routes());
        assert_eq!(routes(), (0, vec![0, 0]));
    }

    /// Inline lanes run their hooks inside the producer's send: events for workers never
    /// admitted leave no route behind there either, so placement follows live workers only.
    #[test]
    fn inline_lanes_keep_no_route_of_workers_never_admitted() {
        let config = PoolConfig { lanes: 2, mode: LaneMode::Inline, ..PoolConfig::default() };
        let pool = EventPool::new(config).unwrap();
        for id in 0..1000 {
            let unknown = RouterEvent::removed(Worker::new(id, 0), 0, vec![SequenceHash(1)]);
            pool.apply(unknown).unwrap();
        }
        assert_eq!(pool.routes.counts(), (0, vec![0, 0]));
    }

    /// Removing workers gives their lane's room back, and new workers go there.
    #[test]
    fn removed_workers_free_their_lane_for_new_ones() {
        let pool = EventPool::new(PoolConfig { lanes: 2, ..PoolConfig::default() }).unwrap();
        let workers: Vec<Worker> = (1..=4).map(|id| Worker::new(id, 0)).collect();
        for &worker in &workers {
            pool.apply(store(worker, 0, 2)).unwrap();
        }
        pool.flush().unwrap();
        let first: Vec<Worker> =
            workers.iter().copied().filter(|&w| pool.lane_of(w) == 0).collect();
        assert_eq!(first.len(), 2);
        for &worker in &first {
            assert_eq!(pool.remove_worker_dp_rank(worker), Ok(true));
        }
        let load = || pool.routes.counts().1;
        assert!(eventually(&pool, || load() == vec![0, 2]), "lane load {:?}", load());
        for id in [10, 11] {
            pool.apply(store(Worker::new(id, 0), 0, 1)).unwrap();
            assert_eq!(pool.lane_of(Worker::new(id, 0)), 0);
        }
        assert_eq!(pool.routes.counts(), (4, vec![2, 2]));
    }

    /// An event over the block cap is never queued: a typed error from `apply`,
    /// counted from either path, and the index unchanged by it.
    #[test]
    fn events_over_the_block_cap_are_rejected() {
        let pool =
            EventPool::new(PoolConfig { max_event_blocks: 4, ..PoolConfig::default() }).unwrap();
        let worker = Worker::new(1, 0);
        let big = store(worker, 0, 5);
        assert_eq!(pool.apply(big.clone()), Err(SubmitError::TooManyBlocks(big.clone())));
        assert_eq!(pool.apply_blocking(big.clone()), Err(EnqueueError::TooManyBlocks(big)));
        pool.apply(store(worker, 1, 4)).unwrap();
        let removal = (1..=5).map(|i| SequenceHash(100 + i)).collect();
        let removal = RouterEvent::removed(worker, 2, removal);
        assert!(matches!(pool.apply(removal), Err(SubmitError::TooManyBlocks(_))));
        pool.flush().unwrap();
        assert_eq!(pool.stats().errors_of(ApplyErrorKind::TooManyBlocks), 3);
        assert_eq!(pool.find_matches(&chain(5)).get(worker), 4);
    }

    /// The event that stores block `depth` of `worker`'s chain (as [`store`] makes it), after
    /// block `depth - 1`.
    fn grow(worker: Worker, depth: u64) -> RouterEvent {
        let parent = SequenceHash(worker.id.0 * 100 + depth - 1);
        let block = StoredBlock::new(depth, worker.id.0 * 100 + depth);
        RouterEvent::stored(worker, depth, Some(parent), vec![block])
    }

    /// A producer waiting for room in one lane's full queue holds up no other lane. While lane
    /// A cannot take anything, a new worker is placed (which takes the routes' write lock: a
    /// producer holding the read lock while it waited would park it, and parking_lot's fair
    /// lock would then park every producer behind it) and an existing worker of lane B goes on
    /// sending; once lane A goes on, everything applies.
    #[test]
    fn a_producer_waiting_on_a_full_lane_holds_up_no_other_lane() {
        use std::sync::mpsc;
        use std::time::{Duration, Instant};
        // A liveness bound, not a timing claim: generous for a loaded machine.
        const BOUND: Duration = Duration::from_secs(30);
        let config = PoolConfig { lanes: 2, queue_capacity: 1, ..PoolConfig::default() };
        let pool = EventPool::new(config).unwrap();
        let [a, b, a2, new] = [1, 2, 3, 4].map(|id| Worker::new(id, 0));
        for worker in [a, b, a2] {
            pool.apply_blocking(store(worker, 0, 2)).unwrap();
        }
        pool.flush().unwrap();
        // a and a2 share lane A and b has lane B, so the new worker goes to B, the less loaded.
        let (lane_a, lane_b) = (pool.lane_of(a), pool.lane_of(b));
        assert_eq!(pool.lane_of(a2), lane_a);
        assert_ne!(lane_a, lane_b);
        std::thread::scope(|scope| {
            let pool = &pool;
            // Lane A runs a task until let go; a panic below drops `release`, which lets it go
            // too, so a failing run ends instead of hanging.
            let (release, held) = mpsc::channel::<()>();
            let (started_tx, started) = mpsc::channel();
            scope.spawn(move || {
                let stall = move |_: &mut IndexLane| {
                    let _ = started_tx.send(());
                    let _ = held.recv();
                };
                pool.lanes.run_on_lane(lane_a, stall).unwrap();
            });
            started.recv_timeout(BOUND).expect("lane A takes the task");
            // One event fills lane A's one slot; the next finds the queue full.
            pool.apply(grow(a, 3)).unwrap();
            let Err(SubmitError::QueueFull(next)) = pool.apply(grow(a, 4)) else {
                panic!("lane A's queue is full while the lane is held");
            };
            let (a_sent_tx, a_sent) = mpsc::channel();
            scope.spawn(move || {
                pool.apply_blocking(next).unwrap();
                let _ = a_sent_tx.send(());
            });
            // The new worker's write request must come while a's producer waits: a producer
            // that held the routes' read lock meanwhile would hold it now.
            let deadline = Instant::now() + BOUND;
            while pool.lanes.waiting(lane_a) == 0 {
                assert!(Instant::now() < deadline, "a's producer never waits for room");
                std::thread::sleep(Duration::from_millis(1));
            }
            let (placed_tx, placed) = mpsc::channel();
            scope.spawn(move || {
                pool.apply_blocking(store(new, 0, 2)).unwrap();
                let _ = placed_tx.send(());
            });
            let (b_sent_tx, b_sent) = mpsc::channel();
            scope.spawn(move || {
                for depth in 3..=40 {
                    pool.apply_blocking(grow(b, depth)).unwrap();
                }
                let _ = b_sent_tx.send(());
            });
            let stalled = "while a producer waits for room on lane A: it holds up other lanes";
            let placed = placed.recv_timeout(BOUND);
            assert!(placed.is_ok(), "the new worker's first event is not taken {stalled}");
            let b_sent = b_sent.recv_timeout(BOUND);
            assert!(b_sent.is_ok(), "lane B's producer does not get through {stalled}");
            // Lane B has applied them, and lane A is held still.
            pool.lanes.run_on_lane(lane_b, |_| ()).unwrap();
            assert_eq!(pool.lane_of(new), lane_b);
            let scores = pool.find_matches(&chain(40));
            assert_eq!((scores.get(b), scores.get(new), scores.get(a)), (40, 2, 2));
            assert!(a_sent.try_recv().is_err(), "a's producer waits until lane A goes on");
            release.send(()).unwrap();
            a_sent.recv_timeout(BOUND).expect("a's producer gets through once lane A goes on");
        });
        pool.flush().unwrap();
        let scores = pool.find_matches(&chain(40));
        assert_eq!(scores.sorted(), vec![(a, 4), (b, 40), (a2, 2), (new, 2)]);
        assert_eq!(pool.stats().errors, [0; ApplyErrorKind::ALL.len()]);
        assert_eq!(pool.stats().live_entries, 48);
    }
}
