//! The vLLM/SGLang decoder on arbitrary bytes: it must refuse or decode, never panic, and what
//! it decodes must hold together (every event numbered with the batch's seq, in its rank).
//!
//! `cargo +nightly fuzz run wire_vllm fuzz/corpus/wire_vllm` (seeded from tests/data/vllm).
#![no_main]

use kvroute::WorkerId;
use kvroute::wire::VllmDecoder;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut decoder = VllmDecoder::new(WorkerId(1)).with_default_dp_rank(3);
    if let Ok(batch) = decoder.decode_batch(9, data) {
        let rank = batch.dp_rank.unwrap_or(3);
        for event in &batch.events {
            assert_eq!(event.event.event_id, 9);
            assert_eq!(event.event.dp_rank.0, rank);
            assert!(event.block_ops() > 0);
        }
    }
    // The same bytes as a whole message: the first 8 bytes as seq, the rest as payload.
    if data.len() >= 8 {
        let frames: [&[u8]; 3] = [b"kv", &data[..8], &data[8..]];
        let _ = decoder.decode_message(&frames);
    }
});
