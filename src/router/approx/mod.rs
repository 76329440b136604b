//! Approximate mode: the router indexes its own decisions when engines publish no KV events.
//!
//! Each decision is turned into the event the engine would have published — the chosen worker
//! stored the request's blocks it was not presumed to hold, named by our own sequence hashes,
//! below the last one it was — and goes through the same [`TieredIndex`] as real events, so
//! queries need no second tree. The tracker remembers when each (worker, block) was last routed
//! and turns age and size into `Removed` events: a block not routed again within the TTL
//! expires, and a worker past `max_blocks` is pruned to `prune_target` of it, least recently
//! routed first (see [`PresumedCache`]: tails before their prefixes, so the index never holds a
//! block whose parent was forgotten).
//!
//! ## Off the routing thread
//!
//! A decision only queues its blocks on a [`Backlog`] (a lock, a push and an unlock). A recorder
//! thread drains it: per decision, the expiry sweep that is due, the presumed cache's update,
//! the `Stored` event to the index lanes and any pruning. While decisions keep coming it polls
//! every [`ApproxConfig::lag`], so routing threads never wake it; after a quiet spell it sleeps
//! until the next decision wakes it. Whoever needs the decisions applied drains the backlog on
//! its own thread first — [`flush`](ApproxTracker::flush), `stats`, expiry, a worker's restart or
//! removal — so the recorder is never waited for. A router whose lanes run inline (or whose
//! `lag` is zero) has no recorder: each decision is recorded on the routing thread as it is
//! made, and the expiry sweep due runs before a decision reads the index, so what it sees is
//! exact.
//!
//! ## Layout and guarantees
//!
//! `presumed.rs` is one worker's presumed cache; this file the tracker and its recorder.
//! Decisions are applied one at a time under the state lock, in the order they were queued,
//! and each worker's events reach its lane in that order; a failed hand-off to a lane is kept
//! and returned by the next `route` or `flush`.

mod presumed;

use std::collections::HashMap;
use std::mem;
use std::time::{Duration, Instant};

use crate::event::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};
use crate::index::TieredIndex;
use crate::pool::LaneDown;
use crate::router::ApproxConfig;
use crate::sync::backlog::Backlog;
use crate::sync::{Arc, AtomicBool, AtomicU64, JoinHandle, Mutex, Ordering};

use presumed::PresumedCache;

/// Quiet polls after which the recorder sleeps until a decision wakes it.
const QUIET_POLLS: u32 = 64;

/// Decisions waiting past this many are drained by the routing thread that queues the next:
/// a recorder that cannot keep up slows routing down rather than let the backlog grow.
const MAX_BACKLOG: usize = 4096;

/// Counters of approximate mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApproxStats {
    /// Decisions indexed.
    pub decisions: u64,
    /// Blocks forgotten because their TTL ran out.
    pub expired_blocks: u64,
    /// Blocks forgotten to keep a worker under `max_blocks`.
    pub pruned_blocks: u64,
    /// (worker, block) entries presumed cached now.
    pub presumed_blocks: u64,
}

/// A decision waiting to be indexed: the chosen worker, when, and the prompt's block hashes.
#[derive(Debug)]
struct Decision {
    worker: Worker,
    tick: u64,
    local: Vec<LocalBlockHash>,
    sequence: Vec<SequenceHash>,
}

/// Every worker's presumed cache and the recorder that keeps them (module docs).
#[derive(Debug)]
pub(crate) struct ApproxTracker {
    shared: Arc<Shared>,
    recorder: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    config: ApproxConfig,
    base: Instant,
    index: Arc<TieredIndex>,
    backlog: Backlog<Decision>,
    state: Mutex<State>,
    /// A lane refused a hand-off since the last `route` or `flush` reported one.
    lane_down: AtomicBool,
    decisions: AtomicU64,
    expired: AtomicU64,
    pruned: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    caches: HashMap<Worker, PresumedCache>,
    next_event_id: u64,
    /// Tick at which the next expiry sweep is due.
    next_sweep: u64,
    /// The drained batch's buffer, kept for its capacity.
    batch: Vec<Decision>,
}

