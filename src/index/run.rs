//! [`Run`]: a chain of tree nodes that the same workers hold and that only branches at its end,
//! the unit a lane's tree is made of, and the lock-free walk queries take over one lane's runs.
//!
//! A [`Run`] is one immutable version: its identity and its [`RunState`] (content hashes,
//! the sequence hash of its last block, its holders) in one allocation, so a lookup reaches
//! everything a walk compares in one step from the table's slot. The lane replaces a run's
//! version whole in its slot, so a reader always sees a consistent run.
//! Runs are found by key (our sequence hash of their first block) in the lane's [`RunTable`];
//! the key of the run after a matched run follows from its last sequence hash and the query's
//! next content hash, so a query hashes once per run, not once per block.
//!
//! A key only says where to look: anyone can make two runs' keys equal (a root's key is its
//! content hash, which a sender picks freely, e.g. equal to another block's sequence hash).
//! What identifies a run is where it hangs (the [`RunState::tail_id`] of its parent's last
//! node, [`ROOT_TAIL`] for a root) and its first content hash, both fixed for the run's life,
//! and every lookup checks them. Tail ids are drawn by the lane and never reused, so colliding
//! keys cost a longer probe, never a wrong run.

use crate::event::{LocalBlockHash, SequenceHash, Worker};
use crate::hash::next_sequence_hash;
use crate::index::holder_sets::{HolderView, Holders};
use crate::index::locals::Locals;
use crate::index::run_table::RunTable;
use crate::index::worker_slots::{SLOTS, WorkerSlots};
use crate::prefetch::prefetch_slice;
use crate::sync::AtomicU32;
use crate::sync::epoch::Guard;

/// Identifies a run to its lane (an index into the lane's arena).
pub(crate) type RunId = u32;

/// One version of a run; see the [module docs](self).
pub(crate) struct Run {
    /// The lane's id for this run, so a lookup by key leads the writer to its bookkeeping
    /// (only the writer uses it, on the current version; atomic so it can renumber runs while
    /// readers hold them).
    pub(crate) id: AtomicU32,
    /// The tail id of the node this run hangs from ([`ROOT_TAIL`] for a root).
    pub(crate) parent_tail: u64,
    pub(crate) state: RunState,
}

/// The tail id roots hang from; lanes draw real ones from 1 up.
pub(crate) const ROOT_TAIL: u64 = 0;

impl Run {
    /// Whether this is the child with content `local` of the node tailed `parent_tail`.
    #[inline]
    pub(crate) fn is_child(&self, parent_tail: u64, local: u64) -> bool {
        self.parent_tail == parent_tail && self.first() == local
    }

    /// The content hash of the run's first block.
    #[inline]
    pub(crate) fn first(&self) -> u64 {
        self.state.locals[0]
    }
}

/// What changes between a run's versions.
pub(crate) struct RunState {
    /// The content hash of each block: inline in a short run, else shared between versions.
    pub(crate) locals: Locals,
    /// Our sequence hash of the last block.
    pub(crate) tail_seq: u64,
    /// Identifies the last block as the parent of child runs (see the [module docs](self)):
    /// a split's tail keeps it (the children stay below that block), and a block that becomes
    /// a run's last gets a fresh one.
    pub(crate) tail_id: u64,
    /// The workers holding every block of the run: bits of the lane's slots, or a sorted list
    /// (see [`Holders`]); a list is shared like `locals` between versions that differ in
    /// content only (a split's two halves, a shortened run).
    pub(crate) members: Holders,
}

/// How many leading entries of `query` equal `locals`.
fn common_prefix(locals: &[u64], query: &[LocalBlockHash]) -> usize {
    const CHUNK: usize = 8;
    let len = locals.len().min(query.len());
    let (locals, query) = (&locals[..len], &query[..len]);
    // Whole chunks first, compared without a branch per block (vectorized); then the rest.
    let mut at = 0;
    for (l, q) in locals.chunks_exact(CHUNK).zip(query.chunks_exact(CHUNK)) {
        let equal = l.iter().zip(q).fold(true, |equal, (l, q)| equal & (*l == q.0));
        if !equal {
            break;
        }
        at += CHUNK;
    }
    at + locals[at..].iter().zip(&query[at..]).take_while(|(l, q)| **l == q.0).count()
}

