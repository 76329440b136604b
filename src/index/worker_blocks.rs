//! [`WorkerBlocks`]: one worker's blocks, owned by the lane that applies its events.
//!
//! Engines name blocks by their own hashes; this maps each to the block's place in our tree
//! (its parent node and content hash, from which our node hash follows). It also keeps the
//! lineage a dump needs when a block is removed while the worker still holds its descendants
//! (engines do that): such a block becomes a *ghost* until its last descendant goes.

use crate::event::{LocalBlockHash, SequenceHash, StoredBlock};
use crate::hash::next_sequence_hash;
use crate::index::probe_map::ProbeMap;
use crate::u64_map::U64Map;

/// Stands for "no parent" (a root block); a real node hash equal to it is a 2^-64 event.
const ROOT: u64 = 0x6b76_726f_7574_6521;

/// Where a block sits: its parent node (our hash, or [`ROOT`]) and its content hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    blocks: ProbeMap<Placement>,
    /// Node → number of its children held or ghosted (only non-zero counts are kept).
    children: ProbeMap<u32>,
    /// Node → placement of removed blocks that still have descendants here.
    ghosts: ProbeMap<Placement>,
}

impl WorkerBlocks {
    pub(crate) fn new(slot: u32) -> Self {
        Self { slot, ..Self::default() }
    }

    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }

    pub(crate) fn get(&self, hash: SequenceHash) -> Option<Placement> {
        self.blocks.get(hash.0)
    }

    /// Records a newly held block. Returns `None`, changing nothing, if `hash` is held already;
    /// otherwise whether the block revives a ghost (for [`Self::undo_insert`]).
    pub(crate) fn insert(
        &mut self,
        hash: SequenceHash,
        placement: Placement,
        node: SequenceHash,
    ) -> Option<bool> {
        if !self.blocks.insert_new(hash.0, placement) {
            return None;
        }
        // A re-stored ghost is already counted as its parent's child.
        let revived = self.ghosts.remove(node.0).is_some();
        if !revived && let Some(parent) = placement.parent() {
            *self.children.get_or_insert(parent.0, 0) += 1;
        }
        Some(revived)
    }

    /// Undoes an [`Self::insert`] of `hash` that returned `Some(revived)`.
    pub(crate) fn undo_insert(&mut self, hash: SequenceHash, revived: bool) {
        let placement = self.blocks.remove(hash.0).expect("undo of an insert");
        if revived {
            self.ghosts.insert_new(placement.node().0, placement);
        } else if let Some(parent) = placement.parent() {
            self.release_child(parent.0);
        }
    }

    /// Forgets `hash`; returns its node, or `None` if the worker does not hold it.
    pub(crate) fn remove(&mut self, hash: SequenceHash) -> Option<SequenceHash> {
        let placement = self.blocks.remove(hash.0)?;
        let node = placement.node();
        if self.children.contains_key(node.0) {
            self.ghosts.insert_new(node.0, placement);
        } else if let Some(parent) = placement.parent() {
            self.release_child(parent.0);
        }
        Some(node)
    }

    /// One child of `parent` is gone; a ghost left with no children goes too, recursively.
    fn release_child(&mut self, mut parent: u64) {
        loop {
            let count = self.children.get_mut(parent).expect("parent counts its children");
            *count -= 1;
            if *count > 0 {
                return;
            }
            self.children.remove(parent);
            let Some(ghost) = self.ghosts.remove(parent) else { return };
            match ghost.parent() {
                Some(grandparent) => parent = grandparent.0,
                None => return,
            }
        }
    }

    /// Every held block: engine hash, placement.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SequenceHash, Placement)> + '_ {
        self.blocks.iter().map(|(hash, placement)| (SequenceHash(hash), placement))
    }

    /// Drops every block and ghost; returns the nodes that were held.
    pub(crate) fn drain_nodes(&mut self) -> Vec<SequenceHash> {
        let nodes = self.blocks.iter().map(|(_, placement)| placement.node()).collect();
        *self = Self::new(self.slot);
        nodes
    }

    /// Heap bytes of the three maps.
    pub(crate) fn bytes(&self) -> usize {
        self.blocks.bytes() + self.children.bytes() + self.ghosts.bytes()
    }

    /// The `Stored` blocks that rebuild this worker's blocks: `(parent engine hash, blocks)` in
    /// an order where every parent comes before its children. Ancestors the worker no longer
    /// holds come back as placeholder blocks whose engine hashes are listed in the third field,
    /// to be removed right after.
    pub(crate) fn dump(&self) -> Vec<(Option<SequenceHash>, Vec<StoredBlock>, Vec<SequenceHash>)> {
        let name: U64Map<u64> = self.blocks.iter().map(|(h, p)| (p.node().0, h)).collect();
        // Depth-first from each block up to an ancestor that is dumped already.
        let mut done: U64Map<()> = U64Map::default();
        let mut out = Vec::new();
        let mut next_placeholder = 0u64;
        let mut sorted: Vec<(u64, Placement)> = self.blocks.iter().collect();
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
                    Some(&held) => (SequenceHash(held), self.blocks.get(held).expect("named")),
                    None => {
                        let ghost = self.ghosts.get(node.0).expect("lineage of a held block");
                        while self.blocks.contains_key(next_placeholder) {
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
