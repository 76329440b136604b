//! Our events as Dynamo's: `kvroute::RouterEvent` → `dynamo_kv_router::protocols::RouterEvent`.
//!
//! Field mapping: our `StoredBlock::local` (content hash) is Dynamo's `tokens_hash`, our
//! `StoredBlock::hash` (the engine's sequence hash) is its `block_hash`
//! (`ExternalSequenceBlockHash`), and our `parent` its `parent_hash`. Events are device-tier,
//! worker-owned (`RouterEvent::with_storage_tier`), with no multimodal data and no positions.

use dynamo_kv_router::protocols as dy;
use kvroute::{KvEventData, LocalBlockHash, RouterEvent, StorageTier, Worker};

/// Dynamo's copy of `event`.
pub fn to_dynamo(event: &RouterEvent) -> dy::RouterEvent {
    let data = match &event.event.data {
        KvEventData::Stored { parent, blocks } => {
            dy::KvCacheEventData::Stored(dy::KvCacheStoreData {
                parent_hash: parent.map(|p| dy::ExternalSequenceBlockHash(p.0)),
                start_position: None,
                blocks: blocks
                    .iter()
                    .map(|b| dy::KvCacheStoredBlockData {
                        block_hash: dy::ExternalSequenceBlockHash(b.hash.0),
                        tokens_hash: dy::LocalBlockHash(b.local.0),
                        mm_extra_info: None,
                    })
                    .collect(),
            })
        }
        KvEventData::Removed { blocks } => dy::KvCacheEventData::Removed(dy::KvCacheRemoveData {
            block_hashes: blocks.iter().map(|h| dy::ExternalSequenceBlockHash(h.0)).collect(),
        }),
        KvEventData::Cleared => dy::KvCacheEventData::Cleared,
    };
    let kv =
        dy::KvCacheEvent { event_id: event.event.event_id, data, dp_rank: event.event.dp_rank.0 };
    dy::RouterEvent::with_storage_tier(event.worker_id.0, kv, tier(event.tier))
}

fn tier(tier: StorageTier) -> dy::StorageTier {
    match tier {
        StorageTier::Device => dy::StorageTier::Device,
        StorageTier::HostPinned => dy::StorageTier::HostPinned,
        StorageTier::Disk => dy::StorageTier::Disk,
        StorageTier::External => dy::StorageTier::External,
    }
}

/// Dynamo's copy of a query.
pub fn query(query: &[LocalBlockHash]) -> Vec<dy::LocalBlockHash> {
    query.iter().map(|h| dy::LocalBlockHash(h.0)).collect()
}

/// Dynamo's scores as ours (unsorted).
pub fn scores(scores: &dy::OverlapScores) -> Vec<(Worker, u32)> {
    scores.scores.iter().map(|(w, &depth)| (Worker::new(w.worker_id, w.dp_rank), depth)).collect()
}