/// Keeps the workers of `active` (sorted) that `members` (sorted) holds at its end, still
/// sorted, and moves the others before them with depth `depth`. Returns where the kept ones
/// start.
///
/// A merge of the two sorted lists when they are of similar size (a run held by much of the
/// fleet costs one pass, not a binary search per worker), a binary search per worker when few
/// are left.
fn keep_holders(active: &mut [(Worker, u32)], members: &[Worker], depth: u32) -> usize {
    let mut kept = active.len();
    // From the back, so kept workers land at the end in their order.
    if active.len() * 4 < members.len() {
        for i in (0..active.len()).rev() {
            if members.binary_search(&active[i].0).is_ok() {
                kept -= 1;
                active.swap(i, kept);
            } else {
                active[i].1 = depth;
            }
        }
    } else {
        let mut m = members.len();
        for i in (0..active.len()).rev() {
            let worker = active[i].0;
            while m > 0 && members[m - 1] > worker {
                m -= 1;
            }
            if m > 0 && members[m - 1] == worker {
                m -= 1;
                kept -= 1;
                active.swap(i, kept);
            } else {
                active[i].1 = depth;
            }
        }
    }
    kept
}

/// [`keep_holders`] against a set of bits: the workers the lane's slots `bits` name.
fn keep_named(active: &mut [(Worker, u32)], bits: u64, names: &WorkerSlots, depth: u32) -> usize {
    let mut named = [Worker::default(); SLOTS];
    let mut len = 0;
    for slot in BitIter(bits) {
        named[len] = names.worker(slot);
        len += 1;
    }
    named[..len].sort_unstable();
    keep_holders(active, &named[..len], depth)
}

/// Starts loading the slot where [`walk`] looks up `query`'s first run in `table`: called for
/// every lane before walking any, so the lanes' first cache misses overlap.
#[inline]
pub(crate) fn prefetch_root(table: &RunTable, query: &[LocalBlockHash], guard: &Guard) {
    if let Some(&first) = query.first() {
        table.prefetch(next_sequence_hash(None, first).0, guard);
    }
}

/// A lane's workers that hold every block a walk has matched so far.
#[derive(Clone, Copy)]
enum Matching {
    /// No run visited yet.
    Unknown,
    /// As bits of the lane's slots: every run so far had bits.
    Bits(u64),
    /// `out[start..]`, sorted.
    Listed(usize),
}

