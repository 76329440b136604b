//! The checked-in inputs of a fuzz target, for the tests that replay them on stable.

use std::fs;
use std::path::{Path, PathBuf};

/// Every input under `fuzz/corpus/<target>/` (hidden files skipped), with its path; panics if
/// there is none, so a moved corpus cannot pass as an empty one.
pub fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut inputs = Vec::new();
    for entry in fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|name| name.to_string_lossy().starts_with('.')) {
            continue;
        }
        let data = fs::read(&path).unwrap();
        inputs.push((path, data));
    }
    assert!(!inputs.is_empty(), "no corpus inputs in {}", dir.display());
    inputs
}
