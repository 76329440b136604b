//! Random event sequences shared by the differential tests.
#![allow(dead_code)]

use kvroute::{RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};

#[path = "../../fuzz/fuzz_targets/index_ops_check.rs"]
mod index_ops_check;
#[allow(unused_imports)] // each test crate uses a part
pub use index_ops_check::{Op, check_ops, check_ops_on, queries as all_queries};
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

/// Blocks of one long chain (content and engine hash `i` at depth `i`) or of its branch from
/// depth `at` on (content and engine hash `BRANCH + i`).
pub const CHAIN: u64 = 80;
pub const BRANCH: u64 = 1000;

fn chain_block(depth: u64, branch_at: Option<u64>) -> u64 {
    if branch_at.is_some_and(|at| depth >= at) { BRANCH + depth } else { depth }
}

/// Stores and removals of long stretches of one chain and its branches, so runs are split,
/// truncated and re-joined deep inside (past the hashes a short run keeps inline).
pub fn long_chain_op(ids: u64) -> impl Strategy<Value = Op> {
    let branch = prop::option::weighted(0.4, 0..CHAIN);
    prop_oneof![
        3 => (workers_among(ids), 0..CHAIN, 1..CHAIN, branch.clone()).prop_map(|(w, start, len, at)| {
            let end = (start + len).min(CHAIN);
            let parent = (start > 0).then(|| SequenceHash(chain_block(start - 1, at)));
            let blocks = (start..end)
                .map(|d| StoredBlock::new(chain_block(d, at), chain_block(d, at)))
                .collect();
            Op::Event(RouterEvent::stored(w, 0, parent, blocks))
        }),
        2 => (workers_among(ids), 0..CHAIN, 1..CHAIN / 2, branch).prop_map(|(w, start, len, at)| {
            let end = (start + len).min(CHAIN);
            let hashes = (start..end).rev().map(|d| SequenceHash(chain_block(d, at))).collect();
            Op::Event(RouterEvent::removed(w, 0, hashes))
        }),
        1 => workers_among(ids).prop_map(Op::RemoveRank),
    ]
}

/// The chain and its branches, whole, as queries (every prefix is scored by them).
pub fn long_chain_queries() -> Vec<Vec<kvroute::LocalBlockHash>> {
    let at = [None, Some(0), Some(1), Some(15), Some(16), Some(17), Some(33), Some(50), Some(79)];
    at.iter()
        .map(|&at| (0..CHAIN).map(|d| kvroute::LocalBlockHash(chain_block(d, at))).collect())
        .collect()
}

/// Hashes that collide with the index's own keys or markers: 0, 1, `u64::MAX` (and its
/// neighbour), and the sequence hashes of short chains over 0, 1 and `u64::MAX` (so a root's
/// content hash can equal another run's key).
pub fn extreme_hashes() -> Vec<u64> {
    use kvroute::LocalBlockHash;
    use kvroute::hash::next_sequence_hash;
    let base = [0, 1, u64::MAX, u64::MAX - 1];
    let mut all = base.to_vec();
    for &a in &base[..3] {
        for &b in &base[..3] {
            let seq = next_sequence_hash(Some(SequenceHash(a)), LocalBlockHash(b));
            all.push(seq.0);
        }
    }
    all
}

/// Like [`op`], but content and engine hashes are drawn from [`extreme_hashes`].
pub fn op_extreme() -> impl Strategy<Value = Op> {
    let values = extreme_hashes();
    let count = values.len();
    op(count as u64, count as u64).prop_map(move |op| {
        let pick = |v: u64| values[v as usize];
        match op {
            Op::Event(event) => Op::Event(remap(event, pick)),
            other => other,
        }
    })
}

/// `event` with every content and engine hash `h` replaced by `pick(h)`.
fn remap(event: RouterEvent, pick: impl Fn(u64) -> u64) -> RouterEvent {
    use kvroute::KvEventData;
    let worker = event.worker();
    match event.event.data {
        KvEventData::Stored { parent, blocks } => {
            let blocks = blocks.iter().map(|b| StoredBlock::new(pick(b.local.0), pick(b.hash.0)));
            let parent = parent.map(|p| SequenceHash(pick(p.0)));
            RouterEvent::stored(worker, 0, parent, blocks.collect())
        }
        KvEventData::Removed { blocks } => {
            let blocks = blocks.iter().map(|b| SequenceHash(pick(b.0))).collect();
            RouterEvent::removed(worker, 0, blocks)
        }
        KvEventData::Cleared => event,
    }
}

/// Every query of up to `depth` blocks over [`extreme_hashes`].
pub fn extreme_queries(depth: usize) -> Vec<Vec<kvroute::LocalBlockHash>> {
    let values = extreme_hashes();
    all_queries(values.len() as u64, depth)
        .into_iter()
        .map(|q| q.into_iter().map(|l| kvroute::LocalBlockHash(values[l.0 as usize])).collect())
        .collect()
}
