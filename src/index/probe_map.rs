//! [`ProbeMap`]: a single-owner map from a 64-bit hash to a small `Copy` value, whose memory
//! follows its length whatever the history.
//!
//! Robin Hood linear probing with backward-shift deletion: entries of a probe run stay in order
//! of their home slots, so searches stop early even at 7/8 load, and a removal moves later
//! entries back instead of leaving a tombstone, so churn at a steady size never grows the table
//! (a tombstoning map like hashbrown doubles under churn once more than half full). It grows by
//! half past 7/8 load and shrinks below 1/8. Only the lane that owns a worker touches its maps, so there is no
//! synchronization here.

use std::mem;

const MIN_SLOTS: usize = 8;

/// See the [module docs](self).
#[derive(Clone, Debug)]
pub(crate) struct ProbeMap<V: Copy + Default> {
    /// `(key, value)`; a slot is empty when its key is `EMPTY` (key `EMPTY` itself lives in
    /// `empty_key`).
    slots: Box<[(u64, V)]>,
    len: usize,
    empty_key: Option<V>,
}

const EMPTY: u64 = 0;

#[inline]
fn home(key: u64, slots: usize) -> usize {
    // Keys may be small or patterned (engine hashes, tests): fold, then scale into `0..slots`
    // (a multiply, so the slot count need not be a power of two).
    let folded = u128::from(key) * 0x9E37_79B9_7F4A_7C15;
    let mixed = ((folded >> 64) as u64) ^ (folded as u64);
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

impl<V: Copy + Default> Default for ProbeMap<V> {
    fn default() -> Self {
        Self { slots: Box::new([]), len: 0, empty_key: None }
    }
}

impl<V: Copy + Default> ProbeMap<V> {
    pub(crate) fn len(&self) -> usize {
        self.len + usize::from(self.empty_key.is_some())
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.slots.len() * mem::size_of::<(u64, V)>()
    }

    /// How far the entry in slot `at` sits from its home slot.
    #[inline]
    fn displacement(&self, at: usize) -> usize {
        let slots = self.slots.len();
        distance(home(self.slots[at].0, slots), at, slots)
    }

    /// Robin Hood order: along a probe sequence, displacements never drop by more than one, so
    /// a search stops at an empty slot or at an entry closer to home than the searcher would be.
    fn find(&self, key: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let slots = self.slots.len();
        let mut at = home(key, slots);
        let mut displacement = 0;
        loop {
            match self.slots[at].0 {
                k if k == key => return Some(at),
                EMPTY => return None,
                _ if self.displacement(at) < displacement => return None,
                _ => {
                    at = next(at, slots);
                    displacement += 1;
                }
            }
        }
    }

    pub(crate) fn get(&self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.empty_key;
        }
        self.find(key).map(|at| self.slots[at].1)
    }

    /// Touches the home slots of `keys` ahead of lookups: the loads are independent, so their
    /// cache misses overlap instead of each lookup waiting for its own.
    pub(crate) fn prefetch(&self, keys: impl Iterator<Item = u64>) {
        if self.slots.is_empty() {
            return;
        }
        let touched = keys.fold(0u64, |acc, key| acc ^ self.slots[home(key, self.slots.len())].0);
        std::hint::black_box(touched);
    }

    pub(crate) fn contains_key(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// Inserts `value` unless `key` is present; returns whether it did.
    pub(crate) fn insert_new(&mut self, key: u64, value: V) -> bool {
        if key == EMPTY {
            let absent = self.empty_key.is_none();
            if absent {
                self.empty_key = Some(value);
            }
            return absent;
        }
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.resize((self.len + 1) * 3 / 2);
        }
        let slots = self.slots.len();
        let mut at = home(key, slots);
        let mut displacement = 0;
        // Find the key, or the slot where it belongs (the first entry closer to home).
        loop {
            match self.slots[at].0 {
                k if k == key => return false,
                EMPTY => break,
                _ if self.displacement(at) < displacement => break,
                _ => {
                    at = next(at, slots);
                    displacement += 1;
                }
            }
        }
        // Take that slot and push the entries from it onwards one slot along, up to an empty one.
        let mut carried = (key, value);
        loop {
            carried = mem::replace(&mut self.slots[at], carried);
            if carried.0 == EMPTY {
                break;
            }
            at = next(at, slots);
        }
        self.len += 1;
        true
    }

    pub(crate) fn remove(&mut self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.empty_key.take();
        }
        let mut hole = self.find(key)?;
        let removed = self.slots[hole].1;
        let slots = self.slots.len();
        // Shift the following entries back one slot, up to an empty slot or one already home.
        loop {
            let at = next(hole, slots);
            if self.slots[at].0 == EMPTY || self.displacement(at) == 0 {
                break;
            }
            self.slots[hole] = self.slots[at];
            hole = at;
        }
        self.slots[hole] = (EMPTY, V::default());
        self.len -= 1;
        if self.len * 8 < self.slots.len() && self.slots.len() > MIN_SLOTS {
            self.resize(self.len * 2);
        }
        Some(removed)
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        let stored = self.slots.iter().filter(|slot| slot.0 != EMPTY).copied();
        self.empty_key.map(|value| (EMPTY, value)).into_iter().chain(stored)
    }

    /// Every value, to rewrite in place.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> + '_ {
        let stored = self.slots.iter_mut().filter(|slot| slot.0 != EMPTY).map(|slot| &mut slot.1);
        self.empty_key.as_mut().into_iter().chain(stored)
    }

    /// Reallocates with `room` slots (at least [`MIN_SLOTS`]). Any count works (slots are
    /// found by multiplying, not masking), so growing by 3/2 keeps the load between 7/12 and
    /// 7/8 instead of the 7/16–7/8 of power-of-two tables: a worker's map costs 18–27 bytes per
    /// block rather than up to 37.
    fn resize(&mut self, room: usize) {
        let slots = room.max(MIN_SLOTS);
        let old = mem::replace(&mut self.slots, vec![(EMPTY, V::default()); slots].into());
        self.len = 0;
        for (key, value) in old.iter().copied().filter(|slot| slot.0 != EMPTY) {
            self.insert_new(key, value);
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
            let mut map = ProbeMap::<u32>::default();
            let mut model: HashMap<u64, u32> = HashMap::new();
            for (key, value, op) in ops {
                let key = key * 1024; // same low bits: long probe runs
                match op {
                    0 => {
                        let inserted = map.insert_new(key, value.into());
                        prop_assert_eq!(inserted, !model.contains_key(&key));
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
        let mut map = ProbeMap::<()>::default();
        for key in 1..=16_384u64 {
            map.insert_new(key, ());
        }
        let settled = map.bytes();
        for round in 0..8u64 {
            for key in 1..=16_384u64 {
                map.remove(key + round * 16_384);
                map.insert_new(key + (round + 1) * 16_384, ());
            }
        }
        assert_eq!(map.len(), 16_384);
        assert_eq!(map.bytes(), settled);
    }
}
