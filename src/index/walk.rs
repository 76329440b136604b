//! The lock-free walk a query takes over the lanes' runs: per lane, from the run that starts
//! with the query's first block, run after run while the query matches, narrowing the workers
//! that hold everything matched so far.
//!
//! A walk is a chain of dependent loads: a run's table slot, then the run's version, then (for
//! a run too long to keep its hashes inline) its hashes, then the next run's slot, whose key
//! follows from this run's tail id. The slot's hints (see [`super::runs::run_table`]) shorten
//! it: once a slot arrives, the run, its hashes and the next run's slot are all asked for, so a
//! walk over cold runs waits about one miss per run (what it compares still comes from the run
//! itself). One lane's chain cannot go faster than memory answers, but the lanes' chains are
//! independent: so the walks of several lanes advance in turn, one load stage each
//! ([`LaneWalk::step`]), and each stage only asks for the lines of its next one before giving
//! way. The misses of all the lanes are then in flight together, and a query costs about its
//! longest lane's chain, not the sum of them.
//!
//! Matching workers are narrowed as bits of the lane's slots, one AND per run, while the runs
//! have bits; the walk turns to merging holder lists (kept at the end of the answer, depth
//! unset) at the first run that has none, and a lane that does finishes its walk before
//! another lane adds to the answer. Either way a query allocates nothing beyond its answer.

use crate::event::{LocalBlockHash, Worker};
use crate::index::runs::holder_sets::HolderView;
use crate::index::runs::run::{ROOT_TAIL, Run};
use crate::index::runs::run_table::{Lookup, RunTable};
use crate::index::runs::worker_slots::{SLOTS, WorkerSlots};
use crate::prefetch::prefetch_slice;
use crate::sync::Arc;
use crate::sync::epoch::Guard;

/// How many lanes walk in turn at most; more are walked in groups of this many. Each walk
/// keeps a few cache misses in flight, and a core keeps a few dozen.
const IN_TURN: usize = 8;

/// How many lines of a long run's hashes are asked for as soon as the run's version arrives.
const HASH_LINES: usize = 8;

/// How many lines of a query [`prefetch_query`] asks for (128 blocks).
const QUERY_LINES: usize = 16;

/// Starts loading the first lines of `query`. A router's query is usually just built and in
/// the core's caches, where this costs a few instructions; but one of many kept, or built on
/// another core, is cold, and its walk reads it in steps it cannot foresee: its first block for
/// the root's key, the block after each run for the next key, and whole runs' worth to
/// compare. Asked for at once, its misses overlap each other and the pin and the answer's
/// allocation, instead of each one stalling a lane's walk in turn.
#[inline]
pub(crate) fn prefetch_query(query: &[LocalBlockHash]) {
    prefetch_slice(query, QUERY_LINES);
}

