//! Approximate mode: the router indexes its own decisions when engines publish no KV events.
//!
//! Each decision is turned into the event the engine would have published — the chosen worker
//! stored the request's blocks it was not presumed to hold, named by our own sequence hashes,
//! below the last one it was — and goes through the same
//! [`TieredIndex`] as real events, so queries need no second tree. This tracker remembers when
//! each (worker, block) was last routed and turns age and size into `Removed` events: a block
//! not routed again within the TTL expires, and a worker past `max_blocks` is pruned to
//! `prune_target` of it, least recently routed first.
//!
//! A block is routed whenever any request through it is, so a block is always at least as
//! recent as the blocks below it: expiry and pruning take leaves only (see [`PresumedCache`]),
//! tails before their prefixes, and the index never holds a block whose parent was forgotten.
//! A route costs one lookup per new block plus one, however long its prompt. A worker's events
//! are sent while its entry is locked, so they reach its lane in the order they were decided;
//! one longer than the index takes at once goes in as pieces, in order.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::event::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};
use crate::index::TieredIndex;
use crate::pool::LaneDown;
use crate::router::ApproxConfig;
use crate::sync::{AtomicU64, Mutex, Ordering};

const SHARDS: usize = 16;

/// One worker's presumed cache: its blocks as a forest (each knows its parent and how many
/// children it has), and its leaves ordered by when a request last went through them.
///
/// A route touches only its deepest block (and inserts the blocks below the deepest one held):
/// one lookup per new block plus one, not one per block of the prompt. The blocks above it are
/// not stamped; a block's stamp is the latest of its own and those of the children it lost,
/// so a block that becomes a leaf carries the last time any request went through it. The
/// leaf with the oldest stamp is then exactly the block an LRU list touched on every block of
/// every route would evict first, and removing leaves only keeps the presumed blocks (and so
/// the index) closed under prefixes.
#[derive(Debug)]
struct PresumedCache {
    /// Block → its slot in `nodes`.
    slots: HashMap<SequenceHash, u32, ahash::RandomState>,
    nodes: Vec<Node>,
    /// Slots of evicted blocks, for reuse.
    free: Vec<u32>,
    /// The childless blocks by stamp, oldest first.
    leaves: BTreeSet<(Stamp, u32)>,
    /// Routes recorded: orders routes of equal ticks.
    routes: u64,
}

const NONE: u32 = u32::MAX;

/// When a request last went through a block: its tick, then its route's number.
type Stamp = (u64, u64);

#[derive(Clone, Copy, Debug)]
struct Node {
    hash: SequenceHash,
    parent: u32,
    children: u32,
    stamp: Stamp,
}

impl PresumedCache {
    fn empty() -> Self {
        let slots = HashMap::default();
        Self { slots, nodes: Vec::new(), free: Vec::new(), leaves: BTreeSet::new(), routes: 0 }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    /// Records a route through `sequence` at `tick`; the blocks not presumed cached before,
    /// from this index of `sequence` on (the rest were, and they are a prefix).
    fn route(&mut self, sequence: &[SequenceHash], tick: u64) -> usize {
        if sequence.is_empty() {
            return 0;
        }
        self.routes += 1;
        let stamp = (tick, self.routes);
        // The presumed blocks are closed under prefixes: the deepest one held ends the search.
        let held = sequence.iter().rev().position(|hash| self.slots.contains_key(hash));
        let new_from = held.map_or(0, |from_end| sequence.len() - from_end);
        let mut parent = match new_from {
            0 => NONE,
            at => self.slots[&sequence[at - 1]],
        };
        if new_from == sequence.len() {
            // Nothing new: the deepest block gets the stamp (a route that read the clock
            // before another but took the lock after it leaves the later stamp).
            let node = &mut self.nodes[parent as usize];
            let old = node.stamp;
            node.stamp = old.max(stamp);
            if node.children == 0 {
                self.leaves.remove(&(old, parent));
                self.leaves.insert((node.stamp, parent));
            }
            return new_from;
        }
        for &hash in &sequence[new_from..] {
            let node = Node { hash, parent, children: 0, stamp };
            let slot = match self.free.pop() {
                Some(slot) => {
                    self.nodes[slot as usize] = node;
                    slot
                }
                None => {
                    self.nodes.push(node);
                    (self.nodes.len() - 1) as u32
                }
            };
            self.slots.insert(hash, slot);
            if parent != NONE {
                let above = &mut self.nodes[parent as usize];
                above.children += 1;
                if above.children == 1 {
                    self.leaves.remove(&(above.stamp, parent));
                }
            }
            parent = slot;
        }
        self.leaves.insert((stamp, parent));
        new_from
    }

    /// Takes the least recently routed leaves while `take(tick, len)` says so: a child before
    /// its parent, so what is left stays closed under prefixes.
    fn evict_while(&mut self, mut take: impl FnMut(u64, usize) -> bool) -> Vec<SequenceHash> {
        let mut evicted = Vec::new();
        while let Some(&(stamp, slot)) = self.leaves.first() {
            if !take(stamp.0, self.len()) {
                break;
            }
            self.leaves.pop_first();
            let Node { hash, parent, .. } = self.nodes[slot as usize];
            self.slots.remove(&hash);
            self.free.push(slot);
            evicted.push(hash);
            if parent != NONE {
                let above = &mut self.nodes[parent as usize];
                above.stamp = above.stamp.max(stamp);
                above.children -= 1;
                if above.children == 0 {
                    self.leaves.insert((above.stamp, parent));
                }
            }
        }
        if self.slots.is_empty() {
            // Nothing live: give the memory back rather than keep a worker's peak.
            *self = Self { routes: self.routes, ..Self::empty() };
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
        let cache = shard.entry(worker).or_insert_with(PresumedCache::empty);
        let new_from = cache.route(sequence, tick);
        if new_from < sequence.len() {
            // The index lacks just the new blocks, below the last one it holds. Our sequence
            // hashes name them, so a run longer than one event may be goes in as a chain of
            // pieces, each continuing the previous one's last block.
            let parent = new_from.checked_sub(1).map(|above| sequence[above]);
            let blocks = local[new_from..].iter().zip(&sequence[new_from..]);
            let blocks = blocks.map(|(&local, &hash)| StoredBlock { local, hash }).collect();
            index.apply_split(RouterEvent::stored(worker, self.event_id(), parent, blocks))?;
        }
        if cache.len() > self.config.max_blocks {
            let target = (self.config.max_blocks as f64 * self.config.prune_target) as usize;
            let pruned = cache.evict_while(|_, len| len > target);
            self.pruned.fetch_add(pruned.len() as u64, Ordering::Relaxed);
            index.apply_split(RouterEvent::removed(worker, self.event_id(), pruned))?;
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
                    index.apply_split(RouterEvent::removed(worker, self.event_id(), expired))?;
                }
            }
            shard.retain(|_, cache| cache.len() > 0);
        }
        Ok(())
    }

