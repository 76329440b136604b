//! Replays the fuzz target's check on stable: every input checked in under
//! `fuzz/corpus/index_ops/`, plus fixed-seed pseudo-random inputs, each with the pool's lanes on
//! threads and again inline.

#[allow(dead_code)] // this test uses `check_as` only
#[path = "../fuzz/fuzz_targets/index_ops_check.rs"]
mod index_ops_check;

#[path = "support/fuzz_corpus.rs"]
mod fuzz_corpus;

use kvroute::index::LaneMode;

/// Checks `data` in both lane modes.
fn check_both(data: &[u8]) -> Result<(), String> {
    for mode in [LaneMode::Threads, LaneMode::Inline] {
        index_ops_check::check_as(data, mode).map_err(|e| format!("{mode:?}: {e}"))?;
    }
    Ok(())
}

#[test]
fn checked_in_corpus_agrees_with_the_reference() {
    for (path, data) in fuzz_corpus::inputs("index_ops") {
        if let Err(disagreement) = check_both(&data) {
            panic!("{}: {disagreement}", path.display());
        }
    }
}

#[test]
fn fixed_seed_inputs_agree_with_the_reference() {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for case in 0..300 {
        let len = 16 + case % 400;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        if let Err(disagreement) = check_both(&data) {
            panic!("case {case} ({data:?}): {disagreement}");
        }
    }
}

#[cfg(all(feature = "nats", not(loom)))]
#[test]
fn nats_frame_corpus_decodes_or_is_refused() {
    for (path, data) in fuzz_corpus::inputs("nats_frame") {
        if let Err(error) = kvroute::nats::fuzzing::decode_frame(&data) {
            panic!("{}: {error}", path.display());
        }
    }
    for frame in kvroute::nats::fuzzing::seed_frames() {
        kvroute::nats::fuzzing::decode_frame(&frame).expect("a seed round-trips");
    }
}

#[cfg(all(feature = "nats", not(loom)))]
#[test]
fn nats_snapshot_corpus_reassembles_what_the_views_believe() {
    for (path, data) in fuzz_corpus::inputs("nats_snapshot") {
        if let Err(error) = kvroute::nats::fuzzing::reassemble(&data) {
            panic!("{}: {error}", path.display());
        }
    }
}
