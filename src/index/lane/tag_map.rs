//! [`TagMap`]: a single-owner set of node ids, found by a 32-bit tag of a name that the caller
//! confirms against the node itself.
//!
//! Built for one worker's blocks, where the lookup structure is what a lane touches at random
//! for every block it stores or removes: a slot is 8 bytes (tag and node), half what a map
//! holding the 64-bit name would need, because the node already records its name. Bucketed
//! cuckoo hashing: a tag lives in one of two buckets of [`WAYS`] slots, each bucket one cache
//! line, both derived from the tag alone (so the table can move entries without their names):
//! the table has a power-of-two number of buckets, a tag's first bucket is some of its bits, and
//! its second is the first with a few bits flipped (so each leads to the other), a handful of
//! instructions, computed twice per block (prefetch, then use).
//! A lookup reads at most two lines and compares a bucket's tags in one vector operation (no
//! branch per slot to mispredict); a removal clears one slot (no tombstones, no shifting), so
//! churn at a steady size never grows the table. It doubles past 7/8 load (each bucket splits
//! into two new ones with no displacement: while a worker's cache fills this costs
//! about a third of the time growing by half did, for at most 18 rather than 14 bytes per
//! entry) and shrinks below 1/8. Lookups are independent of each other, so the processor
//! overlaps their cache misses; the owner also prefetches a few names ahead
//! ([`TagMap::prefetch`]).
//!
//! The owner passes each name as its pool's secret [`Mixer`](crate::mix::Mixer) mixed it (the
//! `mixed` arguments), so names chosen to share a tag are guesswork.
//!
//! An entry that cannot be placed in a table not yet half full (only many names sharing one
//! tag do that) is handed back as *spilled* rather than growing the table without bound: the
//! owner keeps it elsewhere.

use std::mem;

use crate::index::lane::node_ids::NodeId;
use crate::prefetch::prefetch_line;

/// Slots per bucket: 8 × (4-byte tag + 4-byte node) = one 64-byte line.
const WAYS: usize = 8;
/// The tag of a free slot (real tags are odd).
const FREE: u32 = 0;
/// Moves one placement may make before the table grows (or spills) instead.
const MAX_KICKS: usize = 64;

#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Bucket {
    tags: [u32; WAYS],
    nodes: [NodeId; WAYS],
}

impl Bucket {
    const EMPTY: Bucket = Bucket { tags: [FREE; WAYS], nodes: [0; WAYS] };

    /// Bit `way` set for every slot tagged `tag`.
    #[inline]
    fn matches(&self, tag: u32) -> u32 {
        lanes_equal(&self.tags, tag)
    }

    /// The slots tagged `tag`, and the free slots, as bit masks.
    #[inline]
    fn scan(&self, tag: u32) -> (u32, u32) {
        (lanes_equal(&self.tags, tag), lanes_equal(&self.tags, FREE))
    }

    /// Puts the entry in the first slot of `free` (a non-empty mask of free slots).
    #[inline]
    fn put_at(&mut self, free: u32, tag: u32, node: NodeId) {
        let way = free.trailing_zeros() as usize;
        self.tags[way] = tag;
        self.nodes[way] = node;
    }

    /// Puts the entry in a free slot, if there is one.
    #[inline]
    fn put(&mut self, tag: u32, node: NodeId) -> bool {
        let free = self.matches(FREE);
        if free != 0 {
            self.put_at(free, tag, node);
        }
        free != 0
    }
}

/// Bit `way` set for every `tags[way] == tag`: two vector compares and a mask move, no branch
/// per slot (the compiler does not find this on its own; this is most of a lookup's work).
#[cfg(target_arch = "x86_64")]
#[inline]
fn lanes_equal(tags: &[u32; WAYS], tag: u32) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline, so every x86_64 processor has these
    // instructions; the two unaligned loads read bytes 0..16 and 16..32 of `tags` (32 bytes).
    unsafe {
        let low = _mm_loadu_si128(tags.as_ptr().cast());
        let high = _mm_loadu_si128(tags.as_ptr().add(4).cast());
        let wanted = _mm_set1_epi32(tag as i32);
        // Each 32-bit lane is all ones or zero; narrowing keeps that, one byte per slot.
        let words = _mm_packs_epi32(_mm_cmpeq_epi32(low, wanted), _mm_cmpeq_epi32(high, wanted));
        (_mm_movemask_epi8(_mm_packs_epi16(words, words)) & 0xFF) as u32
    }
}

