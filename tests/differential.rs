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

    /// #18 item 1: content and engine hashes 0, 1, `u64::MAX` and other runs' sequence hashes
    /// (run keys that collide with each other and with the table's markers).
    #[test]
    fn extreme_hashes(ops in prop::collection::vec(op_extreme(), 0..60), lanes in 1usize..3) {
        check_ops_on(lanes, &ops, &extreme_queries(3)).map_err(TestCaseError::fail)?;
    }
}
