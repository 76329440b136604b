//! The NATS replica frame decoder on arbitrary bytes: it must refuse or decode, never panic,
//! and what it decodes (every size within its bound) must round-trip.
//!
//! `cargo +nightly fuzz run -O -s none nats_frame` (from the repository root);
//! `tests/fuzz_corpus.rs` replays `fuzz/corpus/nats_frame` on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(error) = kvroute::nats::fuzzing::decode_frame(data) {
        panic!("{error}");
    }
});
