//! The concurrent index against the reference: random multi-worker histories through 1, 2 and
//! 4 lanes; after `flush()` every query, the snapshot, the dump and the error counts agree.

mod common;

use common::{Op, check_ops, check_ops_on, extreme_queries, long_chain_op, long_chain_queries};
use common::{op, op_among, op_extreme};
use proptest::prelude::*;

fn check(ops: &[Op], lanes: usize) -> Result<(), TestCaseError> {
    check_ops(lanes, ops, 4, 4).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn one_lane(ops in prop::collection::vec(op(4, 10), 0..80)) {
        check(&ops, 1)?;
    }

    #[test]
    fn two_lanes(ops in prop::collection::vec(op(4, 10), 0..80)) {
        check(&ops, 2)?;
    }

    /// Many workers: long holder lists on shared runs, split and merged by many workers.
    #[test]
    fn many_workers(ops in prop::collection::vec(op_among(100, 3, 6), 100..300)) {
        check(&ops, 2)?;
    }

    /// Long chains: runs split, shortened and extended deep inside.
    #[test]
    fn long_chains(ops in prop::collection::vec(long_chain_op(3), 1..60)) {
        check_ops_on(2, &ops, &long_chain_queries()).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn four_lanes(ops in prop::collection::vec(op(4, 10), 0..80)) {
        check(&ops, 4)?;
    }

    /// Content and engine hashes 0, 1, `u64::MAX` and other runs' sequence hashes
    /// (run keys that collide with each other and with the table's markers).
    #[test]
    fn extreme_hashes(ops in prop::collection::vec(op_extreme(), 0..60), lanes in 1usize..3) {
        check_ops_on(lanes, &ops, &extreme_queries(3)).map_err(TestCaseError::fail)?;
    }
}

/// More workers than a lane has holder slots (64), some removed and others added after them
/// (so freed slots can be handed out again): runs with and without holder bits, and walks that
/// turn from bits to lists part-way, agree with the reference.
#[test]
fn more_workers_than_slots_and_slots_handed_out_again() {
    use kvroute::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};
    let store = |id: u64, from: u64, to: u64| {
        let blocks = (from..=to).map(|l| StoredBlock::new(l, l + 1000 * id)).collect();
        let parent = (from > 1).then(|| SequenceHash(from - 1 + 1000 * id));
        Op::Event(RouterEvent::stored(Worker::new(id, 0), 0, parent, blocks))
    };
    let mut ops = Vec::new();
    for id in 0..70 {
        ops.push(store(id, 1, 6));
        if id % 3 == 0 {
            ops.push(store(id, 7, 9));
        }
    }
    ops.extend((0..20).map(|id| Op::RemoveId(WorkerId(id))));
    for id in 100..130 {
        ops.push(store(id, 1, if id % 2 == 0 { 4 } else { 6 }));
        if id % 5 == 0 {
            ops.push(store(id, 7, 8));
        }
    }
    let chain = |to: u64| (1..=to).map(LocalBlockHash).collect::<Vec<_>>();
    let queries = [chain(9), chain(8), chain(6), chain(4), chain(1)];
    for lanes in [1, 2] {
        check_ops_on(lanes, &ops, &queries).unwrap_or_else(|e| panic!("{lanes} lanes: {e}"));
    }
    // One lane: workers 0..64 take its slots; worker 64, slotless, holds only block 3 of the
    // chain, so a walk narrows by bits over blocks 1–2 and turns to lists at block 3.
    let mut ops: Vec<Op> = (0..=64).map(|id| store(id, 1, 4)).collect();
    let removed = |id: u64, blocks: &[u64]| {
        let hashes = blocks.iter().map(|&l| SequenceHash(l + 1000 * id)).collect();
        Op::Event(RouterEvent::removed(Worker::new(id, 0), 0, hashes))
    };
    ops.push(removed(64, &[1, 2]));
    ops.push(removed(5, &[4, 3]));
    ops.push(removed(6, &[4]));
    check_ops_on(1, &ops, &queries).unwrap_or_else(|e| panic!("bits then lists: {e}"));
    // And the other way: the slotless worker holds blocks 1–2 only, so the walk merges lists
    // there and narrows by bits from block 3 on.
    let mut ops: Vec<Op> = (0..=64).map(|id| store(id, 1, 4)).collect();
    ops.push(removed(64, &[4, 3]));
    ops.push(removed(10, &[4]));
    ops.push(removed(11, &[4, 3]));
    check_ops_on(1, &ops, &queries).unwrap_or_else(|e| panic!("lists then bits: {e}"));
}

