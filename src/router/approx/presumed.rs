//! [`PresumedCache`]: the blocks approximate mode presumes one worker holds, and which of them
//! to forget first.

use std::collections::{BTreeSet, HashMap};

use crate::event::SequenceHash;

/// One worker's presumed cache: its blocks as a forest (each knows its parent and how many
/// children it has), and its leaves ordered by when a request last went through them.
///
/// A route touches only its deepest block (and inserts the blocks below the deepest one held):
/// a binary search for the deepest held block, then one insert per new block, not a touch of
/// every block of the prompt. The blocks above it are
/// not stamped; a block's stamp is the latest of its own and those of the children it lost,
/// so a block that becomes a leaf carries the last time any request went through it. The
/// leaf with the oldest stamp is then exactly the block an LRU list touched on every block of
/// every route would evict first, and removing leaves only keeps the presumed blocks (and so
/// the index) closed under prefixes.
#[derive(Debug)]
pub(super) struct PresumedCache {
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
    pub(super) fn empty() -> Self {
        let slots = HashMap::default();
        Self { slots, nodes: Vec::new(), free: Vec::new(), leaves: BTreeSet::new(), routes: 0 }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Records a route through `sequence` at `tick`; the blocks not presumed cached before,
    /// from this index of `sequence` on (the rest were, and they are a prefix).
    pub(super) fn route(&mut self, sequence: &[SequenceHash], tick: u64) -> usize {
        if sequence.is_empty() {
            return 0;
        }
        self.routes += 1;
        let stamp = (tick, self.routes);
        // The presumed blocks are closed under prefixes and a sequence hash names its whole
        // prefix, so the held blocks of a prompt are a prefix of it: a binary search finds its end.
        let new_from = sequence.partition_point(|hash| self.slots.contains_key(hash));
        let mut parent = match new_from {
            0 => NONE,
            at => self.slots[&sequence[at - 1]],
        };
        if new_from == sequence.len() {
            // Nothing new: the deepest block gets the stamp (a route that read the clock
            // before another but was recorded after it leaves the later stamp).
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
    pub(super) fn evict_while(
        &mut self,
        mut take: impl FnMut(u64, usize) -> bool,
    ) -> Vec<SequenceHash> {
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