/// Walks one lane's runs along `query` and appends, per worker of the lane that matches, how
/// many leading blocks it holds (the reference tree's rule: a worker counts until the first
/// block it does not hold).
///
/// Matching workers are narrowed as bits of the lane's slots, one AND per run, while the runs
/// have bits; the walk turns to merging holder lists (kept at the end of `out`, depth unset) at
/// the first run that has none. Either way a query allocates nothing beyond its answer.
pub(crate) fn walk(
    table: &RunTable,
    query: &[LocalBlockHash],
    guard: &Guard,
    out: &mut Vec<(Worker, u32)>,
) {
    let Some(&first) = query.first() else { return };
    let names = table.names();
    let named = |bits: u64, depth: u32| BitIter(bits).map(move |slot| (names.worker(slot), depth));
    let mut key = next_sequence_hash(None, first).0;
    let (mut parent, mut local) = (ROOT_TAIL, first.0);
    let mut at = 0;
    let mut matching = Matching::Unknown;
    while let Some(run) = table.get(key, guard, |run| run.is_child(parent, local)) {
        let state = &run.state;
        let holders = state.members.view();
        if let HolderView::List(list) = holders {
            // The holders are read after the hashes are compared: their lines load meanwhile.
            prefetch_slice(list, 4);
        }
        // The next run's key if this one matches whole: known before its hashes are compared,
        // so the lookup's first cache miss overlaps the comparison's.
        let next = query.get(at + state.locals.len()).map(|&local| {
            let key = next_sequence_hash(Some(SequenceHash(state.tail_seq)), local).0;
            table.prefetch(key, guard);
            key
        });
        let matched = common_prefix(&state.locals, &query[at..]);
        debug_assert!(matched > 0, "the run starts with the query's next block");
        let depth = at as u32;
        matching = match (matching, holders) {
            (Matching::Unknown, HolderView::Bits(bits)) => Matching::Bits(bits),
            (Matching::Bits(before), HolderView::Bits(bits)) => {
                out.extend(named(before & !bits, depth));
                Matching::Bits(before & bits)
            }
            (Matching::Unknown, HolderView::List(list)) => {
                out.extend(list.iter().map(|&worker| (worker, 0)));
                Matching::Listed(out.len() - list.len())
            }
            (Matching::Bits(before), HolderView::List(list)) => {
                let start = out.len();
                out.extend(named(before, 0));
                out[start..].sort_unstable();
                Matching::Listed(start + keep_holders(&mut out[start..], list, depth))
            }
            (Matching::Listed(start), HolderView::List(list)) => {
                Matching::Listed(start + keep_holders(&mut out[start..], list, depth))
            }
            (Matching::Listed(start), HolderView::Bits(bits)) => {
                // Listed workers are kept if their slot's bit is set (a slotless one is not a
                // holder of a set of bits).
                Matching::Listed(start + keep_named(&mut out[start..], bits, names, depth))
            }
        };
        match matching {
            Matching::Bits(0) => return,
            Matching::Listed(start) if start == out.len() => return,
            _ => {}
        }
        at += matched;
        if matched < state.locals.len() || at == query.len() {
            break;
        }
        let Some(next) = next else { break };
        (parent, local) = (state.tail_id, query[at].0);
        key = next;
    }
    match matching {
        Matching::Unknown => {}
        Matching::Bits(bits) => out.extend(named(bits, at as u32)),
        Matching::Listed(start) => {
            out[start..].iter_mut().for_each(|(_, depth)| *depth = at as u32)
        }
    }
}

/// The set bits of a word, lowest first.
struct BitIter(u64);

impl Iterator for BitIter {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        let bit = (self.0 != 0).then(|| self.0.trailing_zeros())?;
        self.0 &= self.0 - 1;
        Some(bit)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn keep_holders_keeps_the_members_sorted_at_the_end() {
        let w = |id: u64| Worker::new(id, 0);
        // Every subset of 0..8 as members, against every subset of 0..8 as active workers:
        // both strategies (merge, binary search) are reached.
        for active_bits in 0u32..256 {
            for member_bits in 0u32..256 {
                let mut active: Vec<(Worker, u32)> =
                    (0..8).filter(|i| active_bits & (1 << i) != 0).map(|i| (w(i), 99)).collect();
                let members: Vec<Worker> =
                    (0..8).filter(|i| member_bits & (1 << i) != 0).map(w).collect();
                let kept = keep_holders(&mut active, &members, 7);
                let expected: Vec<(Worker, u32)> = (0..8)
                    .filter(|i| active_bits & member_bits & (1 << i) != 0)
                    .map(|i| (w(i), 99))
                    .collect();
                assert_eq!(active[kept..], expected[..]);
                let mut dropped: Vec<u64> = active[..kept].iter().map(|(x, _)| x.id.0).collect();
                dropped.sort_unstable();
                let gone: Vec<u64> =
                    (0..8).filter(|i| active_bits & !member_bits & (1 << i) != 0).collect();
                assert_eq!(dropped, gone);
                assert!(active[..kept].iter().all(|&(_, depth)| depth == 7));
            }
        }
    }

    #[test]
    fn common_prefix_finds_the_first_difference_anywhere() {
        let locals: Vec<u64> = (0..37).collect();
        for len in 0..=40 {
            for differ in 0..=len {
                let query: Vec<LocalBlockHash> = (0..len as u64)
                    .map(|i| LocalBlockHash(if i as usize == differ { 1000 } else { i }))
                    .collect();
                let expected = differ.min(37).min(len);
                assert_eq!(common_prefix(&locals, &query), expected, "len {len}, differ {differ}");
            }
        }
    }
}
