//! The concurrent index against the reference: random multi-worker histories through 1, 2 and
//! 4 lanes; after `flush()` every query, the snapshot, the dump and the error counts agree.

mod common;

use common::{Op, all_queries, op, op_among};
use kvroute::ApplyErrorKind;
use kvroute::index::{EventPool, PoolConfig, ReferenceIndex};
use proptest::prelude::*;

fn check(ops: &[Op], lanes: usize) -> Result<(), TestCaseError> {
    let pool = EventPool::new(PoolConfig { lanes, ..PoolConfig::default() });
    let mut reference = ReferenceIndex::new();
    let mut errors = [0u64; ApplyErrorKind::ALL.len()];
    for op in ops {
        match op {
            Op::Event(event) => {
                if let Err(error) = reference.apply(event) {
                    errors[error.kind().index()] += 1;
                }
                pool.apply_blocking(event.clone()).unwrap();
            }
            Op::RemoveRank(worker) => {
                let known = reference.remove_worker_dp_rank(*worker);
                prop_assert_eq!(pool.remove_worker_dp_rank(*worker).unwrap(), known);
            }
            Op::RemoveId(id) => {
                let removed = reference.remove_worker(*id);
                prop_assert_eq!(pool.remove_worker(*id).unwrap(), removed);
            }
        }
    }
    pool.flush().unwrap();
    prop_assert_eq!(pool.stats().errors, errors);
    prop_assert_eq!(pool.snapshot().unwrap(), reference.snapshot());
    prop_assert_eq!(pool.workers().unwrap(), reference.workers());
    prop_assert_eq!(pool.stats().live_entries, reference.entry_count() as u64);
    for query in all_queries(4, 4) {
        prop_assert_eq!(pool.find_matches(&query), reference.find_matches(&query));
        prop_assert_eq!(
            pool.find_matches_early_exit(&query),
            reference.find_matches_early_exit(&query)
        );
    }
    // The pool's dump rebuilds the reference's state.
    let mut rebuilt = ReferenceIndex::new();
    for event in pool.dump_events().unwrap() {
        prop_assert_eq!(rebuilt.apply(&event), Ok(()));
    }
    prop_assert_eq!(rebuilt.snapshot(), reference.snapshot());
    for query in all_queries(4, 4) {
        prop_assert_eq!(rebuilt.find_matches(&query), reference.find_matches(&query));
    }
    Ok(())
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

    /// Over 64 workers: membership words beyond the first, and their summary.
    #[test]
    fn many_workers(ops in prop::collection::vec(op_among(100, 3, 6), 100..300)) {
        check(&ops, 2)?;
    }

    #[test]
    fn four_lanes(ops in prop::collection::vec(op(4, 10), 0..80)) {
        check(&ops, 4)?;
    }
}
