//! The concurrent index against the reference: random multi-worker histories through 1, 2 and
//! 4 lanes; after `flush()` every query, the snapshot, the dump and the error counts agree.

mod common;

use common::{Op, check_ops, check_ops_on, long_chain_op, long_chain_queries, op, op_among};
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
}