/// Bit `way` set for every `tags[way] == tag`.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn lanes_equal(tags: &[u32; WAYS], tag: u32) -> u32 {
    let mut mask = 0;
    for (way, &t) in tags.iter().enumerate() {
        mask |= u32::from(t == tag) << way;
    }
    mask
}

/// The tag of a name, from the name as the owner's [`Mixer`](crate::mix::Mixer) mixed it: 32
/// well-mixed bits, never [`FREE`].
#[inline]
pub(crate) fn tag_of(mixed: u64) -> u32 {
    ((mixed >> 32) as u32) | 1
}

/// The two buckets of `tag` in a table of `mask + 1` buckets, a power of two (distinct unless
/// there is one). The first is the tag's bits above its lowest (which is always set); the
/// second flips the first's bits by an odd amount taken from a multiply that mixes the whole
/// tag, so entries sharing a first bucket spread over different second ones, and the second's
/// second is the first again. In a table twice as large, each bucket is the one here, or that
/// plus the old size: the role of a bucket survives doubling (see [`TagMap::grow`]).
#[inline]
fn buckets_of(tag: u32, mask: usize) -> (usize, usize) {
    let first = (tag >> 1) as usize & mask;
    (first, first ^ (flip_of(tag) & mask))
}

/// What a tag's second bucket flips of its first (the bits the table's mask keeps of it).
#[inline]
fn flip_of(tag: u32) -> usize {
    let mixed = u64::from(tag).wrapping_mul(0x9FB2_1C65_1E98_DF25) >> 32;
    mixed as usize | 1
}

/// See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub(crate) struct TagMap {
    buckets: Box<[Bucket]>,
    len: usize,
    /// Picks which slot a placement displaces, so a walk does not cycle between two entries.
    kick: u32,
    /// Entries handed back (see the module docs), for the owner to take.
    spilled: Vec<NodeId>,
}

