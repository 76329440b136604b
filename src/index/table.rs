//! [`NodeTable`]: a sharded open-addressing map from a 64-bit key to a 64-bit membership word,
//! read without locks.
//!
//! Keys are our sequence hashes (already uniform), so they need no second hash: the top bits pick
//! the shard, the low bits the slot. Writers (the index lanes) take their shard's mutex; readers
//! pin an epoch and probe the shard's current array with acquire loads.
//!
//! A slot whose word is 0 is *dead*: readers treat it as absent and writers reuse it for any key
//! on insert, so removals never move slots (a concurrent probe never misses a live key). Because a
//! dead slot may be reused for another key while a reader looks at it, readers re-check the key
//! after loading the word. When keyed slots pass 80% of an array, the shard copies its live slots
//! into a fresh array sized for them (growing or shrinking) and retires the old one through the
//! epoch, so memory follows the live state.

use std::cell::Cell;

use crossbeam_utils::CachePadded;

use crate::sync::epoch::{self, Guard, Published};
use crate::sync::{AtomicU64, Mutex, Ordering};

/// Marks a never-used slot. A real key equal to it is stored as [`ZERO_KEY_STAND_IN`].
const EMPTY: u64 = 0;
/// Stands in for key 0 (a 2^-64 collision risk, like any 64-bit hash identity).
const ZERO_KEY_STAND_IN: u64 = u64::MAX;
/// 16 shards: few enough that a lane's batch takes each lock once, enough to keep two or more
/// lanes and the occasional rebuild out of each other's way.
const SHARD_BITS: u32 = 4;
const MIN_SLOTS: usize = 16;

/// One membership change for [`NodeTable::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BitOp {
    pub(crate) key: u64,
    pub(crate) bits: u64,
    pub(crate) set: bool,
}

struct Slot {
    key: AtomicU64,
    word: AtomicU64,
}

struct Array {
    slots: Box<[Slot]>,
}

impl Array {
    fn with_slots(slots: usize) -> Self {
        let slots =
            (0..slots).map(|_| Slot { key: AtomicU64::new(EMPTY), word: AtomicU64::new(0) });
        Self { slots: slots.collect() }
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }
}

/// Guarded by the shard's mutex; `Cell`s so the guard can be borrowed shared (as proof of the
/// lock for [`Published::load_locked`]) while the counts change.
#[derive(Default)]
struct ShardCounts {
    /// Slots with a key (live or dead).
    keyed: Cell<usize>,
    /// Slots with a non-zero word.
    live: Cell<usize>,
}

fn bump(cell: &Cell<usize>, up: bool) {
    cell.set(if up { cell.get() + 1 } else { cell.get() - 1 });
}

struct Shard {
    array: Published<Array>,
    counts: Mutex<ShardCounts>,
}

/// See the [module docs](self).
pub struct NodeTable {
    shards: Box<[CachePadded<Shard>]>,
}

#[inline]
fn stored_key(key: u64) -> u64 {
    if key == EMPTY { ZERO_KEY_STAND_IN } else { key }
}

impl NodeTable {
    /// An empty table.
    pub fn new() -> Self {
        let shards = (0..1usize << SHARD_BITS).map(|_| {
            CachePadded::new(Shard {
                array: Published::new(Array::with_slots(MIN_SLOTS)),
                counts: Mutex::new(ShardCounts::default()),
            })
        });
        Self { shards: shards.collect() }
    }

    #[inline]
    fn shard(&self, key: u64) -> &Shard {
        &self.shards[(key >> (64 - SHARD_BITS)) as usize]
    }

    /// The word stored under `key`, 0 when absent. Lock-free.
    #[inline]
    pub fn get(&self, key: u64, guard: &Guard) -> u64 {
        let key = stored_key(key);
        let array = self.shard(key).array.load(guard);
        let mask = array.mask();
        let mut at = key as usize & mask;
        loop {
            let slot = &array.slots[at];
            let seen = slot.key.load(Ordering::Acquire);
            if seen == key {
                let word = slot.word.load(Ordering::Acquire);
                // The slot may have died and been reused for another key since we read the key;
                // a word written after that reuse makes this second load see the new key.
                return if slot.key.load(Ordering::Relaxed) == key { word } else { 0 };
            }
            if seen == EMPTY {
                return 0;
            }
            at = (at + 1) & mask;
        }
    }

