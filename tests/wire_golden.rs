//! The wire decoders on bytes made by the real producers: vLLM's own event classes
//! (`scripts/make_vllm_golden.py`, `tests/data/vllm/`, README there says which vLLM) and
//! Dynamo's own serialisers (`compare/src/bin/dynamo_fixtures.rs`, `tests/data/dynamo/`).
//! Every decoded event is checked exactly against what the producer was given.

use std::path::PathBuf;

use kvroute::hash::BlockHasher;
use kvroute::wire::{
    VllmDecoder, WireError, dynamo_from_json, dynamo_from_msgpack, dynamo_to_json,
    dynamo_to_msgpack,
};
use kvroute::{
    DpRank, KvEvent, KvEventData, RouterEvent, SequenceHash, StorageTier, StoredBlock, Worker,
    WorkerId,
};
use serde_json::Value;

const WORKER: WorkerId = WorkerId(42);

fn data(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(dir)
}

fn read(dir: &str, file: &str) -> Vec<u8> {
    std::fs::read(data(dir).join(file)).unwrap_or_else(|e| panic!("{dir}/{file}: {e}"))
}

/// The tier the issue's table gives a medium (written out here, not taken from the decoder).
fn tier(medium: &Value) -> StorageTier {
    match medium.as_str() {
        None | Some("GPU") => StorageTier::Device,
        Some("CPU" | "CPU_PINNED") => StorageTier::HostPinned,
        Some("STORAGE" | "DISK") => StorageTier::Disk,
        Some(_) => StorageTier::External,
    }
}

fn hashes(value: &Value) -> Vec<SequenceHash> {
    value.as_array().unwrap().iter().map(|h| SequenceHash(h.as_u64().unwrap())).collect()
}