impl ApproxTracker {
    /// A tracker indexing into `index`; with a recorder thread when `background` (and the
    /// config's lag is not zero) and one can be started, on the routing threads otherwise.
    pub(crate) fn new(
        config: ApproxConfig,
        now: Instant,
        index: Arc<TieredIndex>,
        background: bool,
    ) -> Self {
        let lag = config.lag;
        let shared = Arc::new(Shared {
            config,
            base: now,
            index,
            backlog: Backlog::default(),
            state: Mutex::new(State::default()),
            lane_down: AtomicBool::new(false),
            decisions: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            pruned: AtomicU64::new(0),
        });
        let recorder = (background && !lag.is_zero())
            .then(|| {
                let shared = shared.clone();
                crate::sync::spawn("kvroute-approx".into(), move || shared.record_in_background())
            })
            // A recorder that cannot start leaves the work to the routing threads.
            .and_then(Result::ok);
        Self { shared, recorder }
    }

    /// Before a decision at `now` reads the index: without a recorder, the expiry sweep due
    /// then, so the decision sees exactly the blocks presumed held at `now` (with one, the
    /// recorder sweeps as it applies decisions, within the lag).
    pub(crate) fn before_route(&self, now: Instant) -> Result<(), LaneDown> {
        if self.recorder.is_none() {
            let mut state = self.shared.state.lock();
            self.shared.sweep_if_due(&mut state, self.shared.tick(now))?;
        }
        Ok(())
    }

    /// Queues the decision to send the request (its `local`/`sequence` hashes, taken as they
    /// are: the routing thread wrote them while hashing, and copying them to fresh memory would
    /// cost more than the push) to `worker` at `now`; returns a hand-off to a lane that failed
    /// since the last one was reported.
    pub(crate) fn record(
        &self,
        worker: Worker,
        local: Vec<LocalBlockHash>,
        sequence: Vec<SequenceHash>,
        now: Instant,
    ) -> Result<(), LaneDown> {
        let decision = Decision { worker, tick: self.shared.tick(now), local, sequence };
        let waiting = self.shared.backlog.push(decision);
        if self.recorder.is_none() || waiting > MAX_BACKLOG {
            self.shared.drain();
        }
        self.shared.take_lane_down()
    }

    /// Applies every decision queued before the call (the index lanes may still be applying
    /// their events: flush the index after).
    pub(crate) fn flush(&self) -> Result<(), LaneDown> {
        self.shared.drain();
        self.shared.take_lane_down()
    }

    /// Expires every block not routed within the TTL before `now`.
    pub(crate) fn expire(&self, now: Instant) -> Result<(), LaneDown> {
        let mut state = self.shared.state.lock();
        self.shared.drain_locked(&mut state);
        self.shared.expire(&mut state, self.shared.tick(now))?;
        self.shared.take_lane_down()
    }

    /// Forgets what `worker` was presumed to hold and runs `clear` (which clears it in the
    /// index) while no decision can be applied: a restarted engine holds nothing. Decisions
    /// queued before apply first.
    pub(crate) fn forget<R>(&self, worker: Worker, clear: impl FnOnce() -> R) -> R {
        let mut state = self.shared.state.lock();
        self.shared.drain_locked(&mut state);
        state.caches.remove(&worker);
        clear()
    }

    /// Forgets every dp rank of `id` (the caller removes it from the index), after applying
    /// the decisions queued before.
    pub(crate) fn remove_worker(&self, id: WorkerId) {
        let mut state = self.shared.state.lock();
        self.shared.drain_locked(&mut state);
        state.caches.retain(|worker, _| worker.id != id);
    }

    /// The counters, with every decision queued before the call applied.
    pub(crate) fn stats(&self) -> ApproxStats {
        let mut state = self.shared.state.lock();
        self.shared.drain_locked(&mut state);
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ApproxStats {
            decisions: load(&self.shared.decisions),
            expired_blocks: load(&self.shared.expired),
            pruned_blocks: load(&self.shared.pruned),
            presumed_blocks: state.caches.values().map(PresumedCache::len).sum::<usize>() as u64,
        }
    }
}

impl Drop for ApproxTracker {
    fn drop(&mut self) {
        self.shared.backlog.close();
        if let Some(recorder) = self.recorder.take() {
            // The recorder never panics but through a bug; its state is dropped with ours.
            let _ = recorder.join();
        }
    }
}

