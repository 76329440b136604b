//! Approximate mode: the router indexes its own decisions when engines publish no KV events.
//!
//! Each decision is turned into the event the engine would have published — the chosen worker
//! stored the request's blocks, named by our own sequence hashes — and goes through the same
//! [`TieredIndex`] as real events, so queries need no second tree. This tracker remembers when
//! each (worker, block) was last routed and turns age and size into `Removed` events: a block
//! not routed again within the TTL expires, and a worker past `max_blocks` is pruned to
//! `prune_target` of it, least recently routed first.
//!
//! A block is routed whenever any request through it is, so it is never older than a block
//! below it; ties go deepest first. Expiry and pruning therefore take tails before their
//! prefixes, and the index never holds a block whose parent was forgotten. A worker's events
//! are sent while its entry is locked, so they reach its lane in the order they were decided.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::event::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};
use crate::index::TieredIndex;
use crate::pool::LaneDown;
use crate::router::ApproxConfig;
use crate::sync::{AtomicU64, Mutex, Ordering};

const SHARDS: usize = 16;

/// One worker's presumed cache: when each block was last routed there.
#[derive(Debug, Default)]
struct PresumedCache {
    /// Block → (tick, depth).
    blocks: HashMap<SequenceHash, (u64, u32), ahash::RandomState>,
    /// Eviction order: oldest tick first, deepest first among equals.
    order: BTreeSet<(u64, Reverse<u32>, SequenceHash)>,
}

impl PresumedCache {
    fn touch(&mut self, hash: SequenceHash, depth: u32, tick: u64) {
        if let Some(old) = self.blocks.insert(hash, (tick, depth)) {
            self.order.remove(&(old.0, Reverse(old.1), hash));
        }
        self.order.insert((tick, Reverse(depth), hash));
    }

    /// Takes the oldest blocks while `take` says so.
    fn evict_while(&mut self, mut take: impl FnMut(u64, usize) -> bool) -> Vec<SequenceHash> {
        let mut evicted = Vec::new();
        while let Some(&(tick, _, hash)) = self.order.first() {
            if !take(tick, self.blocks.len()) {
                break;
            }
            self.order.pop_first();
            self.blocks.remove(&hash);
            evicted.push(hash);
        }
        evicted
    }
}

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

/// Every worker's presumed cache, sharded by worker.
#[derive(Debug)]
pub(crate) struct ApproxTracker {
    shards: Vec<Mutex<HashMap<Worker, PresumedCache>>>,
    config: ApproxConfig,
    base: Instant,
    next_event_id: AtomicU64,
    /// Ticks (nanoseconds since `base`) at which the next expiry sweep is due.
    next_sweep: AtomicU64,
    decisions: AtomicU64,
    expired: AtomicU64,
    pruned: AtomicU64,
}

impl ApproxTracker {
    pub(crate) fn new(config: ApproxConfig, now: Instant) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            config,
            base: now,
            next_event_id: AtomicU64::new(0),
            next_sweep: AtomicU64::new(0),
            decisions: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            pruned: AtomicU64::new(0),
        }
    }

    fn tick(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn shard(&self, worker: Worker) -> &Mutex<HashMap<Worker, PresumedCache>> {
        &self.shards[crate::sequences::worker_hash(worker) as usize % SHARDS]
    }

    fn event_id(&self) -> u64 {
        self.next_event_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Indexes the decision to send the request (`local`/`sequence` hashes) to `worker` at
    /// `now`, pruning the worker if it grew past its bound.
    pub(crate) fn record(
        &self,
        index: &TieredIndex,
        worker: Worker,
        local: &[LocalBlockHash],
        sequence: &[SequenceHash],
        now: Instant,
    ) -> Result<(), LaneDown> {
        self.decisions.fetch_add(1, Ordering::Relaxed);
        if local.is_empty() {
            return Ok(());
        }
        let tick = self.tick(now);
        let mut shard = self.shard(worker).lock();
        let cache = shard.entry(worker).or_default();
        for (depth, &hash) in sequence.iter().enumerate() {
            cache.touch(hash, depth as u32, tick);
        }
        let blocks = local.iter().zip(sequence).map(|(&local, &hash)| StoredBlock { local, hash });
        index.apply_blocking(RouterEvent::stored(
            worker,
            self.event_id(),
            None,
            blocks.collect(),
        ))?;
        if cache.blocks.len() > self.config.max_blocks {
            let target = (self.config.max_blocks as f64 * self.config.prune_target) as usize;
            let pruned = cache.evict_while(|_, len| len > target);
            self.pruned.fetch_add(pruned.len() as u64, Ordering::Relaxed);
            index.apply_blocking(RouterEvent::removed(worker, self.event_id(), pruned))?;
        }
        Ok(())
    }

    /// Expires blocks older than the TTL, at most every sixteenth of the TTL (cheap to call on
    /// every route).
    pub(crate) fn expire_due(&self, index: &TieredIndex, now: Instant) -> Result<(), LaneDown> {
        let tick = self.tick(now);
        let due = self.next_sweep.load(Ordering::Relaxed);
        let step = duration_ticks(self.config.ttl / 16).max(1);
        if tick < due
            || self
                .next_sweep
                .compare_exchange(
                    due,
                    tick.saturating_add(step),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return Ok(());
        }
        self.expire(index, now)
    }

    /// Expires every block not routed within the TTL before `now`.
    pub(crate) fn expire(&self, index: &TieredIndex, now: Instant) -> Result<(), LaneDown> {
        let Some(cutoff) = self.tick(now).checked_sub(duration_ticks(self.config.ttl)) else {
            return Ok(());
        };
        for shard in &self.shards {
            let mut shard = shard.lock();
            for (&worker, cache) in shard.iter_mut() {
                let expired = cache.evict_while(|tick, _| tick <= cutoff);
                if !expired.is_empty() {
                    self.expired.fetch_add(expired.len() as u64, Ordering::Relaxed);
                    index.apply_blocking(RouterEvent::removed(worker, self.event_id(), expired))?;
                }
            }
            shard.retain(|_, cache| !cache.blocks.is_empty());
        }
        Ok(())
    }

    /// Forgets every dp rank of `id` (the caller removes it from the index).
    pub(crate) fn remove_worker(&self, id: WorkerId) {
        for shard in &self.shards {
            shard.lock().retain(|worker, _| worker.id != id);
        }
    }

    pub(crate) fn stats(&self) -> ApproxStats {
        let presumed =
            self.shards.iter().map(|s| s.lock().values().map(|c| c.blocks.len()).sum::<usize>());
        ApproxStats {
            decisions: self.decisions.load(Ordering::Relaxed),
            expired_blocks: self.expired.load(Ordering::Relaxed),
            pruned_blocks: self.pruned.load(Ordering::Relaxed),
            presumed_blocks: presumed.sum::<usize>() as u64,
        }
    }
}

fn duration_ticks(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