/// The event the manifest says the producer published.
fn expected(event: &Value, seq: u64, dp_rank: u32) -> RouterEvent {
    let worker = Worker { id: WORKER, dp_rank: DpRank(dp_rank) };
    let data = match event["type"].as_str().unwrap() {
        "BlockStored" => {
            let tokens: Vec<u32> = event["token_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect();
            let hasher = BlockHasher::new(event["block_size"].as_u64().unwrap() as u32)
                .unwrap()
                .with_lora(event["lora_name"].as_str().unwrap_or(""));
            let local = hasher.local_hashes(&tokens);
            let engine = hashes(&event["block_hashes"]);
            assert_eq!(local.len(), engine.len());
            KvEventData::Stored {
                parent: event["parent"].as_u64().map(SequenceHash),
                blocks: local
                    .into_iter()
                    .zip(engine)
                    .map(|(local, hash)| StoredBlock { local, hash })
                    .collect(),
            }
        }
        "BlockRemoved" => KvEventData::Removed { blocks: hashes(&event["block_hashes"]) },
        "AllBlocksCleared" => KvEventData::Cleared,
        other => panic!("unknown type {other}"),
    };
    let mut out = RouterEvent::new(worker, seq, data);
    out.tier = tier(&event["medium"]);
    out
}

#[test]
fn vllm_golden_batches_decode_to_what_vllm_was_given() {
    let manifest: Value = serde_json::from_slice(&read("vllm", "manifest.json")).unwrap();
    let batches = manifest["batches"].as_array().unwrap();
    assert!(batches.len() >= 15, "the golden set is complete");
    let mut decoder = VllmDecoder::new(WORKER);
    let (mut map_events, mut tuple_events) = (0, 0);
    for batch in batches {
        let name = batch["name"].as_str().unwrap();
        let frames = [
            read("vllm", &format!("{name}.topic")),
            read("vllm", &format!("{name}.seq")),
            read("vllm", &format!("{name}.msgpack")),
        ];
        let decoded = decoder.decode_message(&frames).unwrap_or_else(|e| panic!("{name}: {e}"));
        let seq = batch["seq"].as_u64().unwrap();
        let dp_rank = batch["dp_rank"].as_u64().map(|r| r as u32);
        assert_eq!(decoded.seq, seq, "{name}");
        assert_eq!(decoded.ts, batch["ts"].as_f64().unwrap(), "{name}");
        assert_eq!(decoded.dp_rank, dp_rank, "{name}");
        assert_eq!(decoded.skipped as u64, batch["skipped"].as_u64().unwrap(), "{name}");
        let want: Vec<RouterEvent> = batch["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| expected(e, seq, dp_rank.unwrap_or(0)))
            .collect();
        assert_eq!(decoded.events, want, "{name}");
        if name.starts_with("map_") {
            map_events += want.len();
        } else {
            tuple_events += want.len();
        }
    }
    assert!(map_events >= 15 && tuple_events >= 15, "{map_events} map, {tuple_events} tuple");
}

#[test]
fn vllm_golden_specifics() {
    let mut decoder = VllmDecoder::new(WORKER);
    let decode = |decoder: &mut VllmDecoder, name: &str| {
        decoder.decode_batch(9, &read("vllm", &format!("{name}.msgpack"))).unwrap()
    };
    // sha256 digests fold to vLLM's own int-mode integer: the last 8 bytes, big-endian.
    let sha = decode(&mut decoder, "map_sha256_hashes");
    let KvEventData::Stored { blocks, .. } = &sha.events[0].event.data else { panic!() };
    assert_eq!(blocks[0].hash, SequenceHash(sha_tail("a")));
    // Signed hashes are their two's-complement bits.
    let signed = decode(&mut decoder, "map_signed_hashes");
    let KvEventData::Stored { blocks, .. } = &signed.events[0].event.data else { panic!() };
    assert_eq!(blocks[0].hash, SequenceHash(u64::MAX));
    assert_eq!(blocks[1].hash, SequenceHash(1 << 63));
    // LoRA salts the local hashes: the all-fields event differs from the same tokens unsalted.
    let lora = decode(&mut decoder, "map_all_fields");
    let KvEventData::Stored { blocks, parent } = &lora.events[0].event.data else { panic!() };
    assert_eq!(*parent, Some(SequenceHash(900)));
    let plain = BlockHasher::new(4).unwrap().local_hashes(&(100..108).collect::<Vec<u32>>());
    assert_ne!(blocks[0].local, plain[0]);
    // SGLang's shape carries no lora_name: unsalted.
    let sglang = decode(&mut decoder, "tuple_sglang_all_fields");
    let KvEventData::Stored { blocks, .. } = &sglang.events[0].event.data else { panic!() };
    assert_eq!(blocks[0].local, plain[0]);
}

/// The last 8 bytes of sha256(`text`), big-endian, computed from a known digest table.
fn sha_tail(text: &str) -> u64 {
    match text {
        // sha256("a") = ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb
        "a" => 0xb980_7785_afee_48bb,
        _ => unreachable!(),
    }
}

#[test]
fn every_truncation_of_every_golden_payload_is_refused_or_decoded_without_panic() {
    let manifest: Value = serde_json::from_slice(&read("vllm", "manifest.json")).unwrap();
    let mut decoder = VllmDecoder::new(WORKER);
    for batch in manifest["batches"].as_array().unwrap() {
        let payload = read("vllm", &format!("{}.msgpack", batch["name"].as_str().unwrap()));
        for cut in 0..payload.len() {
            assert!(decoder.decode_batch(0, &payload[..cut]).is_err(), "cut at {cut} decoded");
        }
        for at in 0..payload.len() {
            let mut flipped = payload.clone();
            flipped[at] ^= 0xff;
            let _ = decoder.decode_batch(0, &flipped);
        }
    }
}

/// What `compare/src/bin/dynamo_fixtures.rs` gave Dynamo's serialisers.
fn dynamo_cases() -> Vec<(&'static str, RouterEvent)> {
    let event = |worker: u64, tier, event_id, dp_rank, data| RouterEvent {
        worker_id: WorkerId(worker),
        tier,
        event: KvEvent { event_id, dp_rank: DpRank(dp_rank), data },
    };
    vec![
        (
            "stored_root",
            event(
                7,
                StorageTier::Device,
                1,
                0,
                KvEventData::Stored {
                    parent: None,
                    blocks: vec![StoredBlock::new(101, 11), StoredBlock::new(102, 12)],
                },
            ),
        ),
        (
            "stored_child_host_pinned",
            event(
                7,
                StorageTier::HostPinned,
                2,
                1,
                KvEventData::Stored {
                    parent: Some(SequenceHash(12)),
                    blocks: vec![StoredBlock::new(103, 13)],
                },
            ),
        ),
        (
            "removed_disk",
            event(
                8,
                StorageTier::Disk,
                3,
                2,
                KvEventData::Removed { blocks: vec![SequenceHash(u64::MAX), SequenceHash(5)] },
            ),
        ),
        ("cleared_external", event(9, StorageTier::External, 4, 0, KvEventData::Cleared)),
    ]
}

#[test]
fn dynamo_router_events_decode_from_dynamos_own_bytes_and_round_trip() {
    for (name, want) in dynamo_cases() {
        let json = read("dynamo", &format!("{name}.json"));
        let msgpack = read("dynamo", &format!("{name}.msgpack"));
        assert_eq!(dynamo_from_json(&json).unwrap(), want, "{name} json");
        assert_eq!(dynamo_from_msgpack(&msgpack).unwrap(), want, "{name} msgpack");
        assert_eq!(dynamo_from_json(dynamo_to_json(&want).as_bytes()).unwrap(), want);
        assert_eq!(dynamo_from_msgpack(&dynamo_to_msgpack(&want)).unwrap(), want);
        for cut in 0..msgpack.len() {
            assert!(dynamo_from_msgpack(&msgpack[..cut]).is_err());
        }
        for cut in 0..json.len() {
            assert!(dynamo_from_json(&json[..cut]).is_err());
        }
    }
    let owner = br#"{"worker_id":1,"residency_domain":"cache_owner","event":{"event_id":1,"data":"cleared"}}"#;
    assert!(matches!(dynamo_from_json(owner), Err(WireError::Unsupported(_))));
}
