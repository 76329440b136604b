//! Dynamo's `RouterEvent` (`dynamo-kv-router` 1.6.1) in JSON and in named MessagePack, both ways.
//!
//! Dynamo's serde layout: `{"worker_id", "storage_tier", "event": {"event_id", "data", "dp_rank"}}`
//! with `storage_tier` one of `device`, `host_pinned`, `disk`, `external` (absent → `device`)
//! and `data` externally tagged: `{"stored": {"parent_hash", "start_position", "blocks":
//! [{"block_hash", "tokens_hash", "mm_extra_info"}]}}`, `{"removed": {"block_hashes"}}` or
//! `"cleared"`. Dynamo's MessagePack is `rmp_serde::to_vec_named` of the same (maps, not
//! tuples). Newer optional fields (`session_id`, `state_source`, multimodal info) are
//! accepted and dropped; an explicit `residency_domain` other than `worker` is refused, since
//! kvroute indexes workers only.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::event::{
    DpRank, KvEvent, KvEventData, LocalBlockHash, RouterEvent, SequenceHash, StorageTier,
    StoredBlock, WorkerId,
};

use super::WireError;

/// A Dynamo `RouterEvent` from its JSON.
///
/// ```
/// use kvroute::wire::{dynamo_from_json, dynamo_to_json};
/// use kvroute::{RouterEvent, StoredBlock, Worker};
///
/// let json = br#"{"worker_id":7,"storage_tier":"host_pinned","event":{"event_id":3,
///   "data":{"stored":{"parent_hash":null,"start_position":null,
///   "blocks":[{"block_hash":11,"tokens_hash":22,"mm_extra_info":null}]}},"dp_rank":1}}"#;
/// let event = dynamo_from_json(json)?;
/// assert_eq!(event.worker(), Worker::new(7, 1));
/// assert_eq!(event.tier, kvroute::StorageTier::HostPinned);
/// assert_eq!(dynamo_from_json(dynamo_to_json(&event).as_bytes())?, event);
/// # Ok::<(), kvroute::wire::WireError>(())
/// ```
pub fn dynamo_from_json(bytes: &[u8]) -> Result<RouterEvent, WireError> {
    serde_json::from_slice::<WireRouterEvent>(bytes)?.into_event()
}

/// A Dynamo `RouterEvent` from its named MessagePack (`rmp_serde::to_vec_named`).
pub fn dynamo_from_msgpack(bytes: &[u8]) -> Result<RouterEvent, WireError> {
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(32);
    WireRouterEvent::deserialize(&mut de)?.into_event()
}

/// `event` as Dynamo's JSON.
pub fn dynamo_to_json(event: &RouterEvent) -> String {
    // Plain structs of integers, strings and options: serialising them cannot fail.
    serde_json::to_string(&WireRouterEvent::from_event(event)).unwrap_or_default()
}

/// `event` as Dynamo's named MessagePack.
pub fn dynamo_to_msgpack(event: &RouterEvent) -> Vec<u8> {
    rmp_serde::to_vec_named(&WireRouterEvent::from_event(event)).unwrap_or_default()
}

#[derive(Serialize, Deserialize)]
struct WireRouterEvent {
    worker_id: u64,
    #[serde(default)]
    storage_tier: WireTier,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    residency_domain: Option<String>,
    event: WireKvEvent,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
enum WireTier {
    #[default]
    Device,
    HostPinned,
    Disk,
    External,
}

#[derive(Serialize, Deserialize)]
struct WireKvEvent {
    event_id: u64,
    data: WireData,
    #[serde(default)]
    dp_rank: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireData {
    Stored(WireStored),
    Removed(WireRemoved),
    Cleared,
}

#[derive(Serialize, Deserialize)]
struct WireStored {
    parent_hash: Option<u64>,
    #[serde(default)]
    start_position: Option<u32>,
    blocks: Vec<WireBlock>,
}

#[derive(Serialize, Deserialize)]
struct WireBlock {
    block_hash: u64,
    tokens_hash: u64,
    #[serde(default)]
    mm_extra_info: Option<Skipped>,
}

#[derive(Serialize, Deserialize)]
struct WireRemoved {
    block_hashes: Vec<u64>,
}

/// A field read past and never written (always serialised as absent, i.e. `null`).
struct Skipped;

impl<'de> Deserialize<'de> for Skipped {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Skipped)
    }
}

impl Serialize for Skipped {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_none()
    }
}

impl WireRouterEvent {
    fn into_event(self) -> Result<RouterEvent, WireError> {
        if let Some(domain) = self.residency_domain.filter(|d| d != "worker") {
            return Err(WireError::Unsupported(format!("residency domain {domain:?}")));
        }
        let data = match self.event.data {
            WireData::Stored(stored) => KvEventData::Stored {
                parent: stored.parent_hash.map(SequenceHash),
                blocks: stored
                    .blocks
                    .into_iter()
                    .map(|b| StoredBlock {
                        local: LocalBlockHash(b.tokens_hash),
                        hash: SequenceHash(b.block_hash),
                    })
                    .collect(),
            },
            WireData::Removed(removed) => KvEventData::Removed {
                blocks: removed.block_hashes.into_iter().map(SequenceHash).collect(),
            },
            WireData::Cleared => KvEventData::Cleared,
        };
        let tier = match self.storage_tier {
            WireTier::Device => StorageTier::Device,
            WireTier::HostPinned => StorageTier::HostPinned,
            WireTier::Disk => StorageTier::Disk,
            WireTier::External => StorageTier::External,
        };
        Ok(RouterEvent {
            worker_id: WorkerId(self.worker_id),
            tier,
            event: KvEvent {
                event_id: self.event.event_id,
                dp_rank: DpRank(self.event.dp_rank),
                data,
            },
        })
    }

    fn from_event(event: &RouterEvent) -> Self {
        let data = match &event.event.data {
            KvEventData::Stored { parent, blocks } => WireData::Stored(WireStored {
                parent_hash: parent.map(|p| p.0),
                start_position: None,
                blocks: blocks
                    .iter()
                    .map(|b| WireBlock {
                        block_hash: b.hash.0,
                        tokens_hash: b.local.0,
                        mm_extra_info: None,
                    })
                    .collect(),
            }),
            KvEventData::Removed { blocks } => WireData::Removed(WireRemoved {
                block_hashes: blocks.iter().map(|b| b.0).collect(),
            }),
            KvEventData::Cleared => WireData::Cleared,
        };
        let storage_tier = match event.tier {
            StorageTier::Device => WireTier::Device,
            StorageTier::HostPinned => WireTier::HostPinned,
            StorageTier::Disk => WireTier::Disk,
            StorageTier::External => WireTier::External,
        };
        WireRouterEvent {
            worker_id: event.worker_id.0,
            storage_tier,
            residency_domain: None,
            event: WireKvEvent {
                event_id: event.event.event_id,
                data,
                dp_rank: event.event.dp_rank.0,
            },
        }
    }
}
