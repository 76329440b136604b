//! Recovery against an adversary (see `fuzz/fuzz_targets/recovery_check.rs`, shared with the
//! fuzz target): after quiescence the index equals the truth.

#[allow(dead_code)] // the fuzz target's byte decoding is not used here
#[path = "../fuzz/fuzz_targets/recovery_check.rs"]
mod recovery_check;

use proptest::prelude::*;
use recovery_check::{Op, WORKERS, run};

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..WORKERS, any::<usize>(), 1..4usize, any::<u64>())
            .prop_map(|(w, parent, len, salt)| Op::Store { w, parent, len, salt }),
        2 => (0..WORKERS, any::<usize>()).prop_map(|(w, pick)| Op::Remove { w, pick }),
        1 => (0..WORKERS).prop_map(|w| Op::Clear { w }),
        1 => (0..WORKERS).prop_map(|w| Op::Restart { w }),
        8 => (any::<usize>(), any::<u8>()).prop_map(|(pick, fate)| Op::Deliver { pick, fate }),
        2 => Just(Op::Recover),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_index_converges_to_the_truth(
        ops in prop::collection::vec(op(), 0..120),
        window in 0..6usize,
        fail_every in 2..7u64,
    ) {
        run(&ops, window, fail_every).map_err(TestCaseError::fail)?;
    }
}
