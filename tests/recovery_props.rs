//! Recovery against an adversary (see `fuzz/fuzz_targets/recovery_check.rs`, shared with the
//! fuzz target): after quiescence the index equals the truth, for generated adversaries and for
//! the fuzz target's checked-in corpus.

#[path = "support/fuzz_corpus.rs"]
mod fuzz_corpus;
#[path = "../fuzz/fuzz_targets/recovery_check.rs"]
mod recovery_check;

use proptest::prelude::*;
use recovery_check::{Op, WORKERS, decode, run};

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

/// Every input the fuzz target kept for its coverage (`fuzz/corpus/recovery/`), replayed on
/// stable.
#[test]
fn the_checked_in_fuzz_corpus_converges_to_the_truth() {
    for (path, data) in fuzz_corpus::inputs("recovery") {
        let (ops, window, fail_every) = decode(&data);
        if let Err(divergence) = run(&ops, window, fail_every) {
            panic!("{}: {divergence}", path.display());
        }
    }
}
