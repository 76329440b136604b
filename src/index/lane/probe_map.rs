//! [`ProbeMap`]: a single-owner map from a 64-bit hash to a 32-bit value, whose memory follows
//! its length whatever the history.
//!
//! Robin Hood linear probing with backward-shift deletion: entries of a probe run stay in order
//! of their home slots, so searches stop early even at 7/8 load, and a removal moves later
//! entries back instead of leaving a tombstone, so churn at a steady size never grows the table
//! (a tombstoning map like hashbrown doubles under churn once more than half full). Each slot
//! keeps its entry's home slot in what would be padding, so probing never rehashes. It grows by
//! half past 7/8 load and shrinks below 1/8. Only the lane that owns a worker touches its maps,
//! so there is no synchronization here. Keys go through the pool's secret [`Mixer`], so keys
//! chosen to share a home slot are guesswork.

use std::mem;

use crate::mix::Mixer;

const MIN_SLOTS: usize = 8;
const EMPTY: u64 = 0;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// [`EMPTY`] for a free slot (key `EMPTY` itself lives in `ProbeMap::empty_key`).
    key: u64,
    value: u32,
    home: u32,
}

/// See the [module docs](self).
#[derive(Clone, Debug)]
pub(crate) struct ProbeMap {
    slots: Box<[Slot]>,
    len: usize,
    empty_key: Option<u32>,
    mixer: Mixer,
}

/// The home slot of a key mixed to `mixed`: scaled into `0..slots` by a multiply, so the slot
/// count need not be a power of two.
#[inline]
fn home(mixed: u64, slots: usize) -> usize {
    ((u128::from(mixed) * slots as u128) >> 64) as usize
}

/// The slot after `at` in a table of `slots`.
#[inline]
fn next(at: usize, slots: usize) -> usize {
    if at + 1 == slots { 0 } else { at + 1 }
}

/// How far `at` lies after `from`, going forward around a table of `slots`.
#[inline]
fn distance(from: usize, at: usize, slots: usize) -> usize {
    if at >= from { at - from } else { at + slots - from }
}

impl ProbeMap {
    /// An empty map whose slots `mixer` picks.
    pub(crate) fn new(mixer: Mixer) -> Self {
        Self { slots: Box::default(), len: 0, empty_key: None, mixer }
    }

    pub(crate) fn len(&self) -> usize {
        self.len + usize::from(self.empty_key.is_some())
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.slots.len() * mem::size_of::<Slot>()
    }

    /// Where `key` is (`Ok`), or the slot it belongs at (`Err`): Robin Hood order means a search
    /// stops at an empty slot or at an entry whose home comes after `key`'s.
    #[inline]
    fn search(&self, key: u64, at_home: usize) -> Result<usize, usize> {
        let slots = self.slots.len();
        let mut at = at_home;
        let mut displacement = 0;
        loop {
            let slot = &self.slots[at];
            if slot.key == key {
                return Ok(at);
            }
            if slot.key == EMPTY || distance(slot.home as usize, at, slots) < displacement {
                return Err(at);
            }
            at = next(at, slots);
            displacement += 1;
        }
    }

