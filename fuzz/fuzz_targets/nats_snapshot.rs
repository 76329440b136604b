//! Snapshot reassembly: a peer's answers in parts, in any order, duplicated, lost, late (an
//! earlier request's), with forged numbers and sizes. What the replica hands its tracker must
//! be exactly what it believes the peer holds, progress bounded, and a whole answer taken.
//!
//! `cargo +nightly fuzz run -O -s none nats_snapshot` (from the repository root);
//! `tests/fuzz_corpus.rs` replays `fuzz/corpus/nats_snapshot` on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(error) = kvroute::nats::fuzzing::reassemble(data) {
        panic!("{error}");
    }
});
