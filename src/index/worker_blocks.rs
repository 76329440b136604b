//! [`WorkerBlocks`]: one worker's blocks, owned by the lane that applies its events.
//!
//! Engines name blocks by their own hashes; this maps each to the block's place in our tree
//! (its parent node and content hash, from which our node hash follows). It also keeps the
//! lineage a dump needs when a block is removed while the worker still holds its descendants
//! (engines do that): such a block becomes a *ghost* until its last descendant goes.

use std::collections::hash_map::Entry;

use crate::event::{LocalBlockHash, SequenceHash, StoredBlock};
use crate::hash::next_sequence_hash;
use crate::u64_map::U64Map;

/// Stands for "no parent" (a root block); a real node hash equal to it is a 2^-64 event.
const ROOT: u64 = 0x6b76_726f_7574_6521;

/// Where a block sits: its parent node (our hash, or [`ROOT`]) and its content hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    parent: u64,
    local: u64,
}

impl Placement {
    pub(crate) fn new(parent: Option<SequenceHash>, local: LocalBlockHash) -> Self {
        Self { parent: parent.map_or(ROOT, |p| p.0), local: local.0 }
    }

    pub(crate) fn parent(self) -> Option<SequenceHash> {
        (self.parent != ROOT).then_some(SequenceHash(self.parent))
    }

    pub(crate) fn local(self) -> LocalBlockHash {
        LocalBlockHash(self.local)
    }

    /// Our node hash of the block.
    #[inline]
    pub(crate) fn node(self) -> SequenceHash {
        next_sequence_hash(self.parent(), self.local())
    }
}

/// See the [module docs](self).
#[derive(Default)]
pub(crate) struct WorkerBlocks {
    /// The worker's membership slot.
    pub(crate) slot: u32,
    /// Engine hash → placement of every block held.
    blocks: U64Map<Placement>,
    /// Node → number of its children held or ghosted (only non-zero counts are kept).
    children: U64Map<u32>,
    /// Node → placement of removed blocks that still have descendants here.
    ghosts: U64Map<Placement>,
}