impl Shared {
    fn tick(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn take_lane_down(&self) -> Result<(), LaneDown> {
        match self.lane_down.swap(false, Ordering::Relaxed) {
            true => Err(LaneDown),
            false => Ok(()),
        }
    }

    /// The recorder thread: drains while decisions come, sleeps when they stop.
    fn record_in_background(&self) {
        let mut quiet = 0;
        let mut seen = self.backlog.pushed();
        loop {
            self.drain();
            let pushed = self.backlog.pushed();
            quiet = if pushed == seen { quiet + 1 } else { 0 };
            seen = pushed;
            if quiet < QUIET_POLLS {
                if self.backlog.is_closed() {
                    return;
                }
                crate::sync::sleep(self.config.lag);
            } else if !self.backlog.sleep_unless_pushed(seen) {
                return;
            }
        }
    }

    fn drain(&self) {
        self.drain_locked(&mut self.state.lock());
    }

    /// Applies every queued decision, in order; a failed hand-off is kept for the caller.
    fn drain_locked(&self, state: &mut State) {
        let mut batch = mem::take(&mut state.batch);
        self.backlog.take(&mut batch);
        for decision in batch.drain(..) {
            if self.apply(state, decision).is_err() {
                self.lane_down.store(true, Ordering::Relaxed);
            }
        }
        state.batch = batch;
    }

    /// One decision: the expiry sweep due at its tick, then its blocks, then pruning.
    fn apply(&self, state: &mut State, decision: Decision) -> Result<(), LaneDown> {
        self.decisions.fetch_add(1, Ordering::Relaxed);
        let Decision { worker, tick, local, sequence } = decision;
        self.sweep_if_due(state, tick)?;
        if sequence.is_empty() {
            return Ok(());
        }
        let cache = state.caches.entry(worker).or_insert_with(PresumedCache::empty);
        let new_from = cache.route(&sequence, tick);
        let len = cache.len();
        if new_from < sequence.len() {
            // The index lacks just the new blocks, below the last one it holds. Our sequence
            // hashes name them, so a run longer than one event may be goes in as a chain of
            // pieces, each continuing the previous one's last block.
            let parent = new_from.checked_sub(1).map(|above| sequence[above]);
            let blocks = local[new_from..].iter().zip(&sequence[new_from..]);
            let blocks = blocks.map(|(&local, &hash)| StoredBlock { local, hash }).collect();
            let id = state.event_id();
            self.index.apply_split(RouterEvent::stored(worker, id, parent, blocks))?;
        }
        if len > self.config.max_blocks {
            let target = (self.config.max_blocks as f64 * self.config.prune_target) as usize;
            let cache = state.caches.get_mut(&worker).expect("inserted above");
            let pruned = cache.evict_while(|_, len| len > target);
            self.pruned.fetch_add(pruned.len() as u64, Ordering::Relaxed);
            let id = state.event_id();
            self.index.apply_split(RouterEvent::removed(worker, id, pruned))?;
        }
        Ok(())
    }

    /// Expires old blocks if the last sweep was a sixteenth of the TTL or more before `tick`
    /// (cheap to check on every decision).
    fn sweep_if_due(&self, state: &mut State, tick: u64) -> Result<(), LaneDown> {
        if tick < state.next_sweep {
            return Ok(());
        }
        let step = duration_ticks(self.config.ttl / 16).max(1);
        state.next_sweep = tick.saturating_add(step);
        self.expire(state, tick)
    }

    /// Expires every block not routed within the TTL before `tick`.
    fn expire(&self, state: &mut State, tick: u64) -> Result<(), LaneDown> {
        let Some(cutoff) = tick.checked_sub(duration_ticks(self.config.ttl)) else {
            return Ok(());
        };
        let mut result = Ok(());
        let State { caches, next_event_id, .. } = state;
        for (&worker, cache) in caches.iter_mut() {
            let expired = cache.evict_while(|tick, _| tick <= cutoff);
            if !expired.is_empty() {
                self.expired.fetch_add(expired.len() as u64, Ordering::Relaxed);
                *next_event_id += 1;
                let event = RouterEvent::removed(worker, *next_event_id - 1, expired);
                result = result.and(self.index.apply_split(event));
            }
        }
        caches.retain(|_, cache| cache.len() > 0);
        result
    }
}

impl State {
    fn event_id(&mut self) -> u64 {
        self.next_event_id += 1;
        self.next_event_id - 1
    }
}

fn duration_ticks(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
