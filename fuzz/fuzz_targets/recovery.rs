//! Recovery fuzz target: fuzz bytes become an adversary (drops, duplicates, reordering within a
//! window, `Cleared`, worker restarts, failing recovery calls) against `EventRecovery` in front
//! of the reference index; after quiescence the index must equal every worker's own record.
//!
//! `cargo +nightly fuzz run -O -s none recovery corpus/recovery` (from `fuzz/`); the proptest
//! `tests/recovery_props.rs` plays the same harness on stable.
#![no_main]

mod recovery_check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (ops, window, fail_every) = recovery_check::decode(data);
    if let Err(divergence) = recovery_check::run(&ops, window, fail_every) {
        panic!("{divergence}");
    }
});