impl WorkerBlocks {
    pub(crate) fn new(slot: u32) -> Self {
        Self { slot, ..Self::default() }
    }

    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }

    pub(crate) fn get(&self, hash: SequenceHash) -> Option<Placement> {
        self.blocks.get(&hash.0).copied()
    }

    /// Records a newly held block. Returns `None`, changing nothing, if `hash` is held already;
    /// otherwise whether the block revives a ghost (for [`Self::undo_insert`]).
    pub(crate) fn insert(
        &mut self,
        hash: SequenceHash,
        placement: Placement,
        node: SequenceHash,
    ) -> Option<bool> {
        match self.blocks.entry(hash.0) {
            Entry::Occupied(_) => return None,
            Entry::Vacant(vacant) => vacant.insert(placement),
        };
        // A re-stored ghost is already counted as its parent's child.
        let revived = self.ghosts.remove(&node.0).is_some();
        if !revived && let Some(parent) = placement.parent() {
            *self.children.entry(parent.0).or_insert(0) += 1;
        }
        Some(revived)
    }

    /// Undoes an [`Self::insert`] of `hash` that returned `Some(revived)`.
    pub(crate) fn undo_insert(&mut self, hash: SequenceHash, revived: bool) {
        let placement = self.blocks.remove(&hash.0).expect("undo of an insert");
        if revived {
            self.ghosts.insert(placement.node().0, placement);
        } else if let Some(parent) = placement.parent() {
            self.release_child(parent.0);
        }
    }

    /// Forgets `hash`; returns its node, or `None` if the worker does not hold it.
    pub(crate) fn remove(&mut self, hash: SequenceHash) -> Option<SequenceHash> {
        let placement = self.blocks.remove(&hash.0)?;
        let node = placement.node();
        if self.children.contains_key(&node.0) {
            self.ghosts.insert(node.0, placement);
        } else if let Some(parent) = placement.parent() {
            self.release_child(parent.0);
        }
        Some(node)
    }

    /// Gives memory back once a map is mostly empty (hash maps never shrink on their own), so
    /// memory follows the live blocks whatever the history. Amortized O(1) per removal.
    pub(crate) fn shrink_if_sparse(&mut self) {
        fn shrink<V>(map: &mut U64Map<V>) {
            if map.capacity() > 64 && map.len() * 4 < map.capacity() {
                map.shrink_to(map.len() * 2);
            }
        }
        shrink(&mut self.blocks);
        shrink(&mut self.children);
        shrink(&mut self.ghosts);
    }

    /// One child of `parent` is gone; a ghost left with no children goes too, recursively.
    fn release_child(&mut self, mut parent: u64) {
        loop {
            let count = self.children.get_mut(&parent).expect("parent counts its children");
            *count -= 1;
            if *count > 0 {
                return;
            }
            self.children.remove(&parent);
            let Some(ghost) = self.ghosts.remove(&parent) else { return };
            match ghost.parent() {
                Some(grandparent) => parent = grandparent.0,
                None => return,
            }
        }
    }

    /// Every held block: engine hash, placement.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SequenceHash, Placement)> + '_ {
        self.blocks.iter().map(|(&hash, &placement)| (SequenceHash(hash), placement))
    }

    /// Drops every block and ghost; returns the nodes that were held.
    pub(crate) fn drain_nodes(&mut self) -> Vec<SequenceHash> {
        self.children = U64Map::default();
        self.ghosts = U64Map::default();
        std::mem::take(&mut self.blocks).into_values().map(Placement::node).collect()
    }

    /// Approximate heap bytes (hash map buckets plus control bytes).
    pub(crate) fn bytes(&self) -> usize {
        let bucket = |size: usize, capacity: usize| capacity * (size + 1) * 8 / 7;
        bucket(16 + 8, self.blocks.capacity())
            + bucket(8 + 4, self.children.capacity())
            + bucket(16 + 8, self.ghosts.capacity())
    }

    /// The `Stored` blocks that rebuild this worker's blocks: `(parent engine hash, blocks)` in
    /// an order where every parent comes before its children. Ancestors the worker no longer
    /// holds come back as placeholder blocks whose engine hashes are listed in the third field,
    /// to be removed right after.
    pub(crate) fn dump(&self) -> Vec<(Option<SequenceHash>, Vec<StoredBlock>, Vec<SequenceHash>)> {
        let name: U64Map<u64> = self.blocks.iter().map(|(&h, p)| (p.node().0, h)).collect();
        // Depth-first from each block up to an ancestor that is dumped already.
        let mut done: U64Map<()> = U64Map::default();
        let mut out = Vec::new();
        let mut next_placeholder = 0u64;
        let mut sorted: Vec<(u64, Placement)> = self.blocks.iter().map(|(&h, &p)| (h, p)).collect();
        sorted.sort_unstable_by_key(|&(hash, _)| hash);
        for (hash, placement) in sorted {
            if done.contains_key(&placement.node().0) {
                continue;
            }
            let mut chain = vec![(SequenceHash(hash), placement)];
            let mut parent = placement.parent();
            // Walk up through held (not yet dumped) blocks and ghosts.
            let anchor = loop {
                let Some(node) = parent else { break None };
                if done.contains_key(&node.0) {
                    break Some(SequenceHash(name[&node.0]));
                }
                let step = match name.get(&node.0) {
                    Some(&held) => (SequenceHash(held), self.blocks[&held]),
                    None => {
                        let ghost = self.ghosts[&node.0];
                        while self.blocks.contains_key(&next_placeholder) {
                            next_placeholder += 1;
                        }
                        next_placeholder += 1;
                        (SequenceHash(next_placeholder - 1), ghost)
                    }
                };
                parent = step.1.parent();
                chain.push(step);
            };
            chain.reverse();
            let mut placeholders = Vec::new();
            let blocks = chain
                .iter()
                .map(|&(hash, placement)| {
                    let node = placement.node().0;
                    if name.get(&node) == Some(&hash.0) {
                        done.insert(node, ());
                    } else {
                        placeholders.push(hash);
                    }
                    StoredBlock { local: placement.local(), hash }
                })
                .collect();
            out.push((anchor, blocks, placeholders));
        }
        out
    }
}