    /// Sets `bits` in the word of `key`, inserting it if absent. Returns the previous word.
    pub fn set_bits(&self, key: u64, bits: u64) -> u64 {
        let key = stored_key(key);
        let shard = self.shard(key);
        Self::set_locked(shard, &shard.counts.lock(), key, bits)
    }

    /// Clears `bits` in the word of `key`. Returns the previous word (0 if absent).
    pub fn clear_bits(&self, key: u64, bits: u64) -> u64 {
        let key = stored_key(key);
        let shard = self.shard(key);
        Self::clear_locked(shard, &shard.counts.lock(), key, bits)
    }

    /// Applies `ops` (distinct keys, reordered by shard), taking each
    /// shard's lock once: a lane's whole event costs a few lock operations, not one per block,
    /// and the slot loads between them can overlap.
    pub(crate) fn apply(&self, ops: &mut [BitOp]) {
        ops.sort_unstable_by_key(|op| stored_key(op.key) >> (64 - SHARD_BITS));
        for group in ops.chunk_by(|a, b| {
            stored_key(a.key) >> (64 - SHARD_BITS) == stored_key(b.key) >> (64 - SHARD_BITS)
        }) {
            let shard = self.shard(stored_key(group[0].key));
            let counts = shard.counts.lock();
            for op in group {
                let key = stored_key(op.key);
                if op.set {
                    Self::set_locked(shard, &counts, key, op.bits);
                } else {
                    Self::clear_locked(shard, &counts, key, op.bits);
                }
            }
        }
    }

    fn set_locked(shard: &Shard, counts: &ShardCounts, key: u64, bits: u64) -> u64 {
        debug_assert_ne!(bits, 0);
        if (counts.keyed.get() + 1) * 5 > shard.array.load_locked(counts).slots.len() * 4 {
            Self::rebuild(shard, counts, counts.live.get() + 1);
        }
        let array = shard.array.load_locked(counts);
        let mask = array.mask();
        let mut at = key as usize & mask;
        let mut reusable = None;
        loop {
            let slot = &array.slots[at];
            let seen = slot.key.load(Ordering::Relaxed);
            if seen == key {
                let old = slot.word.fetch_or(bits, Ordering::Release);
                if old == 0 {
                    bump(&counts.live, true);
                }
                return old;
            }
            if seen == EMPTY {
                break;
            }
            if reusable.is_none() && slot.word.load(Ordering::Relaxed) == 0 {
                reusable = Some(at);
            }
            at = (at + 1) & mask;
        }
        let slot = match reusable {
            Some(dead) => &array.slots[dead],
            None => {
                bump(&counts.keyed, true);
                &array.slots[at]
            }
        };
        // Key first, then the word with release: a reader that sees the word sees the key.
        slot.key.store(key, Ordering::Release);
        slot.word.store(bits, Ordering::Release);
        bump(&counts.live, true);
        0
    }

    fn clear_locked(shard: &Shard, counts: &ShardCounts, key: u64, bits: u64) -> u64 {
        let array = shard.array.load_locked(counts);
        let mask = array.mask();
        let mut at = key as usize & mask;
        loop {
            let slot = &array.slots[at];
            let seen = slot.key.load(Ordering::Relaxed);
            if seen == key {
                let old = slot.word.fetch_and(!bits, Ordering::Release);
                let len = array.slots.len();
                if old != 0 && old & !bits == 0 {
                    bump(&counts.live, false);
                    // Shrink once mostly dead (below 1/8 load, so the new array is smaller).
                    if counts.live.get() * 8 < len && len > MIN_SLOTS {
                        Self::rebuild(shard, counts, counts.live.get());
                    }
                }
                return old;
            }
            if seen == EMPTY {
                return 0;
            }
            at = (at + 1) & mask;
        }
    }

