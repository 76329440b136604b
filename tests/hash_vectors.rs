//! Golden vectors computed with `dynamo-kv-router` 1.6.1: our hashing must match byte for byte.

use kvroute::hash::BlockHasher;
use serde::Deserialize;
use serde::de::IgnoredAny;

const VECTORS: &str = include_str!("data/dynamo_hash_vectors.json");

#[derive(Deserialize)]
struct Vectors {
    source: String,
    cases: Vec<Case>,
}

/// One multimodal object of a block: its hash and its placeholder ranges inside the block (the
/// ranges do not enter the hash).
#[derive(Deserialize)]
struct MmObject(u64, IgnoredAny);

#[derive(Deserialize)]
struct Case {
    tokens: Vec<u32>,
    block_size: u32,
    lora_name: Option<String>,
    cache_namespace: Option<String>,
    /// Per block: `None` or the block's multimodal objects.
    mm: Option<Vec<Option<Vec<MmObject>>>>,
    local_hashes: Vec<u64>,
    sequence_hashes: Vec<u64>,
}

impl Case {
    /// The `mm_hash` values of each block, as `BlockHasher::hash_request_mm` takes them.
    fn block_mm(&self) -> Vec<Vec<u64>> {
        let Some(blocks) = &self.mm else { return Vec::new() };
        blocks.iter().map(|block| block.iter().flatten().map(|obj| obj.0).collect()).collect()
    }
}

#[test]
fn every_dynamo_vector_matches() {
    let vectors: Vectors = serde_json::from_str(VECTORS).expect("vector file parses");
    assert!(vectors.source.contains("dynamo-kv-router 1.6.1"), "source: {}", vectors.source);

    let mut checked = 0;
    let (mut with_lora, mut with_namespace, mut with_mm) = (0, 0, 0);
    for (i, case) in vectors.cases.iter().enumerate() {
        let lora = case.lora_name.as_deref().unwrap_or("");
        let namespace = case.cache_namespace.as_deref().unwrap_or("");
        let hasher = BlockHasher::new(case.block_size)
            .expect("vector block sizes are positive")
            .with_lora(lora)
            .with_namespace(namespace);
        let block_mm = case.block_mm();
        let hashes = hasher.hash_request_mm(&case.tokens, &block_mm);

        let local: Vec<u64> = hashes.local.iter().map(|h| h.0).collect();
        let sequence: Vec<u64> = hashes.sequence.iter().map(|h| h.0).collect();
        assert_eq!(local, case.local_hashes, "case {i}: local hashes");
        assert_eq!(sequence, case.sequence_hashes, "case {i}: sequence hashes");

        checked += 1;
        with_lora += usize::from(!lora.is_empty());
        with_namespace += usize::from(!namespace.is_empty());
        with_mm += usize::from(block_mm.iter().any(|mm| !mm.is_empty()));
    }
    eprintln!(
        "{checked} Dynamo hash vectors matched ({with_lora} with LoRA, \
         {with_namespace} with namespace, {with_mm} multimodal)"
    );
    // The file covers every salt and multimodal; an emptied or truncated file must not pass.
    assert_eq!(checked, vectors.cases.len());
    assert!(checked >= 10, "only {checked} vectors");
    assert!(with_lora >= 1 && with_namespace >= 1 && with_mm >= 1);
}

#[test]
fn multimodal_vector_differs_from_text_only() {
    // Guards the test above: the multimodal case really depends on its mm hashes.
    let vectors: Vectors = serde_json::from_str(VECTORS).expect("vector file parses");
    let case = vectors.cases.iter().find(|c| c.mm.is_some()).expect("a multimodal vector");
    let hasher = BlockHasher::new(case.block_size).expect("positive block size");
    let text_only: Vec<u64> = hasher.local_hashes(&case.tokens).iter().map(|h| h.0).collect();
    assert_eq!(text_only.len(), case.local_hashes.len());
    assert_ne!(text_only, case.local_hashes);
}