/// Lanes are walked in turn, a load at a time: lanes past 64 workers (whose walks merge holder
/// lists kept at the end of the answer) and lanes that narrow by bits, in one query, agree with
/// the reference.
#[test]
fn lanes_walked_in_turn_by_lists_and_by_bits() {
    use kvroute::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker};
    let store = |id: u64, from: u64, to: u64| {
        let blocks = (from..=to).map(|l| StoredBlock::new(l, l + 1000 * id)).collect();
        let parent = (from > 1).then(|| SequenceHash(from - 1 + 1000 * id));
        Op::Event(RouterEvent::stored(Worker::new(id, 0), 0, parent, blocks))
    };
    let chain = |to: u64| (1..=to).map(LocalBlockHash).collect::<Vec<_>>();
    let queries = [chain(8), chain(6), chain(5), chain(3), chain(1)];
    // Every worker holds the chain to its own depth, so runs split at every depth and the
    // slotless workers of a lane make some of them lists; more lanes, fewer slotless workers.
    for (lanes, workers) in [(2, 140), (2, 129), (4, 270), (4, 200)] {
        let ops: Vec<Op> = (0..workers).map(|id| store(id, 1, 1 + id % 8)).collect();
        check_ops_on(lanes, &ops, &queries)
            .unwrap_or_else(|e| panic!("{lanes} lanes, {workers} workers: {e}"));
    }
}

/// A mass removal compacts a lane's branching tree (its nodes and runs renumbered); the parents
/// its runs record survive that: later removals prune through them, and snapshots and dumps
/// rebuild the reference's state.
#[test]
fn compaction_keeps_a_branching_tree() {
    use kvroute::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker};
    let name = |id: u64, local: u64| id * 1_000_000 + local;
    // `locals` stored by worker `id` below its block `parent`.
    let store = |id: u64, parent: Option<u64>, locals: &[u64]| {
        let blocks = locals.iter().map(|&l| StoredBlock::new(l, name(id, l))).collect();
        let parent = parent.map(|p| SequenceHash(name(id, p)));
        Op::Event(RouterEvent::stored(Worker::new(id, 0), 0, parent, blocks))
    };
    // Tail first, as engines list evictions.
    let removed = |id: u64, locals: &[u64]| {
        let hashes = locals.iter().rev().map(|&l| SequenceHash(name(id, l))).collect();
        Op::Event(RouterEvent::removed(Worker::new(id, 0), 0, hashes))
    };
    let range = |from: u64, to: u64| (from..=to).collect::<Vec<_>>();
    let ops = [
        store(1, None, &range(1, 3000)),
        store(2, None, &range(1, 600)),
        store(2, Some(600), &range(5000, 5100)),
        store(3, None, &range(1, 300)),
        store(3, Some(300), &range(7000, 7050)),
        // Most of the tree goes: the lane compacts.
        removed(1, &range(301, 3000)),
        // Worker 2's branch, then the stretch only it holds: pruned up to worker 3's fork.
        removed(2, &range(5000, 5100)),
        removed(2, &range(301, 600)),
        // And a new branch at the fork.
        store(2, Some(300), &range(9000, 9010)),
    ];
    let query = |parts: &[(u64, u64)]| {
        let locals = parts.iter().flat_map(|&(from, to)| from..=to);
        locals.map(LocalBlockHash).collect::<Vec<_>>()
    };
    let queries = [
        query(&[(1, 3000)]),
        query(&[(1, 600), (5000, 5100)]),
        query(&[(1, 300), (7000, 7050)]),
        query(&[(1, 300), (9000, 9010)]),
    ];
    for lanes in [1, 2] {
        // Up to each op, so every stage is checked, compaction included.
        for end in 1..=ops.len() {
            check_ops_on(lanes, &ops[..end], &queries)
                .unwrap_or_else(|e| panic!("{lanes} lanes, {end} ops: {e}"));
        }
    }
}
