//! Writes Dynamo `RouterEvent`s as Dynamo itself serialises them (serde_json, and
//! `rmp_serde::to_vec_named` as its NATS path does) to `tests/data/dynamo/`, for kvroute's
//! wire decoder tests (`tests/wire_golden.rs` holds the matching expectations).
//!
//! `cargo run --release -p kvroute-compare --bin dynamo_fixtures [-- OUT_DIR]`

use std::path::PathBuf;

use dynamo_kv_router::protocols::{
    ExternalSequenceBlockHash, KvCacheEvent, KvCacheEventData, KvCacheRemoveData, KvCacheStoreData,
    KvCacheStoredBlockData, LocalBlockHash, RouterEvent, StorageTier,
};

fn stored(parent: Option<u64>, blocks: &[(u64, u64)]) -> KvCacheEventData {
    KvCacheEventData::Stored(KvCacheStoreData {
        parent_hash: parent.map(ExternalSequenceBlockHash),
        start_position: None,
        blocks: blocks
            .iter()
            .map(|&(hash, local)| KvCacheStoredBlockData {
                block_hash: ExternalSequenceBlockHash(hash),
                tokens_hash: LocalBlockHash(local),
                mm_extra_info: None,
            })
            .collect(),
    })
}

fn main() {
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/dynamo"));
    std::fs::create_dir_all(&out).expect("create the output directory");
    let event = |event_id, data, dp_rank| KvCacheEvent { event_id, data, dp_rank };
    let cases: Vec<(&str, RouterEvent)> = vec![
        ("stored_root", RouterEvent::new(7, event(1, stored(None, &[(11, 101), (12, 102)]), 0))),
        (
            "stored_child_host_pinned",
            RouterEvent::with_storage_tier(
                7,
                event(2, stored(Some(12), &[(13, 103)]), 1),
                StorageTier::HostPinned,
            )
            .with_session_id("session-1"),
        ),
        (
            "removed_disk",
            RouterEvent::with_storage_tier(
                8,
                event(
                    3,
                    KvCacheEventData::Removed(KvCacheRemoveData {
                        block_hashes: vec![
                            ExternalSequenceBlockHash(u64::MAX),
                            ExternalSequenceBlockHash(5),
                        ],
                    }),
                    2,
                ),
                StorageTier::Disk,
            ),
        ),
        (
            "cleared_external",
            RouterEvent::with_storage_tier(
                9,
                event(4, KvCacheEventData::Cleared, 0),
                StorageTier::External,
            ),
        ),
    ];
    for (name, event) in &cases {
        let json = serde_json::to_vec(event).expect("serialise to JSON");
        std::fs::write(out.join(format!("{name}.json")), json).expect("write JSON");
        let msgpack = rmp_serde::to_vec_named(event).expect("serialise to msgpack");
        std::fs::write(out.join(format!("{name}.msgpack")), msgpack).expect("write msgpack");
    }
    println!("{} events in {}", cases.len(), out.display());
}