impl TagMap {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.buckets.len() * mem::size_of::<Bucket>() + self.spilled.capacity() * 4
    }

    fn slots(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// The bucket index bits (the table has a power-of-two number of buckets, or none).
    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// The (bucket, way) of the entry tagged like `mixed` whose node `is_named` confirms.
    #[inline]
    fn find(&self, mixed: u64, is_named: impl Fn(NodeId) -> bool) -> Option<(usize, usize)> {
        if self.buckets.is_empty() {
            return None;
        }
        let tag = tag_of(mixed);
        let (first, second) = buckets_of(tag, self.mask());
        for bucket in [first, second] {
            let slots = &self.buckets[bucket];
            let mut candidates = slots.matches(tag);
            while candidates != 0 {
                let way = candidates.trailing_zeros() as usize;
                if is_named(slots.nodes[way]) {
                    return Some((bucket, way));
                }
                candidates &= candidates - 1;
            }
        }
        None
    }

    /// Asks the processor to start loading the buckets the name mixed to `mixed` would be in (both: an insert
    /// reads both).
    #[inline]
    pub(crate) fn prefetch(&self, mixed: u64) {
        if self.buckets.is_empty() {
            return;
        }
        let (first, second) = buckets_of(tag_of(mixed), self.mask());
        prefetch_line(&self.buckets[first]);
        prefetch_line(&self.buckets[second]);
    }

    /// The node with the name mixed to `mixed`, as `is_named` confirms.
    pub(crate) fn get(&self, mixed: u64, is_named: impl Fn(NodeId) -> bool) -> Option<NodeId> {
        self.find(mixed, is_named).map(|(bucket, way)| self.buckets[bucket].nodes[way])
    }

    /// The node with the name mixed to `mixed`, as `is_named` confirms; if there is none, adds
    /// `node` under its tag (afterwards [`Self::take_spilled`] may hand back an entry). The buckets
    /// searched are the ones the entry goes in, so placing it reads no new line.
    #[inline(always)] // One caller, in the lane's hottest loop.
    pub(crate) fn insert_or_get(
        &mut self,
        mixed: u64,
        node: NodeId,
        is_named: impl Fn(NodeId) -> bool,
    ) -> Option<NodeId> {
        if (self.len + 1) * 8 > self.slots() * 7 {
            // Growing first (an empty table too): the slow path.
            if let Some((bucket, way)) = self.find(mixed, is_named) {
                return Some(self.buckets[bucket].nodes[way]);
            }
            self.insert(mixed, node);
            return None;
        }
        // One pass over both buckets finds the entry or, failing that, the free slots.
        let tag = tag_of(mixed);
        let (first, second) = buckets_of(tag, self.mask());
        let mut free = [0; 2];
        for (side, bucket) in [first, second].into_iter().enumerate() {
            let slots = &self.buckets[bucket];
            let (mut candidates, empty) = slots.scan(tag);
            free[side] = empty;
            while candidates != 0 {
                let way = candidates.trailing_zeros() as usize;
                if is_named(slots.nodes[way]) {
                    return Some(slots.nodes[way]);
                }
                candidates &= candidates - 1;
            }
        }
        let (bucket, empty) = match free {
            // Both full: displace entries (or grow).
            [0, 0] => {
                self.insert(mixed, node);
                return None;
            }
            [0, empty] => (second, empty),
            [empty, _] => (first, empty),
        };
        self.buckets[bucket].put_at(empty, tag, node);
        self.len += 1;
        None
    }

    /// Adds `node` under the tag of `mixed`; the caller has checked that no node has that name.
    /// Afterwards [`Self::take_spilled`] may hand back an entry.
    pub(crate) fn insert(&mut self, mixed: u64, node: NodeId) {
        if (self.len + 1) * 8 > self.slots() * 7 {
            self.grow();
        }
        let mut entry = (tag_of(mixed), node);
        loop {
            match self.place(entry) {
                Ok(()) => {
                    self.len += 1;
                    return;
                }
                // The new entry is in; `left` (perhaps another) is out.
                Err(left) => entry = left,
            }
            if self.len * 2 < self.slots() {
                // Not crowded, so the tag is shared by too many entries: spill one.
                self.spilled.push(entry.1);
                return;
            }
            self.grow();
        }
    }

    /// Entries handed back since the last call (usually none).
    #[inline]
    pub(crate) fn take_spilled(&mut self) -> Option<NodeId> {
        self.spilled.pop()
    }

    /// Puts an entry in a free slot of one of its buckets, displacing entries to their other
    /// bucket if both are full; hands back the entry left over if that walk does not end soon.
    fn place(&mut self, (mut tag, mut node): (u32, NodeId)) -> Result<(), (u32, NodeId)> {
        let mask = self.mask();
        let (first, second) = buckets_of(tag, mask);
        if self.buckets[first].put(tag, node) || self.buckets[second].put(tag, node) {
            return Ok(());
        }
        let mut bucket = first;
        for _ in 0..MAX_KICKS {
            self.kick = self.kick.wrapping_add(1);
            let way = self.kick as usize % WAYS;
            let slots = &mut self.buckets[bucket];
            tag = mem::replace(&mut slots.tags[way], tag);
            node = mem::replace(&mut slots.nodes[way], node);
            let (a, b) = buckets_of(tag, mask);
            bucket = if a == bucket { b } else { a };
            if self.buckets[bucket].put(tag, node) {
                return Ok(());
            }
        }
        Err((tag, node))
    }

    /// Removes the entry with the name mixed to `mixed`, as `is_named` confirms; returns its node.
    #[inline(always)] // One caller, in the lane's hottest loop.
    pub(crate) fn remove(
        &mut self,
        mixed: u64,
        is_named: impl Fn(NodeId) -> bool,
    ) -> Option<NodeId> {
        let (bucket, way) = self.find(mixed, is_named)?;
        let slots = &mut self.buckets[bucket];
        slots.tags[way] = FREE;
        let node = slots.nodes[way];
        self.len -= 1;
        // Below 1/8 load (len < slots / 8).
        if self.len < self.buckets.len() && self.buckets.len() > 1 {
            self.resize(self.len * 2);
        }
        Some(node)
    }

    /// Every node, in no particular order.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        let slots = self.buckets.iter().flat_map(|b| b.tags.iter().zip(&b.nodes));
        slots.filter(|(tag, _)| **tag != FREE).map(|(_, &node)| node)
    }

    /// Every node, to rewrite in place (tags stay: names do not change).
    pub(crate) fn nodes_mut(&mut self) -> impl Iterator<Item = &mut NodeId> + '_ {
        let slots = self.buckets.iter_mut().flat_map(|b| b.tags.iter().zip(b.nodes.iter_mut()));
        slots.filter(|(tag, _)| **tag != FREE).map(|(_, node)| node)
    }

    /// Doubles the table (from none to one bucket). An entry in old bucket `b` belongs in new
    /// bucket `b` or `b + n` in the same role (first or second, see [`buckets_of`]: the new
    /// mask adds one bit to both), and only old bucket `b` fills those two: each old bucket
    /// splits in two with no displacement, its at most eight entries written in order into the
    /// two new buckets, with no search for a free slot.
    fn grow(&mut self) {
        let n = self.buckets.len();
        if n == 0 {
            self.buckets = vec![Bucket::EMPTY; 1].into();
            return;
        }
        assert!(n < 1 << 31, "a worker map past 2^31 buckets");
        let mut buckets = vec![Bucket::EMPTY; 2 * n];
        let (lower, upper) = buckets.split_at_mut(n);
        for (at, ((old, low), high)) in self.buckets.iter().zip(lower).zip(upper).enumerate() {
            let (mut lows, mut highs) = (0, 0);
            for (&tag, &node) in old.tags.iter().zip(&old.nodes) {
                if tag == FREE {
                    continue;
                }
                // The entry's bucket in its role (its first bucket, or that flipped) gains bit
                // `n`; set, the entry moves to the upper half. (`% WAYS` never wraps, as a
                // bucket holds at most `WAYS` entries; it spares a bounds check.)
                let first = (tag >> 1) as usize;
                let flip = if first & (n - 1) == at { 0 } else { flip_of(tag) };
                debug_assert_eq!((first ^ flip) & (n - 1), at, "an entry stays in its role");
                if (first ^ flip) & n == 0 {
                    (low.tags[lows % WAYS], low.nodes[lows % WAYS]) = (tag, node);
                    lows += 1;
                } else {
                    (high.tags[highs % WAYS], high.nodes[highs % WAYS]) = (tag, node);
                    highs += 1;
                }
            }
        }
        self.buckets = buckets.into();
    }

    /// [`Self::place`], spilling the entry left over if there is one; whether the table holds
    /// one more entry.
    fn place_or_spill(&mut self, entry: (u32, NodeId)) -> bool {
        match self.place(entry) {
            Ok(()) => true,
            Err((_, left)) => {
                self.spilled.push(left);
                false
            }
        }
    }

    /// Reallocates with room for at least `room` entries (a power of two of buckets).
    fn resize(&mut self, room: usize) {
        let buckets = room.div_ceil(WAYS).next_power_of_two();
        assert!(buckets <= 1 << 31, "a worker map past 2^31 buckets");
        let old = mem::replace(&mut self.buckets, vec![Bucket::EMPTY; buckets].into());
        self.len = 0;
        for slots in old.iter() {
            for (&tag, &node) in slots.tags.iter().zip(&slots.nodes) {
                if tag == FREE {
                    continue;
                }
                // The first bucket first: a smaller table's first bucket is the old one's
                // with its high bits dropped, so the writes sweep the new table in order.
                let placed = self.buckets[buckets_of(tag, buckets - 1).0].put(tag, node)
                    || self.place_or_spill((tag, node));
                self.len += usize::from(placed);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::mix::Mixer;

    /// Names from this one up are a crowd: their mixed values share a tag (see [`mixed`]).
    const CROWD: u64 = 1 << 62;

    /// A name as the owner mixes it; crowd names mix to values with one high half.
    fn mixed(name: u64) -> u64 {
        match name >= CROWD {
            true => (name - CROWD) | (0x1234_5678 << 32),
            false => Mixer::FIXED.mix(name),
        }
    }

    /// A map from names to nodes through a `TagMap`, the way its owner uses it: node `i` is
    /// named `names[i]`, spilled entries go to a side map.
    #[derive(Default)]
    struct Owner {
        map: TagMap,
        names: Vec<u64>,
        spilled: HashMap<u64, NodeId>,
    }

    impl Owner {
        fn get(&self, name: u64) -> Option<NodeId> {
            let names = &self.names;
            let found = self.map.get(mixed(name), |node| names[node as usize] == name);
            found.or_else(|| self.spilled.get(&name).copied())
        }

        /// Adds `name` (absent) as the next node, through `insert_or_get` on odd nodes.
        fn insert(&mut self, name: u64) -> NodeId {
            let node = self.names.len() as NodeId;
            self.names.push(name);
            if node % 2 == 1 {
                let names = &self.names;
                let found =
                    self.map.insert_or_get(mixed(name), node, |n| names[n as usize] == name);
                assert_eq!(found, None);
            } else {
                self.map.insert(mixed(name), node);
            }
            while let Some(left) = self.map.take_spilled() {
                self.spilled.insert(self.names[left as usize], left);
            }
            node
        }

        fn remove(&mut self, name: u64) -> Option<NodeId> {
            let names = &self.names;
            let found = self.map.remove(mixed(name), |node| names[node as usize] == name);
            while let Some(left) = self.map.take_spilled() {
                self.spilled.insert(self.names[left as usize], left);
            }
            found.or_else(|| self.spilled.remove(&name))
        }

        fn len(&self) -> usize {
            self.map.len() + self.spilled.len()
        }
    }

    proptest! {
        /// Agrees with `HashMap` through inserts and removals, with names that share low bits
        /// and names that share one tag.
        #[test]
        fn matches_a_hash_map(ops in prop::collection::vec((0u64..104, any::<bool>()), 1..400)) {
            // 40 names on one tag: more than its two buckets hold, so some spill (on inserts,
            // and on shrinks once the table is small).
            let crowd = names_tagged(40);
            let mut owner = Owner::default();
            let mut model: HashMap<u64, NodeId> = HashMap::new();
            for (name, insert) in ops {
                let name = if name < 64 { name * 1024 } else { crowd[(name - 64) as usize] };
                if insert {
                    match model.get(&name) {
                        None => {
                            model.insert(name, owner.insert(name));
                        }
                        Some(&node) => {
                            // As the owner does: the side map first, then the tag map.
                            let names = &owner.names;
                            let found = owner.spilled.get(&name).copied().or_else(|| {
                                owner.map.insert_or_get(mixed(name), u32::MAX, |n| names[n as usize] == name)
                            });
                            prop_assert_eq!(found, Some(node));
                        }
                    }
                } else {
                    prop_assert_eq!(owner.remove(name), model.remove(&name));
                }
                prop_assert_eq!(owner.len(), model.len());
                for (&name, &node) in &model {
                    prop_assert_eq!(owner.get(name), Some(node));
                }
                let mut listed: Vec<NodeId> = owner.map.nodes().chain(owner.spilled.values().copied()).collect();
                listed.sort_unstable();
                let mut expected: Vec<NodeId> = model.values().copied().collect();
                expected.sort_unstable();
                prop_assert_eq!(listed, expected);
            }
        }
    }

    /// Every entry is found after each doubling, and removals shrink the table back.
    #[test]
    fn growing_keeps_every_entry() {
        let names = 5_000u64;
        let mut owner = Owner::default();
        let mut buckets = 0;
        for name in 1..=names {
            owner.insert(name);
            if owner.map.buckets.len() != buckets {
                buckets = owner.map.buckets.len();
                assert!((1..=name).all(|n| owner.get(n) == Some(n as NodeId - 1)), "at {name}");
            }
        }
        assert!(buckets >= (names as usize / WAYS).next_power_of_two() / 2, "{buckets} buckets");
        for name in 1..=names {
            assert_eq!(owner.remove(name), Some(name as NodeId - 1));
        }
        assert_eq!((owner.len(), owner.map.buckets.len()), (0, 1));
    }

    #[test]
    fn churn_at_a_steady_size_does_not_grow_the_table() {
        let mut owner = Owner::default();
        for name in 1..=16_384u64 {
            owner.insert(name);
        }
        let settled = owner.map.bytes();
        for round in 0..8u64 {
            for name in 1..=16_384u64 {
                assert!(owner.remove(name + round * 16_384).is_some());
                owner.insert(name + (round + 1) * 16_384);
            }
        }
        assert_eq!(owner.len(), 16_384);
        assert!(owner.spilled.is_empty(), "distinct tags never spill");
        assert_eq!(owner.map.bytes(), settled);
        // Doubling at 7/8 load leaves at least 7/16: at most 8 × 16/7 bytes per entry.
        assert!(owner.map.bytes() * 7 <= 16_384 * 8 * 16, "{} bytes for 16,384", owner.map.bytes());
    }

    /// `count` names whose tags are all the same (see [`mixed`]).
    fn names_tagged(count: u64) -> Vec<u64> {
        let names: Vec<u64> = (0..count).map(|i| CROWD + i).collect();
        assert!(names.iter().all(|&name| tag_of(mixed(name)) == tag_of(mixed(names[0]))));
        names
    }

    #[test]
    fn names_sharing_a_tag_spill_instead_of_growing_the_table() {
        let names = names_tagged(40);
        let mut owner = Owner::default();
        for &name in &names {
            owner.insert(name);
        }
        assert_eq!(owner.len(), 40);
        assert_eq!(owner.map.len(), 2 * WAYS, "both buckets of the tag are full");
        assert!(owner.map.bytes() <= 64 * 64, "{} bytes", owner.map.bytes());
        for &name in &names {
            assert!(owner.get(name).is_some());
        }
    }

    /// The vector compare (the `unsafe` block; `cargo +nightly miri test --lib lanes_equal`)
    /// agrees with comparing slot by slot, for every pattern of equal slots.
    #[test]
    fn lanes_equal_marks_exactly_the_equal_slots() {
        for pattern in 0u32..256 {
            for tag in [FREE, 1, 0x8000_0001, u32::MAX] {
                let tags: [u32; WAYS] =
                    std::array::from_fn(
                        |way| if pattern >> way & 1 == 1 { tag } else { way as u32 * 2 },
                    );
                let expected =
                    (0..WAYS).filter(|&way| tags[way] == tag).map(|way| 1 << way).sum::<u32>();
                assert_eq!(lanes_equal(&tags, tag), expected, "tags {tags:?}, tag {tag:#x}");
            }
        }
    }

    /// Prefetching (the other `unsafe` block) changes nothing, in any table state
    /// (`cargo +nightly miri test --lib prefetch`).
    #[test]
    fn prefetch_changes_nothing() {
        let mut owner = Owner::default();
        owner.map.prefetch(mixed(7));
        for name in 1..=40u64 {
            owner.map.prefetch(mixed(name));
            owner.insert(name);
        }
        for name in 1..=40u64 {
            owner.map.prefetch(mixed(name + 100));
            assert_eq!(owner.get(name), Some(name as NodeId - 1));
        }
        assert_eq!(owner.len(), 40);
    }

    #[test]
    fn a_bucket_is_one_cache_line() {
        assert_eq!(mem::size_of::<Bucket>(), 64);
    }
}
