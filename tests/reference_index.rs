//! Rules of the reference index, and dump → rebuild equality.

mod common;

use common::{Op, all_queries, op};
use kvroute::index::ReferenceIndex;
use kvroute::{ApplyError, LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker};
use proptest::prelude::*;

const W: Worker = Worker::new(1, 0);
const V: Worker = Worker::new(2, 0);

fn chain(worker: Worker, parent: Option<u64>, blocks: &[(u64, u64)]) -> RouterEvent {
    let blocks = blocks.iter().map(|&(l, h)| StoredBlock::new(l, h)).collect();
    RouterEvent::stored(worker, 0, parent.map(SequenceHash), blocks)
}

fn q(locals: &[u64]) -> Vec<LocalBlockHash> {
    locals.iter().copied().map(LocalBlockHash).collect()
}

#[test]
fn unknown_parent_is_rejected_and_changes_nothing() {
    let mut index = ReferenceIndex::new();
    index.apply(&chain(W, None, &[(1, 10)])).unwrap();
    let before = index.snapshot();
    let err = index.apply(&chain(W, Some(99), &[(2, 20)])).unwrap_err();
    assert_eq!(err, ApplyError::UnknownParent { worker: W, parent: SequenceHash(99) });
    assert_eq!(index.snapshot(), before);
    // Another worker's hash is not a parent for this one.
    index.apply(&chain(V, None, &[(5, 50)])).unwrap();
    assert!(index.apply(&chain(W, Some(50), &[(6, 60)])).is_err());
}

#[test]
fn storing_twice_is_idempotent() {
    let mut index = ReferenceIndex::new();
    index.apply(&chain(W, None, &[(1, 10), (2, 20)])).unwrap();
    let once = index.snapshot();
    index.apply(&chain(W, None, &[(1, 10), (2, 20)])).unwrap();
    index.apply(&chain(W, Some(10), &[(2, 20)])).unwrap();
    assert_eq!(index.snapshot(), once);
    assert_eq!(index.find_matches(&q(&[1, 2, 3])).get(W), 2);
}

#[test]
fn conflicting_names_are_rejected_whole() {
    let mut index = ReferenceIndex::new();
    index.apply(&chain(W, None, &[(1, 10), (2, 20)])).unwrap();
    let before = index.snapshot();
    // Engine hash 20 reused at another place, after a valid block: nothing is stored.
    let err = index.apply(&chain(W, None, &[(7, 70), (8, 20)])).unwrap_err();
    assert_eq!(err, ApplyError::HashConflict { worker: W, block: SequenceHash(20) });
    // The same block under a second engine hash.
    assert!(index.apply(&chain(W, None, &[(1, 11)])).is_err());
    // One engine hash twice in one event.
    assert!(index.apply(&chain(W, None, &[(3, 30), (4, 30)])).is_err());
    assert_eq!(index.snapshot(), before);
}

#[test]
fn removing_unknown_blocks_skips_them_and_removes_the_rest() {
    let mut index = ReferenceIndex::new();
    index.apply(&chain(W, None, &[(1, 10), (2, 20)])).unwrap();
    let err = index.apply(&RouterEvent::removed(W, 0, vec![SequenceHash(20), SequenceHash(99)]));
    assert_eq!(
        err,
        Err(ApplyError::UnknownBlocks { worker: W, first: SequenceHash(99), count: 1 })
    );
    assert_eq!(index.block_count(W), 1);
    let unknown = RouterEvent::removed(V, 0, vec![SequenceHash(1)]);
    assert_eq!(index.apply(&unknown), Err(ApplyError::UnknownWorker { worker: V }));
}

#[test]
fn mid_chain_removal_keeps_descendants() {
    let mut index = ReferenceIndex::new();
    index.apply(&chain(W, None, &[(1, 10), (2, 20), (3, 30)])).unwrap();
    index.apply(&RouterEvent::removed(W, 0, vec![SequenceHash(20)])).unwrap();
    assert_eq!(index.block_count(W), 2);
    assert_eq!(index.find_matches(&q(&[1, 2, 3])).get(W), 1);
    // The descendant is still a valid parent, and restoring the gap makes it reachable again.
    index.apply(&chain(W, Some(30), &[(4, 40)])).unwrap();
    index.apply(&chain(W, Some(10), &[(2, 21)])).unwrap();
    assert_eq!(index.find_matches(&q(&[1, 2, 3, 4])).get(W), 4);
}

#[test]
fn clear_and_removal_touch_only_their_worker() {
    let mut index = ReferenceIndex::new();
    let w1 = Worker::new(1, 1);
    for worker in [W, w1, V] {
        index.apply(&chain(worker, None, &[(1, 10), (2, 20)])).unwrap();
    }
    index.apply(&RouterEvent::cleared(W, 0)).unwrap();
    let scores = index.find_matches(&q(&[1, 2]));
    assert_eq!((scores.get(W), scores.get(w1), scores.get(V)), (0, 2, 2));
    assert_eq!(index.workers(), vec![W, w1, V]);
    assert_eq!(index.remove_worker(kvroute::WorkerId(1)), 2);
    assert_eq!(index.workers(), vec![V]);
    assert!(index.remove_worker_dp_rank(V));
    assert_eq!(index.node_count(), 0);
}

#[test]
fn early_exit_stops_at_a_single_match() {
    let mut index = ReferenceIndex::new();
    index.apply(&chain(W, None, &[(1, 10), (2, 20), (3, 30)])).unwrap();
    index.apply(&chain(V, None, &[(1, 10)])).unwrap();
    let query = q(&[1, 2, 3]);
    assert_eq!(index.find_matches(&query).sorted(), vec![(W, 3), (V, 1)]);
    assert_eq!(index.find_matches_early_exit(&query).sorted(), vec![(W, 2), (V, 1)]);
}

fn apply_ops(index: &mut ReferenceIndex, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Event(event) => drop(index.apply(event)),
            Op::RemoveRank(worker) => drop(index.remove_worker_dp_rank(*worker)),
            Op::RemoveId(id) => drop(index.remove_worker(*id)),
        }
    }
}

proptest! {
    #[test]
    fn dump_rebuilds_an_equal_index(ops in prop::collection::vec(op(4, 10), 0..60)) {
        let mut index = ReferenceIndex::new();
        apply_ops(&mut index, &ops);
        let mut rebuilt = ReferenceIndex::new();
        for event in index.dump_events() {
            prop_assert_eq!(rebuilt.apply(&event), Ok(()));
        }
        prop_assert_eq!(rebuilt.snapshot(), index.snapshot());
        prop_assert_eq!(rebuilt.workers(), index.workers());
        for query in all_queries(4, 4) {
            prop_assert_eq!(rebuilt.find_matches(&query), index.find_matches(&query));
        }
    }
}