    /// Forgets what `worker` was presumed to hold and runs `clear` (which clears it in the
    /// index) while no decision for it can be recorded: a restarted engine holds nothing.
    pub(crate) fn forget<R>(&self, worker: Worker, clear: impl FnOnce() -> R) -> R {
        let mut shard = self.shard(worker).lock();
        shard.remove(&worker);
        clear()
    }

    /// Forgets every dp rank of `id` (the caller removes it from the index).
    pub(crate) fn remove_worker(&self, id: WorkerId) {
        for shard in &self.shards {
            shard.lock().retain(|worker, _| worker.id != id);
        }
    }

    pub(crate) fn stats(&self) -> ApproxStats {
        let presumed =
            self.shards.iter().map(|s| s.lock().values().map(PresumedCache::len).sum::<usize>());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain LRU list it replaces: every block of every route touched, deepest first;
    /// eviction from the least recently touched end.
    #[derive(Default)]
    struct TouchEveryBlock(Vec<(u64, SequenceHash)>);

    impl TouchEveryBlock {
        fn route(&mut self, sequence: &[SequenceHash], tick: u64) {
            for &hash in sequence.iter().rev() {
                self.0.retain(|&(_, h)| h != hash);
                self.0.push((tick, hash));
            }
        }

        fn evict_while(&mut self, mut take: impl FnMut(u64, usize) -> bool) -> Vec<SequenceHash> {
            let mut evicted = Vec::new();
            while let Some(&(tick, hash)) = self.0.first() {
                if !take(tick, self.0.len()) {
                    break;
                }
                self.0.remove(0);
                evicted.push(hash);
            }
            evicted
        }
    }

    #[test]
    fn leaves_by_stamp_evict_as_touching_every_block_would() {
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state >> 33
        };
        for _ in 0..20 {
            let (mut cache, mut model) = (PresumedCache::empty(), TouchEveryBlock::default());
            let mut tick = 0;
            for _ in 0..400 {
                tick += next() % 3;
                if next() % 6 == 0 {
                    let keep = next() as usize % 60;
                    let (a, b) =
                        (cache.evict_while(|_, n| n > keep), model.evict_while(|_, n| n > keep));
                    assert_eq!(a, b, "pruned to {keep}");
                } else if next() % 9 == 0 {
                    let cutoff = tick.saturating_sub(next() % 8);
                    let (a, b) = (
                        cache.evict_while(|t, _| t <= cutoff),
                        model.evict_while(|t, _| t <= cutoff),
                    );
                    assert_eq!(a, b, "expired to {cutoff}");
                } else {
                    // A prompt of one of 4 families: a shared root, a family block, then up
                    // to 6 blocks of one of 3 branches (names are the whole prefix).
                    let (family, branch, depth) = (next() % 4, next() % 3, next() % 8);
                    let sequence: Vec<SequenceHash> = (0..depth)
                        .map(|d| match d {
                            0 => SequenceHash(1),
                            1 => SequenceHash(10 + family),
                            d => SequenceHash(1000 * (family + 1) + 100 * branch + d),
                        })
                        .collect();
                    let held = cache.len();
                    let new_from = cache.route(&sequence, tick);
                    assert!(sequence[..new_from].iter().all(|h| model.0.iter().any(|e| e.1 == *h)));
                    model.route(&sequence, tick);
                    assert_eq!(cache.len(), held + sequence.len() - new_from);
                }
                assert_eq!(cache.len(), model.0.len());
                assert_eq!(
                    cache.leaves.len(),
                    cache.nodes.len() - cache.free.len() - interior(&cache)
                );
            }
            assert_eq!(cache.evict_while(|_, _| true), model.evict_while(|_, _| true));
            assert_eq!(cache.len(), 0);
        }
    }

    fn interior(cache: &PresumedCache) -> usize {
        cache.slots.values().filter(|&&slot| cache.nodes[slot as usize].children > 0).count()
    }
}