/// Appends, per worker of the lanes of `tables` that matches `query`, how many leading blocks
/// it holds (the reference tree's rule: a worker counts until the first block it does not
/// hold), walking the lanes in turn (see the [module docs](self)).
pub(crate) fn walk_lanes(
    tables: &[Arc<RunTable>],
    query: &[LocalBlockHash],
    guard: &Guard,
    out: &mut Vec<(Worker, u32)>,
) {
    let Some(&first) = query.first() else { return };
    for group in tables.chunks(IN_TURN) {
        let mut walks: [Option<LaneWalk<'_>>; IN_TURN] = Default::default();
        for (walk, table) in walks.iter_mut().zip(group) {
            *walk = Some(LaneWalk::new(table, first.0, guard));
        }
        let walks = &mut walks[..group.len()];
        let mut active = group.len();
        while active > 0 {
            for slot in walks.iter_mut() {
                let Some(walk) = slot else { continue };
                if !walk.step(query, guard, out) {
                    *slot = None;
                    active -= 1;
                }
            }
        }
    }
}

/// [`walk_lanes`] over one lane.
#[cfg(loom)]
pub(crate) fn walk(
    table: &Arc<RunTable>,
    query: &[LocalBlockHash],
    guard: &Guard,
    out: &mut Vec<(Worker, u32)>,
) {
    walk_lanes(std::slice::from_ref(table), query, guard, out);
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

/// What a lane's walk loads next.
enum Stage<'a> {
    /// The next run under the lookup's key (its slot).
    Locate,
    /// The candidate's version: is it the child the walk wants?
    Inspect(&'a Run),
    /// The candidate's hashes, out of line: compare them.
    Visit(&'a Run),
}

/// One lane's walk, a load stage at a time; see the [module docs](self).
struct LaneWalk<'a> {
    names: &'a WorkerSlots,
    /// The lookup of the run the walk wants next, and the stage it is at.
    lookup: Lookup<'a>,
    stage: Stage<'a>,
    /// The lookup of the run after the one being visited, if that one matches whole, and the
    /// (tail id, length) of the run it was made for: the slot's hints first, the run's own once
    /// they differ.
    next: Option<Lookup<'a>>,
    next_for: (u64, usize),
    /// What identifies the wanted run: the tail it hangs from and its first content hash.
    parent: u64,
    local: u64,
    /// Blocks matched so far.
    at: usize,
    matching: Matching,
    /// The table, for the next lookups.
    table: &'a RunTable,
}

impl<'a> LaneWalk<'a> {
    /// A walk of `table` from the root run that starts with the query's first content hash
    /// `first`; its slot starts loading now.
    fn new(table: &'a RunTable, first: u64, guard: &'a Guard) -> Self {
        Self {
            names: table.names(),
            lookup: table.lookup(table.key(ROOT_TAIL, first), guard),
            stage: Stage::Locate,
            next: None,
            next_for: (ROOT_TAIL, 0),
            parent: ROOT_TAIL,
            local: first,
            at: 0,
            matching: Matching::Unknown,
            table,
        }
    }

    /// Takes the walk one load stage further; `false` once it is over and its workers are in
    /// `out`. A walk whose matching workers became a list runs to its end at once (see the
    /// [module docs](self)).
    fn step(
        &mut self,
        query: &[LocalBlockHash],
        guard: &'a Guard,
        out: &mut Vec<(Worker, u32)>,
    ) -> bool {
        loop {
            let going = self.stage(query, guard, out);
            if !going {
                self.finish(out);
                return false;
            }
            if !matches!(self.matching, Matching::Listed(_)) {
                return true;
            }
        }
    }

    /// One load stage; `false` when the walk ends.
    #[inline]
    fn stage(
        &mut self,
        query: &[LocalBlockHash],
        guard: &'a Guard,
        out: &mut Vec<(Worker, u32)>,
    ) -> bool {
        match self.stage {
            Stage::Locate => match self.lookup.next_candidate() {
                Some(run) => {
                    // The next run's lookup, as the slot's hints say: its miss overlaps the
                    // run's (checked at `Inspect`, once the run is here).
                    let hints = self.lookup.hints();
                    self.look_past(hints.tail, hints.len as usize, query, guard);
                    self.stage = Stage::Inspect(run);
                    true
                }
                None => false,
            },
            Stage::Inspect(run) => {
                if run.parent_tail != self.parent {
                    // Another run under the same key (keys may collide): look further.
                    self.stage = Stage::Locate;
                    return true;
                }
                if self.next_for != (run.tail_id, run.len()) {
                    // The hints were of another version: look where this one says.
                    self.look_past(run.tail_id, run.len(), query, guard);
                }
                if run.is_inline() {
                    return self.visit(run, query, out);
                }
                prefetch_slice(run.locals(), HASH_LINES);
                self.stage = Stage::Visit(run);
                true
            }
            Stage::Visit(run) => self.visit(run, query, out),
        }
    }

    /// Starts the lookup of the run after one tailed `tail` with `len` blocks, if the query goes
    /// on past it.
    #[inline]
    fn look_past(&mut self, tail: u64, len: usize, query: &[LocalBlockHash], guard: &'a Guard) {
        self.next_for = (tail, len);
        self.next = query
            .get(self.at.saturating_add(len))
            .map(|&local| self.table.lookup(self.table.key(tail, local.0), guard));
    }

    /// Compares the run found by identity with the query and narrows the matching workers;
    /// `false` when the walk ends.
    fn visit(
        &mut self,
        run: &'a Run,
        query: &[LocalBlockHash],
        out: &mut Vec<(Worker, u32)>,
    ) -> bool {
        if run.first() != self.local {
            self.stage = Stage::Locate;
            return true;
        }
        let holders = run.members.view();
        if let HolderView::List(list) = holders {
            // The holders are read after the hashes are compared: their lines load meanwhile.
            prefetch_slice(list, 4);
        }
        let matched = common_prefix(run.locals(), &query[self.at..]);
        debug_assert!(matched > 0, "the run starts with the query's next block");
        let depth = self.at as u32;
        let names = self.names;
        let named =
            |bits: u64, depth: u32| BitIter(bits).map(move |slot| (names.worker(slot), depth));
        self.matching = match (self.matching, holders) {
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
        match self.matching {
            Matching::Bits(0) => return false,
            Matching::Listed(start) if start == out.len() => return false,
            _ => {}
        }
        self.at += matched;
        if matched < run.len() || self.at == query.len() {
            return false;
        }
        let Some(next) = self.next.take() else { return false };
        (self.parent, self.local) = (run.tail_id, query[self.at].0);
        self.lookup = next;
        self.stage = Stage::Locate;
        true
    }

    /// Appends the workers still matching, with the depth the walk reached.
    fn finish(&self, out: &mut Vec<(Worker, u32)>) {
        let names = self.names;
        let depth = self.at as u32;
        match self.matching {
            Matching::Unknown => {}
            Matching::Bits(bits) => {
                out.extend(BitIter(bits).map(|slot| (names.worker(slot), depth)))
            }
            Matching::Listed(start) => {
                out[start..].iter_mut().for_each(|(_, found)| *found = depth)
            }
        }
    }
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
    use crate::index::runs::holder_sets::Holders;
    use crate::index::runs::locals::Locals;
    use crate::index::runs::run::RunState;
    use crate::index::runs::run_table::RunTableWriter;
    use crate::index::runs::versions::VersionCache;
    use crate::mix::Mixer;
    use crate::sync::epoch::{Reclaimer, pin};

    /// Keys may collide (a sender picks content hashes; see `index::run`): a walk that meets
    /// runs under its key that hang elsewhere, or start with other content (inline or in a
    /// shared allocation), looks further and finds the right one.
    #[test]
    fn colliding_keys_are_passed_over_by_identity() {
        let mut writer = RunTableWriter::new(Mixer::random());
        let (mut retired, guard) = (Reclaimer::default(), pin());
        let worker = Worker::new(7, 0);
        let run = |parent_tail: u64, locals: &[u64], tail_id: u64| {
            let members = Holders::listed(&[worker]);
            let state = RunState { locals: Locals::new(locals), tail_id, members };
            Run::version(0, parent_tail, state, &mut VersionCache::default())
        };
        let long: Vec<u64> = (12..40).collect();
        let mut decoy = long.clone();
        decoy[0] = 999;
        let table = writer.table().clone();
        let (root_key, child_key) = (table.key(ROOT_TAIL, 10), table.key(5, 12));
        // Decoys first, so each is met before the run it shares a key with: a root-keyed run
        // hanging below tail 99, and runs below tail 5 starting with other content.
        for (key, decoy) in [
            (root_key, run(99, &[10, 11], 6)),
            (child_key, run(5, &decoy, 7)),
            (child_key, run(5, &[998, 12], 8)),
            (root_key, run(ROOT_TAIL, &long, 9)),
            (child_key, run(6, &[12, 13], 10)),
        ] {
            writer.insert(key, decoy, &guard, &mut retired);
        }
        writer.insert(root_key, run(ROOT_TAIL, &[10, 11], 5), &guard, &mut retired);
        writer.insert(child_key, run(5, &long, 11), &guard, &mut retired);
        let query: Vec<LocalBlockHash> =
            [10, 11].iter().chain(&long).map(|&l| LocalBlockHash(l)).collect();
        let tables = [table];
        for len in [1, 2, 3, 20, query.len()] {
            let mut out = Vec::new();
            walk_lanes(&tables, &query[..len], &guard, &mut out);
            assert_eq!(out, [(worker, len as u32)], "a query of {len} blocks");
        }
    }

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
