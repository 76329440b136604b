//! A mock engine's KV block manager: bounded capacity, LRU eviction, real KV events.
//!
//! It models what a prefix-caching engine (vLLM, SGLang) reports to the router, not its memory
//! layout: a request's prompt blocks are cached once it has been served, the blocks it already
//! held are reused and touched, and when the cache is over capacity the least recently used
//! blocks go, **tails before their prefixes** — only a block without a cached continuation (a
//! leaf) is ever evicted, so the cached set stays closed under prefixes, as the index assumes.
//!
//! Like a real engine it names blocks by its *own* sequence hashes: a per-worker salted XXH3 of
//! the router's sequence hash, so an index that confused the two would fail. A mock engine that
//! computes its engine's hashes itself (vLLM's, say) passes them as the request's sequence and
//! publishes them unchanged ([`MockKvManager::publishing_given_hashes`]).

use std::collections::BTreeSet;

use ahash::AHashMap;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::event::{RouterEvent, SequenceHash, StoredBlock, Worker};
use crate::hash::RequestHashes;

/// One cached block, keyed in [`MockKvManager::blocks`] by the router's sequence hash.
#[derive(Clone, Copy, Debug)]
struct Block {
    /// The engine's name for the block, as published in events.
    engine: SequenceHash,
    /// The router sequence hash of the previous block, `None` for a first block.
    parent: Option<SequenceHash>,
    /// Cached blocks continuing this one; 0 makes it a leaf, hence evictable.
    children: u32,
    /// Last use, from the manager's clock.
    stamp: u64,
}

/// What [`MockKvManager::store`] did with a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreOutcome {
    /// Leading blocks of the request that were already cached (the prefix-cache hit).
    pub cached: usize,
    /// Blocks newly cached (published in one `Stored` event).
    pub stored: usize,
    /// Blocks evicted to make room (published in one `Removed` event before it).
    pub evicted: usize,
}

/// The KV cache of one (worker, dp_rank) of a mock engine: `capacity` blocks, least recently
/// used leaves evicted first (a block never goes while a cached continuation of it stays), and
/// blocks published under per-worker engine hashes that differ from the router's.
#[derive(Clone, Debug)]
pub struct MockKvManager {
    worker: Worker,
    capacity: usize,
    /// Salt of the engine hashes; differs per worker, as real engines' hashes may. `None`:
    /// the sequence hashes the requests carry are published unchanged.
    salt: Option<u64>,
    blocks: AHashMap<SequenceHash, Block>,
    /// The evictable blocks, least recently used first.
    leaves: BTreeSet<(u64, SequenceHash)>,
    clock: u64,
    next_event_id: u64,
}

impl MockKvManager {
    /// An empty cache of `capacity` blocks for `worker`. Its first event has id 1.
    pub fn new(worker: Worker, capacity: usize) -> Self {
        let mut id = [0u8; 12];
        id[..8].copy_from_slice(&worker.id.0.to_le_bytes());
        id[8..].copy_from_slice(&worker.dp_rank.0.to_le_bytes());
        Self {
            worker,
            capacity,
            salt: Some(xxh3_64_with_seed(&id, 0x656e_6769_6e65)),
            blocks: AHashMap::new(),
            leaves: BTreeSet::new(),
            clock: 0,
            next_event_id: 1,
        }
    }

    /// The same cache, publishing blocks under the sequence hashes the requests carry, unchanged:
    /// for a mock engine that names blocks the way its real engine does (vLLM's block hashes).
    ///
    /// ```
    /// use kvroute::sim::MockKvManager;
    /// use kvroute::{SequenceHash, Worker};
    ///
    /// let kv = MockKvManager::new(Worker::new(1, 0), 64).publishing_given_hashes();
    /// assert_eq!(kv.engine_hash(SequenceHash(42)), SequenceHash(42));
    /// ```
    pub fn publishing_given_hashes(mut self) -> Self {
        self.salt = None;
        self
    }

    /// The (worker, dp_rank) whose cache this is.
    pub fn worker(&self) -> Worker {
        self.worker
    }

    /// The most blocks the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Blocks cached now.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is cached.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The id the next event will carry; ids are consecutive per manager.
    pub fn next_event_id(&self) -> u64 {
        self.next_event_id
    }

    /// Whether the block with router sequence hash `seq` is cached.
    pub fn contains(&self, seq: SequenceHash) -> bool {
        self.blocks.contains_key(&seq)
    }

