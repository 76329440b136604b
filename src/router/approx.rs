//! Approximate mode: the router indexes its own decisions when engines publish no KV events.
//!
//! Each decision is turned into the event the engine would have published — the chosen worker
//! stored the request's blocks, named by our own sequence hashes — and goes through the same
//! [`TieredIndex`] as real events, so queries need no second tree. This tracker remembers when
//! each (worker, block) was last routed and turns age and size into `Removed` events: a block
//! not routed again within the TTL expires, and a worker past `max_blocks` is pruned to
//! `prune_target` of it, least recently routed first.
//!
//! A block is routed whenever any request through it is, and a request's blocks are touched
//! deepest first, so a block is always more recent than the blocks below it: expiry and
//! pruning take tails before their prefixes, and the index never holds a block whose parent
//! was forgotten. A worker's events
//! are sent while its entry is locked, so they reach its lane in the order they were decided;
//! one longer than the index takes at once goes in as pieces, in order.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::event::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};
use crate::index::TieredIndex;
use crate::pool::LaneDown;
use crate::router::ApproxConfig;
use crate::sync::{AtomicU64, Mutex, Ordering};

const SHARDS: usize = 16;

/// One worker's presumed cache: its blocks in least-recently-routed order, as a doubly linked
/// list threaded through a slab (one hash lookup per touch; eviction pops the old end).
#[derive(Debug)]
struct PresumedCache {
    /// Block → its slot in `nodes`.
    slots: HashMap<SequenceHash, u32, ahash::RandomState>,
    nodes: Vec<Node>,
    /// Slots of evicted blocks, for reuse.
    free: Vec<u32>,
    /// The least and most recently routed blocks' slots.
    oldest: u32,
    newest: u32,
}

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    hash: SequenceHash,
    tick: u64,
    /// Neighbours towards the old and the new end (`NONE` at the ends).
    older: u32,
    newer: u32,
}

impl PresumedCache {
    fn empty() -> Self {
        let slots = HashMap::default();
        Self { slots, nodes: Vec::new(), free: Vec::new(), oldest: NONE, newest: NONE }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    /// Moves `hash` (inserted if new) to the new end, stamped `tick`.
    fn touch(&mut self, hash: SequenceHash, tick: u64) {
        let slot = match self.slots.get(&hash) {
            Some(&slot) => {
                self.unlink(slot);
                slot
            }
            None => {
                let node = Node { hash, tick, older: NONE, newer: NONE };
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
                slot
            }
        };
        let node = &mut self.nodes[slot as usize];
        (node.tick, node.older, node.newer) = (tick, self.newest, NONE);
        match self.newest {
            NONE => self.oldest = slot,
            newest => self.nodes[newest as usize].newer = slot,
        }
        self.newest = slot;
    }

    fn unlink(&mut self, slot: u32) {
        let Node { older, newer, .. } = self.nodes[slot as usize];
        match older {
            NONE => self.oldest = newer,
            older => self.nodes[older as usize].newer = newer,
        }
        match newer {
            NONE => self.newest = older,
            newer => self.nodes[newer as usize].older = older,
        }
    }

    /// Takes the least recently routed blocks while `take(tick, len)` says so.
    fn evict_while(&mut self, mut take: impl FnMut(u64, usize) -> bool) -> Vec<SequenceHash> {
        let mut evicted = Vec::new();
        while self.oldest != NONE {
            let slot = self.oldest;
            let Node { hash, tick, .. } = self.nodes[slot as usize];
            if !take(tick, self.len()) {
                break;
            }
            self.unlink(slot);
            self.slots.remove(&hash);
            self.free.push(slot);
            evicted.push(hash);
        }
        if self.slots.is_empty() {
            // Nothing live: give the memory back rather than keep a worker's peak.
            *self = Self::empty();
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
        // Deepest first, so a prefix is always more recent than the blocks below it.
        for &hash in sequence.iter().rev() {
            cache.touch(hash, tick);
        }
        let blocks = local.iter().zip(sequence).map(|(&local, &hash)| StoredBlock { local, hash });
        // Our sequence hashes name the blocks, so a request longer than one event may be goes
        // in as a chain of pieces, each continuing the previous one's last block.
        index.apply_split(RouterEvent::stored(worker, self.event_id(), None, blocks.collect()))?;
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

    #[test]
    fn the_presumed_cache_evicts_in_least_recently_touched_order() {
        // A naive model: (last touch order, hash), oldest first.
        let mut cache = PresumedCache::empty();
        let mut model: Vec<(u64, u64)> = Vec::new();
        let mut order = 0;
        let mut state = 7u64;
        for step in 0..2_000u64 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let hash = (state >> 33) % 64;
            if step % 7 == 6 {
                let keep = (state >> 20) as usize % 40;
                let evicted = cache.evict_while(|_, len| len > keep);
                model.sort_unstable();
                let expected: Vec<SequenceHash> = model
                    .drain(..model.len().saturating_sub(keep))
                    .map(|(_, h)| SequenceHash(h))
                    .collect();
                assert_eq!(evicted, expected);
            } else {
                order += 1;
                cache.touch(SequenceHash(hash), step);
                model.retain(|&(_, h)| h != hash);
                model.push((order, hash));
            }
            assert_eq!(cache.len(), model.len());
        }
        let expired = cache.evict_while(|tick, _| tick < 1_000);
        assert!(expired.iter().all(|h| !cache.slots.contains_key(h)));
        assert!(cache.evict_while(|_, _| true).len() + expired.len() >= 1);
        assert_eq!(cache.len(), 0);
    }
}
