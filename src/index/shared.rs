//! [`SharedIndex`]: the part of the concurrent index that readers and every lane share.
//!
//! A node is a block *with its prefix*, addressed by our sequence hash, so a query computes the
//! hash chain of its blocks and looks each one up independently: no per-level lock, no pointer
//! chasing. Membership of (node, worker) is one bit in a 64-bit word (see [`WorkerSlots`]); for
//! fleets beyond 64 slots, word `w ≥ 1` of node `x` lives under a derived key, and a summary word
//! under another records which of those words are non-empty, so a query only looks at the words
//! of workers that match.

use crate::event::{LocalBlockHash, SequenceHash};
use crate::hash::next_sequence_hash;
use crate::index::OverlapScores;
use crate::index::slots::WorkerSlots;
use crate::index::table::{BitOp, NodeTable};
use crate::sync::epoch;

/// Word number of the summary entry (the words themselves are 0..64).
const SUMMARY: u32 = 64;

/// The table key of membership word `word` (or the summary) of node `node`.
#[inline]
fn word_key(node: u64, word: u32) -> u64 {
    if word == 0 { node } else { node ^ u64::from(word).wrapping_mul(0x9E37_79B9_7F4A_7C15) }
}

#[inline]
fn split(slot: u32) -> (u32, u64) {
    (slot / 64, 1u64 << (slot % 64))
}

/// See the [module docs](self).
pub struct SharedIndex {
    /// Membership words by node (and word) key.
    pub table: NodeTable,
    /// Which worker owns which membership bit.
    pub slots: WorkerSlots,
}

impl SharedIndex {
    /// An empty index for up to `max_workers` (at most 4,096) workers.
    pub fn new(max_workers: usize) -> Self {
        Self { table: NodeTable::new(), slots: WorkerSlots::new(max_workers.clamp(1, 64 * 64)) }
    }

    /// Whether `slot` holds `node`: exact for the lane that owns the slot (no one else writes it).
    pub(crate) fn holds(&self, node: SequenceHash, slot: u32, guard: &epoch::Guard) -> bool {
        let (word, bit) = split(slot);
        self.table.get(word_key(node.0, word), guard) & bit != 0
    }

    /// Marks every node of `nodes` held (`set`) or no longer held by `slot`, in one batch per
    /// shard for slots of the first word. `scratch` is a reusable buffer.
    pub(crate) fn change_holders(
        &self,
        slot: u32,
        nodes: impl Iterator<Item = SequenceHash>,
        set: bool,
        scratch: &mut Vec<BitOp>,
    ) {
        let (word, bit) = split(slot);
        if word > 0 {
            // Beyond 64 workers the summary protocol orders each change; go one by one.
            for node in nodes {
                if set {
                    self.add_holder(node, slot);
                } else {
                    self.remove_holder(node, slot);
                }
            }
            return;
        }
        scratch.clear();
        scratch.extend(nodes.map(|node| BitOp { key: node.0, bits: bit, set }));
        self.table.apply(scratch);
    }

    /// Marks `node` held by `slot`. Returns whether it already was.
    pub fn add_holder(&self, node: SequenceHash, slot: u32) -> bool {
        let (word, bit) = split(slot);
        let old = self.table.set_bits(word_key(node.0, word), bit);
        if word > 0 && old == 0 {
            self.table.set_bits(word_key(node.0, SUMMARY), 1 << word);
        }
        old & bit != 0
    }

    /// Marks `node` no longer held by `slot`.
    pub fn remove_holder(&self, node: SequenceHash, slot: u32) {
        let (word, bit) = split(slot);
        let old = self.table.clear_bits(word_key(node.0, word), bit);
        if word > 0 && old == bit {
            // The word emptied. Another lane may be refilling it right now; it sets the summary
            // bit *after* its word bit, so clearing first and re-checking the word keeps the
            // summary bit whenever the word is non-empty.
            let summary = word_key(node.0, SUMMARY);
            self.table.clear_bits(summary, 1 << word);
            if self.table.get(word_key(node.0, word), &epoch::pin()) != 0 {
                self.table.set_bits(summary, 1 << word);
            }
        }
    }

    /// Per worker, the number of leading blocks of `query` it holds. With `early_exit`, stops
    /// as soon as a single worker still matches.
    pub fn find_matches(&self, query: &[LocalBlockHash], early_exit: bool) -> OverlapScores {
        let guard = epoch::pin();
        let mut parent = None;
        let mut nodes = query.iter().map(|&local| {
            let node = next_sequence_hash(parent, local);
            parent = Some(node);
            node.0
        });
        let Some(first) = nodes.next() else { return OverlapScores::new() };

        // Active words: (word number, bits of workers still matching).
        let mut active: Vec<(u32, u64)> = Vec::new();
        let word0 = self.table.get(first, &guard);
        if word0 != 0 {
            active.push((0, word0));
        }
        if self.slots.multiword() {
            let mut summary = self.table.get(word_key(first, SUMMARY), &guard);
            while summary != 0 {
                let word = summary.trailing_zeros();
                summary &= summary - 1;
                let bits = self.table.get(word_key(first, word), &guard);
                if bits != 0 {
                    active.push((word, bits));
                }
            }
        }
        let matching = active.iter().map(|&(_, bits)| bits.count_ones() as usize).sum();
        let mut scores = Vec::with_capacity(matching);
        let push_all = |word: u32, mut bits: u64, depth: u32, scores: &mut Vec<_>| {
            while bits != 0 {
                let slot = word * 64 + bits.trailing_zeros();
                bits &= bits - 1;
                scores.push((self.slots.owner(slot), depth));
            }
        };
        let single = |active: &[(u32, u64)]| match active {
            [(_, bits)] => bits & (bits - 1) == 0,
            _ => false,
        };
        let mut depth = 1u32;
        if !(early_exit && single(&active)) {
            for node in nodes {
                if active.is_empty() {
                    break;
                }
                for (word, bits) in active.iter_mut() {
                    let kept = *bits & self.table.get(word_key(node, *word), &guard);
                    push_all(*word, *bits & !kept, depth, &mut scores);
                    *bits = kept;
                }
                active.retain(|&(_, bits)| bits != 0);
                if active.is_empty() {
                    break;
                }
                depth += 1;
                if early_exit && single(&active) {
                    break;
                }
            }
        }
        for (word, bits) in active {
            push_all(word, bits, depth, &mut scores);
        }
        OverlapScores::from_pairs(scores)
    }
}
