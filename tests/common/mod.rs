//! Random event sequences shared by the differential tests.
#![allow(dead_code)]

use kvroute::{RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};

#[path = "../../fuzz/fuzz_targets/index_ops_check.rs"]
mod index_ops_check;
#[allow(unused_imports)] // each test crate uses a part
pub use index_ops_check::{Op, check_ops, queries as all_queries};
use proptest::prelude::*;

/// A small fleet, so events collide: ids 0..3, ranks 0..2.
pub fn worker() -> impl Strategy<Value = Worker> {
    workers_among(3)
}

/// Ids 0..`ids`, ranks 0..2.
pub fn workers_among(ids: u64) -> impl Strategy<Value = Worker> {
    (0..ids, 0u32..2).prop_map(|(id, rank)| Worker::new(id, rank))
}

/// Small alphabets make shared prefixes, duplicates, conflicts and unknown parents common.
pub fn op(locals: u64, engine_hashes: u64) -> impl Strategy<Value = Op> {
    op_among(3, locals, engine_hashes)
}

/// Like [`op`], over workers with ids 0..`ids`.
pub fn op_among(ids: u64, locals: u64, engine_hashes: u64) -> impl Strategy<Value = Op> {
    let worker = move || workers_among(ids);
    let block = (0..locals, 0..engine_hashes).prop_map(|(l, h)| StoredBlock::new(l, h));
    prop_oneof![
        6 => (worker(), prop::option::weighted(0.6, 0..engine_hashes), prop::collection::vec(block, 0..5))
            .prop_map(|(w, parent, blocks)| Op::Event(RouterEvent::stored(w, 0, parent.map(SequenceHash), blocks))),
        3 => (worker(), prop::collection::vec(0..engine_hashes, 1..4)).prop_map(|(w, hashes)| {
            Op::Event(RouterEvent::removed(w, 0, hashes.into_iter().map(SequenceHash).collect()))
        }),
        1 => worker().prop_map(|w| Op::Event(RouterEvent::cleared(w, 0))),
        1 => worker().prop_map(Op::RemoveRank),
        1 => (0..ids).prop_map(|id| Op::RemoveId(WorkerId(id))),
    ]
}