    /// The engine's name for the block with router sequence hash `seq` (cached or not): `seq`
    /// itself when [publishing given hashes](Self::publishing_given_hashes).
    pub fn engine_hash(&self, seq: SequenceHash) -> SequenceHash {
        match self.salt {
            Some(salt) => SequenceHash(xxh3_64_with_seed(&seq.0.to_le_bytes(), salt)),
            None => seq,
        }
    }

    /// How many leading blocks of a request (router sequence hashes) are cached.
    pub fn cached_prefix(&self, sequence: &[SequenceHash]) -> usize {
        sequence.iter().take_while(|seq| self.blocks.contains_key(seq)).count()
    }

    /// Serves a request: touches its cached prefix, evicts least recently used leaves if the
    /// rest does not fit, caches the rest, and appends the events (`Removed` then `Stored`,
    /// each only when non-empty) to `events`.
    ///
    /// A request longer than the capacity has only its first `capacity` blocks cached. Blocks
    /// past the shorter of `request.local` and `request.sequence` are ignored.
    pub fn store(
        &mut self,
        request: &RequestHashes,
        events: &mut Vec<RouterEvent>,
    ) -> StoreOutcome {
        let len = request.local.len().min(request.sequence.len());
        let (local, sequence) = (&request.local[..len], &request.sequence[..len]);
        let cached = self.cached_prefix(sequence);
        for &seq in &sequence[..cached] {
            self.touch(seq);
        }
        // The cached prefix was just touched, so eviction reaches it only once every other
        // block is gone — and then the capped remainder fits without evicting it.
        let wanted = (len - cached).min(self.capacity.saturating_sub(cached));
        let evicted = self.evict(self.capacity - wanted, sequence[..cached].last().copied());
        if !evicted.is_empty() {
            events.push(RouterEvent::removed(self.worker, self.take_event_id(), evicted.clone()));
        }

        let parent = cached.checked_sub(1).map(|i| sequence[i]);
        let mut blocks = Vec::with_capacity(wanted);
        let mut prev = parent;
        for (&local, &seq) in local[cached..].iter().zip(&sequence[cached..]).take(wanted) {
            if self.blocks.contains_key(&seq) {
                // Only a request repeating a sequence hash gets here; stop rather than loop.
                break;
            }
            self.insert(seq, prev);
            blocks.push(StoredBlock { local, hash: self.engine_hash(seq) });
            prev = Some(seq);
        }
        let stored = blocks.len();
        if stored > 0 {
            let parent = parent.map(|seq| self.engine_hash(seq));
            events.push(RouterEvent::stored(self.worker, self.take_event_id(), parent, blocks));
        }
        StoreOutcome { cached, stored, evicted: evicted.len() }
    }

