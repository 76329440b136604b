//! [`ChildTable`]: every parent → child link of one [`super::trie::BlockTrie`], in one flat
//! open-addressing table keyed by (parent, first block of the child's edge).
//!
//! One table per trie instead of one map per node: where a candidate's next child sits is a
//! function of the parent and the candidate's block alone, so a query finds it in one cache
//! line (a slot holds the whole key and the child) and can start loading that line as soon as
//! it knows the parent, before it has read the parent itself. A link also says where the
//! child's edge lies ([`EdgeHint`]), so the walk loads the child and its edge at once instead of
//! one after the other. Linear probing, power-of-two capacity, at most three quarters full,
//! deletion by backward shift (no tombstones).

use crate::event::SequenceHash;
use crate::prefetch::prefetch_line;

/// A node's position in the trie's arena; the root's is 0 (see [`super::trie::ROOT`]).
pub(crate) type NodeId = u32;

/// Where a child's edge lies: its address and length when it was linked. Only ever prefetched,
/// never read through, so a stale hint would cost a wasted load and nothing else; the trie
/// relinks a node whenever its edge changes, and its consistency check compares every hint with
/// the edge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EdgeHint {
    address: usize,
    len: usize,
}

impl EdgeHint {
    /// The hint for `edge`.
    pub(crate) fn of(edge: &[SequenceHash]) -> Self {
        Self { address: edge.as_ptr() as usize, len: edge.len() }
    }

    /// The edge's length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Starts loading the edge's first `len` hashes (at most).
    pub(crate) fn prefetch(&self, len: usize) {
        let bytes = self.len.min(len) * std::mem::size_of::<SequenceHash>();
        crate::prefetch::prefetch_span(self.address, bytes);
    }
}

/// One link (32 bytes, two to a line); `child == 0` (the root, never a child) marks a free slot.
#[derive(Clone, Copy, Debug, Default)]
struct Link {
    first: SequenceHash,
    parent: NodeId,
    child: NodeId,
    edge: EdgeHint,
}

impl Link {
    fn is_free(&self) -> bool {
        self.child == 0
    }

    fn is(&self, parent: NodeId, first: SequenceHash) -> bool {
        self.first == first && self.parent == parent
    }
}

/// The smallest table allocated.
const MIN_CAPACITY: usize = 8;

/// Links from a parent node, by the first block of the child's edge, to the child.
#[derive(Debug, Default)]
pub(crate) struct ChildTable {
    slots: Vec<Link>,
    len: usize,
}

/// A well-mixed hash of a key: keys from callers need not be uniform (tests use small
/// integers), and the parent must move the slot too.
fn mix(parent: NodeId, first: SequenceHash) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let key = first.0 ^ u64::from(parent).rotate_left(32);
    let mixed = key.wrapping_mul(K);
    (mixed ^ (mixed >> 32)).wrapping_mul(K)
}

impl ChildTable {
    /// The home slot of a key (the table must not be empty).
    fn home(&self, parent: NodeId, first: SequenceHash) -> usize {
        // The high bits mix best; the capacity is a power of two.
        let bits = self.slots.len().trailing_zeros();
        (mix(parent, first) >> (64 - bits)) as usize
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding the key, if any.
    fn find(&self, parent: NodeId, first: SequenceHash) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut at = self.home(parent, first);
        loop {
            let link = &self.slots[at];
            if link.is_free() {
                return None;
            }
            if link.is(parent, first) {
                return Some(at);
            }
            at = (at + 1) & self.mask();
        }
    }

    /// The child of `parent` whose edge starts with `first`.
    #[inline]
    pub(crate) fn get(&self, parent: NodeId, first: SequenceHash) -> Option<NodeId> {
        self.find(parent, first).map(|at| self.slots[at].child)
    }

    /// [`Self::get`], with where the child's edge lies.
    #[inline]
    pub(crate) fn get_with_edge(
        &self,
        parent: NodeId,
        first: SequenceHash,
    ) -> Option<(NodeId, EdgeHint)> {
        self.find(parent, first).map(|at| (self.slots[at].child, self.slots[at].edge))
    }