    fn find(&self, key: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        self.search(key, home(self.mixer.mix(key), self.slots.len())).ok()
    }

    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return self.empty_key;
        }
        self.find(key).map(|at| self.slots[at].value)
    }

    /// Inserts `value` unless `key` is present, in which case its value is returned.
    pub(crate) fn insert_or_get(&mut self, key: u64, value: u32) -> Option<u32> {
        if key == EMPTY {
            let existing = self.empty_key;
            self.empty_key.get_or_insert(value);
            return existing;
        }
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.resize((self.len + 1) * 3 / 2);
        }
        let slots = self.slots.len();
        let at_home = home(self.mixer.mix(key), slots);
        let mut at = match self.search(key, at_home) {
            Ok(at) => return Some(self.slots[at].value),
            Err(at) => at,
        };
        // Take the slot and push the entries from it onwards one slot along, up to an empty one.
        let mut carried = Slot { key, value, home: at_home as u32 };
        loop {
            carried = mem::replace(&mut self.slots[at], carried);
            if carried.key == EMPTY {
                break;
            }
            at = next(at, slots);
        }
        self.len += 1;
        None
    }

    pub(crate) fn remove(&mut self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return self.empty_key.take();
        }
        let mut hole = self.find(key)?;
        let removed = self.slots[hole].value;
        let slots = self.slots.len();
        // Shift the following entries back one slot, up to an empty slot or one already home.
        loop {
            let at = next(hole, slots);
            let slot = self.slots[at];
            if slot.key == EMPTY || slot.home as usize == at {
                break;
            }
            self.slots[hole] = slot;
            hole = at;
        }
        self.slots[hole] = Slot::default();
        self.len -= 1;
        if self.len * 8 < self.slots.len() && self.slots.len() > MIN_SLOTS {
            self.resize(self.len * 2);
        }
        Some(removed)
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let stored = self.slots.iter().filter(|slot| slot.key != EMPTY);
        let stored = stored.map(|slot| (slot.key, slot.value));
        self.empty_key.map(|value| (EMPTY, value)).into_iter().chain(stored)
    }

    /// Every value, to rewrite in place.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut u32> + '_ {
        let stored = self.slots.iter_mut().filter(|slot| slot.key != EMPTY);
        self.empty_key.as_mut().into_iter().chain(stored.map(|slot| &mut slot.value))
    }

    /// Reallocates with `room` slots (at least [`MIN_SLOTS`]). Any count works (slots are
    /// found by multiplying, not masking), so growing by 3/2 keeps the load between 7/12 and
    /// 7/8 instead of the 7/16–7/8 of power-of-two tables: a worker's map costs 18–27 bytes per
    /// block rather than up to 37.
    fn resize(&mut self, room: usize) {
        let slots = room.max(MIN_SLOTS);
        assert!(slots <= u32::MAX as usize, "a worker map past 2^32 slots");
        let old = mem::replace(&mut self.slots, vec![Slot::default(); slots].into());
        self.len = 0;
        for slot in old.iter().filter(|slot| slot.key != EMPTY) {
            self.insert_or_get(slot.key, slot.value);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Agrees with `HashMap` through inserts, updates and removals, including key 0 and
        /// keys that collide in their home slot.
        #[test]
        fn matches_a_hash_map(ops in prop::collection::vec((0u64..48, any::<u8>(), 0u8..3), 1..400)) {
            let mut map = ProbeMap::new(Mixer::random());
            let mut model: HashMap<u64, u32> = HashMap::new();
            for (key, value, op) in ops {
                let key = key * 1024; // same low bits: long probe runs
                match op {
                    0 => {
                        let existing = map.insert_or_get(key, value.into());
                        prop_assert_eq!(existing, model.get(&key).copied());
                        model.entry(key).or_insert(value.into());
                    }
                    1 => prop_assert_eq!(map.remove(key), model.remove(&key)),
                    _ => {
                        map.values_mut().for_each(|v| *v += 1);
                        model.values_mut().for_each(|v| *v += 1);
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                for (&k, &v) in &model {
                    prop_assert_eq!(map.get(k), Some(v));
                }
                let mut listed: Vec<(u64, u32)> = map.iter().collect();
                listed.sort_unstable();
                let mut expected: Vec<(u64, u32)> = model.iter().map(|(&k, &v)| (k, v)).collect();
                expected.sort_unstable();
                prop_assert_eq!(listed, expected);
            }
        }
    }

    #[test]
    fn churn_at_a_steady_size_does_not_grow_the_table() {
        let mut map = ProbeMap::new(Mixer::random());
        for key in 1..=16_384u64 {
            map.insert_or_get(key, 0);
        }
        let settled = map.bytes();
        for round in 0..8u64 {
            for key in 1..=16_384u64 {
                map.remove(key + round * 16_384);
                map.insert_or_get(key + (round + 1) * 16_384, 0);
            }
        }
        assert_eq!(map.len(), 16_384);
        assert_eq!(map.bytes(), settled);
    }
}