    fn take_event_id(&mut self) -> u64 {
        let id = self.next_event_id;
        self.next_event_id += 1;
        id
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Marks a cached block as just used.
    fn touch(&mut self, seq: SequenceHash) {
        let stamp = self.tick();
        let block = self.blocks.get_mut(&seq).expect("touched blocks are cached");
        if block.children == 0 {
            self.leaves.remove(&(block.stamp, seq));
            self.leaves.insert((stamp, seq));
        }
        block.stamp = stamp;
    }

    /// Caches `seq` as a new leaf under `parent` (cached, or `None`).
    fn insert(&mut self, seq: SequenceHash, parent: Option<SequenceHash>) {
        if let Some(parent) = parent {
            let up = self.blocks.get_mut(&parent).expect("a stored block's parent is cached");
            if up.children == 0 {
                self.leaves.remove(&(up.stamp, parent));
            }
            up.children += 1;
        }
        let stamp = self.tick();
        let engine = self.engine_hash(seq);
        self.blocks.insert(seq, Block { engine, parent, children: 0, stamp });
        self.leaves.insert((stamp, seq));
    }

    /// Evicts least recently used leaves until at most `keep` blocks remain, never `pinned`.
    /// Returns the evicted blocks' engine hashes, in eviction order.
    fn evict(&mut self, keep: usize, pinned: Option<SequenceHash>) -> Vec<SequenceHash> {
        let mut evicted = Vec::new();
        while self.blocks.len() > keep {
            let Some(&(stamp, seq)) = self.leaves.iter().find(|&&(_, seq)| Some(seq) != pinned)
            else {
                break;
            };
            self.leaves.remove(&(stamp, seq));
            let block = self.blocks.remove(&seq).expect("leaves are cached");
            evicted.push(block.engine);
            if let Some(parent) = block.parent {
                let up = self.blocks.get_mut(&parent).expect("a cached block's parent is cached");
                up.children -= 1;
                if up.children == 0 {
                    self.leaves.insert((up.stamp, parent));
                }
            }
        }
        evicted
    }

    /// Drops the whole cache, publishing `Cleared` (nothing when already empty).
    pub fn clear(&mut self, events: &mut Vec<RouterEvent>) {
        if self.blocks.is_empty() {
            return;
        }
        self.blocks.clear();
        self.leaves.clear();
        events.push(RouterEvent::cleared(self.worker, self.take_event_id()));
    }

    /// Checks the internal invariants (prefix-closed, child counts, leaf set); for tests.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        assert!(self.blocks.len() <= self.capacity);
        let mut children: AHashMap<SequenceHash, u32> = AHashMap::new();
        for block in self.blocks.values() {
            if let Some(parent) = block.parent {
                assert!(self.blocks.contains_key(&parent), "a cached block's prefix is cached");
                *children.entry(parent).or_default() += 1;
            }
        }
        let leaves: BTreeSet<_> = self
            .blocks
            .iter()
            .inspect(|(seq, block)| {
                assert_eq!(block.children, children.get(seq).copied().unwrap_or(0))
            })
            .filter(|(_, block)| block.children == 0)
            .map(|(&seq, block)| (block.stamp, seq))
            .collect();
        assert_eq!(leaves, self.leaves);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::KvEventData;
    use crate::hash::BlockHasher;
    use crate::index::ReferenceIndex;

    /// A request whose block `i` holds the single token `path[i]` (block size 1).
    fn request(path: &[u32]) -> RequestHashes {
        BlockHasher::new(1).unwrap().hash_request(path)
    }

    fn removed(event: &RouterEvent) -> &[SequenceHash] {
        match &event.event.data {
            KvEventData::Removed { blocks } => blocks,
            other => panic!("expected Removed, got {other:?}"),
        }
    }

    #[test]
    fn stores_only_missing_blocks_under_the_engine_parent() {
        let mut kv = MockKvManager::new(Worker::new(3, 1), 100);
        let mut events = Vec::new();
        let a = request(&[1, 2, 3, 4]);
        assert_eq!(kv.store(&a, &mut events), StoreOutcome { cached: 0, stored: 4, evicted: 0 });
        let b = request(&[1, 2, 7]);
        assert_eq!(kv.store(&b, &mut events), StoreOutcome { cached: 2, stored: 1, evicted: 0 });
        assert_eq!(kv.store(&b, &mut events), StoreOutcome { cached: 3, stored: 0, evicted: 0 });

        assert_eq!(events.len(), 2, "a fully cached request publishes nothing");
        let first = a.local.iter().zip(&a.sequence);
        let expected: Vec<StoredBlock> =
            first.map(|(&local, &seq)| StoredBlock { local, hash: kv.engine_hash(seq) }).collect();
        assert_eq!(events[0], RouterEvent::stored(kv.worker(), 1, None, expected));
        let parent = Some(kv.engine_hash(b.sequence[1]));
        let blocks = vec![StoredBlock { local: b.local[2], hash: kv.engine_hash(b.sequence[2]) }];
        assert_eq!(events[1], RouterEvent::stored(kv.worker(), 2, parent, blocks));
        assert_eq!(kv.len(), 5);
        kv.check_invariants();
    }

    #[test]
    fn engine_hashes_are_not_router_hashes_and_differ_per_worker() {
        let seq = request(&[5, 6]).sequence[1];
        let (a, b) =
            (MockKvManager::new(Worker::new(0, 0), 1), MockKvManager::new(Worker::new(1, 0), 1));
        assert_ne!(a.engine_hash(seq), seq);
        assert_ne!(a.engine_hash(seq), b.engine_hash(seq));
        assert_eq!(a.engine_hash(seq), a.clone().engine_hash(seq));
    }

    #[test]
    fn a_manager_publishing_given_hashes_names_blocks_by_the_request_sequence() {
        let mut kv = MockKvManager::new(Worker::new(2, 0), 10).publishing_given_hashes();
        let mut events = Vec::new();
        let a = request(&[1, 2, 3]);
        kv.store(&a, &mut events);
        let b = request(&[1, 2, 9]);
        kv.store(&b, &mut events);
        let stored: Vec<StoredBlock> = a
            .local
            .iter()
            .zip(&a.sequence)
            .map(|(&local, &hash)| StoredBlock { local, hash })
            .collect();
        assert_eq!(events[0], RouterEvent::stored(kv.worker(), 1, None, stored));
        let tail = vec![StoredBlock { local: b.local[2], hash: b.sequence[2] }];
        assert_eq!(events[1], RouterEvent::stored(kv.worker(), 2, Some(b.sequence[1]), tail));
        kv.check_invariants();
    }

    #[test]
    fn evicts_least_recently_used_tails_before_prefixes() {
        let mut kv = MockKvManager::new(Worker::new(0, 0), 6);
        let mut events = Vec::new();
        let a = request(&[1, 2, 3, 4]);
        let b = request(&[1, 2, 8, 9]);
        kv.store(&a, &mut events);
        kv.store(&b, &mut events);
        kv.store(&a, &mut events); // a is now more recent than b's tail
        assert_eq!(kv.len(), 6);
        let c = request(&[5, 6, 7]);
        assert_eq!(kv.store(&c, &mut events), StoreOutcome { cached: 0, stored: 3, evicted: 3 });

        // b's tail leaf-first, then the least recent remaining leaf (a's tail); never 1 or 2,
        // which still had cached continuations.
        let expected: Vec<SequenceHash> = [b.sequence[3], b.sequence[2], a.sequence[3]]
            .iter()
            .map(|&seq| kv.engine_hash(seq))
            .collect();
        let last = events.len() - 1;
        assert_eq!(removed(&events[last - 1]), expected);
        assert_eq!(events[last - 1].event.event_id + 1, events[last].event.event_id);
        assert_eq!(kv.cached_prefix(&a.sequence), 3);
        assert_eq!(kv.cached_prefix(&c.sequence), 3);
        kv.check_invariants();
    }

    #[test]
    fn never_evicts_the_prefix_being_extended() {
        let mut kv = MockKvManager::new(Worker::new(0, 0), 4);
        let mut events = Vec::new();
        kv.store(&request(&[9]), &mut events);
        kv.store(&request(&[1, 2]), &mut events);
        // Needs two slots: evicts the older root 9, not the prefix 1, 2 it continues.
        let outcome = kv.store(&request(&[1, 2, 3, 4]), &mut events);
        assert_eq!(outcome, StoreOutcome { cached: 2, stored: 2, evicted: 1 });
        assert!(!kv.contains(request(&[9]).sequence[0]));
        assert_eq!(kv.cached_prefix(&request(&[1, 2, 3, 4]).sequence), 4);
        kv.check_invariants();
    }

    #[test]
    fn request_longer_than_capacity_caches_its_head() {
        let mut kv = MockKvManager::new(Worker::new(0, 0), 3);
        let mut events = Vec::new();
        let long = request(&[1, 2, 3, 4, 5]);
        assert_eq!(kv.store(&long, &mut events), StoreOutcome { cached: 0, stored: 3, evicted: 0 });
        assert_eq!(kv.cached_prefix(&long.sequence), 3);
        let zero = &mut MockKvManager::new(Worker::new(1, 0), 0);
        assert_eq!(zero.store(&long, &mut events), StoreOutcome::default());
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn random_workload_keeps_invariants_and_replays_into_the_index() {
        let workers: Vec<Worker> = (0..3).map(|w| Worker::new(w, 0)).collect();
        let mut kvs: Vec<MockKvManager> =
            workers.iter().map(|&w| MockKvManager::new(w, 12)).collect();
        let mut index = ReferenceIndex::new();
        let mut events = Vec::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for step in 0..2_000 {
            // Paths over a small alphabet share prefixes often.
            let len = 1 + next(8) as usize;
            let path: Vec<u32> = (0..len).map(|_| next(3) as u32).collect();
            let kv = &mut kvs[next(3) as usize];
            let before = events.len();
            kv.store(&request(&path), &mut events);
            kv.check_invariants();
            for event in &events[before..] {
                index.apply(event).unwrap_or_else(|err| panic!("step {step}: {err}"));
            }
        }
        for kv in &kvs {
            assert_eq!(index.block_count(kv.worker()), kv.len());
            let ids: Vec<u64> = events
                .iter()
                .filter(|e| e.worker() == kv.worker())
                .map(|e| e.event.event_id)
                .collect();
            assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
        }
        assert!(events.iter().any(|e| matches!(e.event.data, KvEventData::Removed { .. })));
    }

    #[test]
    fn clear_publishes_cleared_once() {
        let mut kv = MockKvManager::new(Worker::new(0, 0), 8);
        let mut events = Vec::new();
        kv.clear(&mut events);
        assert!(events.is_empty());
        kv.store(&request(&[1, 2]), &mut events);
        kv.clear(&mut events);
        assert_eq!(events.last(), Some(&RouterEvent::cleared(kv.worker(), 2)));
        assert!(kv.is_empty());
        kv.check_invariants();
    }
}