    /// Copies the live slots into the smallest fresh array that holds `live` keys at ≤ 60% load.
    fn rebuild(shard: &Shard, counts: &ShardCounts, live: usize) {
        let guard = epoch::pin();
        let old = shard.array.load(&guard);
        let fresh = Array::with_slots((live * 5 / 3 + 1).next_power_of_two().max(MIN_SLOTS));
        let mask = fresh.mask();
        let mut moved = 0;
        for slot in old.slots.iter() {
            let word = slot.word.load(Ordering::Relaxed);
            if word == 0 {
                continue;
            }
            let key = slot.key.load(Ordering::Relaxed);
            let mut at = key as usize & mask;
            while fresh.slots[at].key.load(Ordering::Relaxed) != EMPTY {
                at = (at + 1) & mask;
            }
            fresh.slots[at].key.store(key, Ordering::Relaxed);
            fresh.slots[at].word.store(word, Ordering::Relaxed);
            moved += 1;
        }
        counts.keyed.set(moved);
        counts.live.set(moved);
        shard.array.replace(fresh);
    }

    /// Keys with a non-zero word.
    pub(crate) fn live(&self) -> usize {
        self.shards.iter().map(|shard| shard.counts.lock().live.get()).sum()
    }

    /// Bytes held by the arrays (slots only).
    pub(crate) fn bytes(&self) -> usize {
        let guard = epoch::pin();
        let slots: usize = self.shards.iter().map(|s| s.array.load(&guard).slots.len()).sum();
        slots * std::mem::size_of::<Slot>()
            + self.shards.len() * std::mem::size_of::<CachePadded<Shard>>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The table agrees with a plain map through inserts, clears, reuse and rebuilds.
        #[test]
        fn matches_a_plain_map(ops in prop::collection::vec((0u64..64, 0u32..4, any::<bool>()), 1..600)) {
            let table = NodeTable::new();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for (key, bit, set) in ops {
                // Spread keys over shards and slots, and include the 0 key.
                let key = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let bits = 1u64 << bit;
                let word = model.entry(key).or_default();
                let old = *word;
                let returned = if set { *word |= bits; table.set_bits(key, bits) } else {
                    *word &= !bits; table.clear_bits(key, bits)
                };
                prop_assert_eq!(returned, old);
                let guard = epoch::pin();
                for (&k, &w) in &model {
                    prop_assert_eq!(table.get(k, &guard), w);
                }
                prop_assert_eq!(table.live(), model.values().filter(|&&w| w != 0).count());
            }
        }
    }

    /// Small enough for miri (`README.md` has the command): grows and shrinks the arrays, so
    /// old arrays are retired through the epoch while another thread reads.
    #[test]
    fn rebuilds_under_a_concurrent_reader() {
        let table = std::sync::Arc::new(NodeTable::new());
        // ~25 keys a shard: past the first array's 80% mark, then back below 1/8.
        let keys: Vec<u64> = (1..400u64).map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        let reader = {
            let (table, keys) = (table.clone(), keys.clone());
            std::thread::spawn(move || {
                for round in 0..3 {
                    let guard = epoch::pin();
                    for &key in &keys {
                        let word = table.get(key, &guard);
                        assert!(word == 0 || word == 1, "round {round}: torn word {word}");
                    }
                }
            })
        };
        let empty = table.bytes();
        for &key in &keys {
            table.set_bits(key, 1);
        }
        let peak = table.bytes();
        for &key in &keys[8..] {
            table.clear_bits(key, 1);
        }
        reader.join().unwrap();
        assert!(peak > empty && table.bytes() < peak, "the arrays grew and shrank");
        let guard = epoch::pin();
        assert!(keys[..8].iter().all(|&k| table.get(k, &guard) == 1));
        assert!(keys[8..].iter().all(|&k| table.get(k, &guard) == 0));
        assert_eq!(table.live(), 8);
    }

    #[test]
    fn memory_shrinks_after_removals() {
        let table = NodeTable::new();
        let keys: Vec<u64> =
            (1..20_000u64).map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        for &key in &keys {
            table.set_bits(key, 1);
        }
        let full = table.bytes();
        for &key in &keys[100..] {
            table.clear_bits(key, 1);
        }
        assert_eq!(table.live(), 100);
        assert!(table.bytes() * 8 < full, "{} vs {full}", table.bytes());
        let guard = epoch::pin();
        assert!(keys[..100].iter().all(|&k| table.get(k, &guard) == 1));
    }
}
