//! Replays the fuzz target's check on stable: every input checked in under
//! `fuzz/corpus/index_ops/`, plus fixed-seed pseudo-random inputs.

#[allow(dead_code)] // this test uses `check` only
#[path = "../fuzz/fuzz_targets/index_ops_check.rs"]
mod index_ops_check;

use std::fs;
use std::path::Path;

#[test]
fn checked_in_corpus_agrees_with_the_reference() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/index_ops");
    let mut replayed = 0;
    for entry in fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|name| name.to_string_lossy().starts_with('.')) {
            continue;
        }
        let data = fs::read(&path).unwrap();
        if let Err(disagreement) = index_ops_check::check(&data) {
            panic!("{}: {disagreement}", path.display());
        }
        replayed += 1;
    }
    assert!(replayed > 0, "no corpus inputs in {}", dir.display());
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
        if let Err(disagreement) = index_ops_check::check(&data) {
            panic!("case {case} ({data:?}): {disagreement}");
        }
    }
}
