//! The vLLM decoder on hand-made payloads: every refusal is typed, odd-but-valid shapes pass.

use serde_json::{Value, json};

use super::*;
use crate::event::{KvEventData, SequenceHash, StorageTier, WorkerId};

fn msgpack(value: &Value) -> Vec<u8> {
    rmp_serde::to_vec(value).unwrap()
}

fn decode(value: Value) -> Result<DecodedBatch, WireError> {
    VllmDecoder::new(WorkerId(1)).decode_batch(3, &msgpack(&value))
}

fn stored(fields: Value) -> Value {
    let mut event = json!({"type": "BlockStored", "block_hashes": [5, 6],
        "parent_block_hash": null, "token_ids": [1, 2, 3, 4], "block_size": 2});
    event.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
    event
}

#[test]
fn frames_and_sequence_numbers_are_checked() {
    let mut decoder = VllmDecoder::new(WorkerId(1));
    let two: [&[u8]; 2] = [b"t", &[0; 8]];
    assert_eq!(decoder.decode_message(&two), Err(WireError::FrameCount { got: 2 }));
    let short: [&[u8]; 3] = [b"t", &[0; 7], &[]];
    assert_eq!(decoder.decode_message(&short), Err(WireError::SeqLength { got: 7 }));
    assert_eq!(parse_seq(&[0, 0, 0, 0, 0, 0, 1, 2]), Ok(258));
}

#[test]
fn malformed_shapes_are_typed_errors() {
    assert!(matches!(decode(json!({"ts": 1})), Err(WireError::Msgpack(_))));
    assert!(matches!(decode(json!([1.0])), Err(WireError::Msgpack(_))));
    assert!(matches!(decode(json!([1.0, [7]])), Err(WireError::Msgpack(_))));
    assert!(matches!(
        decode(json!([1.0, [stored(json!({"token_ids": [-1, 2, 3, 4]}))]])),
        Err(WireError::Msgpack(_))
    ));
    assert_eq!(
        decode(json!([1.0, [{"block_hashes": [1]}]])),
        Err(WireError::MissingField { event: "event", field: "type" })
    );
    let no_tokens = json!({"type": "BlockStored", "block_hashes": [1], "block_size": 2});
    assert_eq!(
        decode(json!([1.0, [no_tokens]])),
        Err(WireError::MissingField { event: "BlockStored", field: "token_ids" })
    );
    assert_eq!(
        decode(json!([1.0, [stored(json!({"block_size": 0}))]])),
        Err(WireError::BadBlockSize(0))
    );
    assert_eq!(
        decode(json!([1.0, [stored(json!({"block_size": 1u64 << 40}))]])),
        Err(WireError::BadBlockSize(1 << 40))
    );
    assert_eq!(
        decode(json!([1.0, [stored(json!({"token_ids": [1, 2, 3]}))]])),
        Err(WireError::TokenCount { tokens: 3, blocks: 2, block_size: 2 })
    );
    assert_eq!(decode(json!([1.0, [], -1])), Err(WireError::BadDpRank(-1)));
    assert_eq!(decode(json!([1.0, [], 1u64 << 33])), Err(WireError::BadDpRank(1 << 33)));
}

#[test]
fn unknown_fields_types_and_trailing_elements_are_accepted() {
    let batch = decode(json!([2.5, [
        stored(json!({"brand_new_field": {"nested": [1, 2]}, "medium": "cpu"})),
        {"type": "SomethingNew", "x": 1},
        ["BlockRemoved", [5], "GPU", null, null, null, "future", [1, 2, 3]],
        ["AllBlocksCleared", "future"],
    ], 4, "future batch field"]))
    .unwrap();
    assert_eq!((batch.seq, batch.ts, batch.dp_rank, batch.skipped), (3, 2.5, Some(4), 1));
    assert_eq!(batch.events.len(), 3);
    assert_eq!(batch.events[0].tier, StorageTier::HostPinned);
    assert_eq!(batch.events[1].event.data, KvEventData::Removed { blocks: vec![SequenceHash(5)] });
    assert_eq!(batch.events[2].event.data, KvEventData::Cleared);
    assert!(batch.events.iter().all(|e| e.event.event_id == 3 && e.event.dp_rank.0 == 4));
    assert_eq!(batch.block_ops(), 4);
    // A batch without its rank takes the decoder's default.
    let mut decoder = VllmDecoder::new(WorkerId(1)).with_default_dp_rank(6);
    let batch = decoder.decode_batch(0, &msgpack(&json!([0, [stored(json!({}))]]))).unwrap();
    assert_eq!((batch.dp_rank, batch.events[0].event.dp_rank.0), (None, 6));
}

/// `[0.0, [["BlockRemoved", [bin(hash)]]]]` by hand (serde_json has no bytes).
fn removed_bytes(hash: &[u8]) -> Vec<u8> {
    let mut out = vec![0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xac];
    out.extend_from_slice(b"BlockRemoved");
    out.extend_from_slice(&[0x91, 0xc4, hash.len() as u8]);
    out.extend_from_slice(hash);
    out
}

#[test]
fn digests_fold_to_their_last_eight_bytes_big_endian() {
    let mut decoder = VllmDecoder::new(WorkerId(1));
    let removed = |decoder: &mut VllmDecoder, hash: &[u8]| {
        decoder.decode_batch(0, &removed_bytes(hash)).map(|b| b.events[0].event.data.clone())
    };
    let digest: Vec<u8> = (1..=32).collect();
    assert_eq!(
        removed(&mut decoder, &digest),
        Ok(KvEventData::Removed { blocks: vec![SequenceHash(0x191a_1b1c_1d1e_1f20)] })
    );
    assert_eq!(
        removed(&mut decoder, &[1, 2, 3]),
        Ok(KvEventData::Removed { blocks: vec![SequenceHash(0x01_0203)] })
    );
    assert_eq!(removed(&mut decoder, &[]), Err(WireError::BlockHashLength(0)));
    assert_eq!(removed(&mut decoder, &[7; 65]), Err(WireError::BlockHashLength(65)));
}

#[test]
fn media_map_to_tiers() {
    let cases = [
        (None, StorageTier::Device),
        (Some("GPU"), StorageTier::Device),
        (Some("gpu"), StorageTier::Device),
        (Some("CPU"), StorageTier::HostPinned),
        (Some("CPU_PINNED"), StorageTier::HostPinned),
        (Some("STORAGE"), StorageTier::Disk),
        (Some("DISK"), StorageTier::Disk),
        (Some("OBJ"), StorageTier::External),
        (Some(""), StorageTier::External),
    ];
    for (medium, tier) in cases {
        assert_eq!(tier_of(medium), tier, "{medium:?}");
    }
}

#[test]
fn hostile_nesting_and_lengths_are_refused_without_overflow() {
    // 100,000 nested arrays inside an unknown field: the nesting limit refuses them.
    let mut deep = vec![0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x81, 0xa1, b'x'];
    deep.extend(std::iter::repeat_n(0x91, 100_000));
    deep.push(0xc0);
    assert!(matches!(
        VllmDecoder::new(WorkerId(1)).decode_batch(0, &deep),
        Err(WireError::Msgpack(_))
    ));
    // An array header claiming 4 billion events, and nothing after it.
    let huge = [0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff];
    assert!(matches!(
        VllmDecoder::new(WorkerId(1)).decode_batch(0, &huge),
        Err(WireError::Msgpack(_))
    ));
}