    /// Starts loading the line where [`Self::get`] of the key looks first.
    #[inline]
    pub(crate) fn prefetch(&self, parent: NodeId, first: SequenceHash) {
        if !self.slots.is_empty() {
            prefetch_line(&self.slots[self.home(parent, first)]);
        }
    }

    /// Links `child`, whose edge is at `edge`, under `parent` by `first`, replacing any child
    /// linked by the same key; returns the replaced child.
    pub(crate) fn insert(
        &mut self,
        parent: NodeId,
        first: SequenceHash,
        child: NodeId,
        edge: EdgeHint,
    ) -> Option<NodeId> {
        debug_assert_ne!(child, 0, "the root is never a child");
        if let Some(at) = self.find(parent, first) {
            let link = &mut self.slots[at];
            link.edge = edge;
            return Some(std::mem::replace(&mut link.child, child));
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        self.place(Link { first, parent, child, edge });
        self.len += 1;
        None
    }

    /// Puts a link whose key is absent into its first free slot.
    fn place(&mut self, link: Link) {
        let mut at = self.home(link.parent, link.first);
        while !self.slots[at].is_free() {
            at = (at + 1) & self.mask();
        }
        self.slots[at] = link;
    }

    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(MIN_CAPACITY);
        let old = std::mem::replace(&mut self.slots, vec![Link::default(); capacity]);
        for link in old.into_iter().filter(|link| !link.is_free()) {
            self.place(link);
        }
    }

    /// Unlinks the child of `parent` whose edge starts with `first`; returns it.
    pub(crate) fn remove(&mut self, parent: NodeId, first: SequenceHash) -> Option<NodeId> {
        let mut hole = self.find(parent, first)?;
        let removed = self.slots[hole].child;
        self.slots[hole] = Link::default();
        self.len -= 1;
        // Backward shift: move later links of the run into the hole when their home allows.
        let mut at = hole;
        loop {
            at = (at + 1) & self.mask();
            let link = self.slots[at];
            if link.is_free() {
                break;
            }
            let home = self.home(link.parent, link.first);
            // The link may move to `hole` iff its home is not cyclically in (hole, at].
            let distance_to_home = at.wrapping_sub(home) & self.mask();
            let distance_to_hole = at.wrapping_sub(hole) & self.mask();
            if distance_to_home >= distance_to_hole {
                self.slots[hole] = link;
                self.slots[at] = Link::default();
                hole = at;
            }
        }
        Some(removed)
    }

    /// How many links.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every `(parent, first, child, edge)` (for tests and consistency checks).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn iter(
        &self,
    ) -> impl Iterator<Item = (NodeId, SequenceHash, NodeId, EdgeHint)> + '_ {
        self.slots.iter().filter(|l| !l.is_free()).map(|l| (l.parent, l.first, l.child, l.edge))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn behaves_like_a_map_through_growth_and_backward_shifts() {
        let mut table = ChildTable::default();
        let mut model: HashMap<(NodeId, u64), NodeId> = HashMap::new();
        let mut state = 7u64;
        for step in 0..20_000u32 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Few distinct keys, so inserts, replacements and removals all happen often.
            let (parent, first) = ((state >> 40) as NodeId % 7, (state >> 20) % 97);
            let key = SequenceHash(first);
            if state >> 63 == 0 {
                let child = step + 1;
                let edge = EdgeHint { address: step as usize, len: 1 };
                let replaced = table.insert(parent, key, child, edge);
                assert_eq!(replaced, model.insert((parent, first), child));
                assert_eq!(table.get_with_edge(parent, key), Some((child, edge)));
            } else {
                assert_eq!(table.remove(parent, key), model.remove(&(parent, first)));
            }
            assert_eq!(table.len(), model.len());
            if step % 1_000 == 0 {
                for (&(p, f), &c) in &model {
                    assert_eq!(table.get(p, SequenceHash(f)), Some(c));
                }
                assert_eq!(table.iter().count(), model.len());
            }
        }
        assert_eq!(table.get(3, SequenceHash(1_000)), None);
    }
}
