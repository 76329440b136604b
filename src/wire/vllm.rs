//! [`VllmDecoder`]: vLLM/SGLang KV event messages to [`RouterEvent`]s.

use std::collections::HashMap;

use crate::event::{KvEventData, RouterEvent, SequenceHash, StorageTier, StoredBlock, WorkerId};
use crate::hash::BlockHasher;

use super::WireError;
use super::vllm_raw::{RawBatch, RawEvent, RawHash};

/// Nesting deeper than this is refused (vLLM's deepest field, `extra_keys`, nests 3 levels):
/// bounds the decoder's stack on hostile input.
const MAX_DEPTH: usize = 32;

/// Salted hashers kept per decoder; past it the cache starts over (it only saves re-deriving).
const MAX_HASHERS: usize = 64;

/// One decoded ZMQ message: a batch of events, each numbered with the batch's sequence number.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodedBatch {
    /// The publisher's sequence number (every event of the batch carries it as its id).
    pub seq: u64,
    /// The publisher's timestamp (seconds since the epoch).
    pub ts: f64,
    /// The batch's data-parallel rank, if it names one.
    pub dp_rank: Option<u32>,
    /// The events, in publication order.
    pub events: Vec<RouterEvent>,
    /// Events deliberately left out: unknown event types, empty ones, another host's blocks
    /// (`locality` other than `LOCAL`), a secondary owner's (`ownership` set), and KV cache groups
    /// other than the first (`group_idx` > 0, e.g. a hybrid model's sliding-window layers).
    pub skipped: usize,
}

impl DecodedBatch {
    /// Block operations carried (stored plus removed blocks, one per `Cleared`).
    pub fn block_ops(&self) -> usize {
        self.events.iter().map(RouterEvent::block_ops).sum()
    }
}

/// Decodes one engine's KV event messages.
///
/// The wire format (vLLM's `ZmqEventPublisher`, SGLang's too) is a multipart message `[topic,
/// seq, payload]`: `seq` is 8 bytes big-endian, `payload` the MessagePack of `[ts, events,
/// data_parallel_rank]`. Each event is a map tagged by `type` (vLLM from 0.33 on) or a tuple
/// starting with its tag (older vLLM, SGLang): `BlockStored`, `BlockRemoved`,
/// `AllBlocksCleared`. Unknown fields and trailing tuple elements are skipped.
///
/// The mapping to kvroute's events:
/// - **block hashes** are the engine's own hashes ([`SequenceHash`]): 64-bit integers, signed
///   ones read as their two's-complement bits, or a digest's bytes (vLLM's default sha256) folded
///   to their **last 8 bytes read big-endian** — the very integer vLLM itself publishes with
///   `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, so both modes name a block alike;
/// - **local hashes** are computed from `token_ids` with [`BlockHasher`] (Dynamo-compatible) at
///   the event's own `block_size`, salted with its `lora_name` and `cache_salt`;
/// - **`medium`** gives the [`StorageTier`]: `GPU` or absent → `Device`, `CPU`/`CPU_PINNED` →
///   `HostPinned`, `STORAGE`/`DISK` → `Disk`, anything else → `External` (case-insensitive);
///   `AllBlocksCleared` clears the device tier;
/// - **`data_parallel_rank`** of the batch gives `dp_rank` (the decoder's default when absent);
/// - every event's **id** is the message's `seq`.
///
/// ```
/// use kvroute::wire::VllmDecoder;
/// use kvroute::{KvEventData, WorkerId};
///
/// // [ts, [{"type": "AllBlocksCleared"}], 2] as MessagePack.
/// let payload = [0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x81, 0xa4, b't', b'y', b'p', b'e',
///     0xb0, b'A', b'l', b'l', b'B', b'l', b'o', b'c', b'k', b's', b'C', b'l', b'e', b'a', b'r',
///     b'e', b'd', 0x02];
/// let mut decoder = VllmDecoder::new(WorkerId(7));
/// let batch = decoder.decode_message(&[&b"kv"[..], &5u64.to_be_bytes(), &payload])?;
/// assert_eq!((batch.seq, batch.dp_rank), (5, Some(2)));
/// assert_eq!(batch.events[0].event.data, KvEventData::Cleared);
/// assert_eq!(batch.events[0].event.event_id, 5);
/// assert!(decoder.decode_message(&[&b"kv"[..], &[1, 2, 3]]).is_err()); // typed, no panic
/// # Ok::<(), kvroute::wire::WireError>(())
/// ```
#[derive(Clone, Debug)]
pub struct VllmDecoder {
    worker: WorkerId,
    default_dp_rank: u32,
    hashers: HashMap<HasherKey, BlockHasher, ahash::RandomState>,
}

type HasherKey = (u32, Box<str>, Box<str>);

impl VllmDecoder {
    /// A decoder for the engine of `worker` (rank 0 when a batch names none).
    pub fn new(worker: WorkerId) -> Self {
        Self { worker, default_dp_rank: 0, hashers: HashMap::default() }
    }

    /// The rank of batches that name none (vLLM's publisher of rank r listens on port + r).
    pub fn with_default_dp_rank(mut self, dp_rank: u32) -> Self {
        self.default_dp_rank = dp_rank;
        self
    }

    /// The worker the decoded events are attributed to.
    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// Decodes a multipart message `[topic, seq, payload]`.
    pub fn decode_message<F: AsRef<[u8]>>(
        &mut self,
        frames: &[F],
    ) -> Result<DecodedBatch, WireError> {
        let [_topic, seq, payload] = frames else {
            return Err(WireError::FrameCount { got: frames.len() });
        };
        self.decode_batch(parse_seq(seq.as_ref())?, payload.as_ref())
    }

    /// Decodes a batch's MessagePack `payload`, numbering its events `seq`.
    pub fn decode_batch(&mut self, seq: u64, payload: &[u8]) -> Result<DecodedBatch, WireError> {
        let mut de = rmp_serde::Deserializer::from_read_ref(payload);
        de.set_max_depth(MAX_DEPTH);
        let raw: RawBatch<'_> = serde::Deserialize::deserialize(&mut de)?;
        let dp_rank = raw
            .dp_rank
            .map(|rank| u32::try_from(rank).map_err(|_| WireError::BadDpRank(rank)))
            .transpose()?;
        let mut batch = DecodedBatch { seq, ts: raw.ts, dp_rank, ..DecodedBatch::default() };
        let rank = dp_rank.unwrap_or(self.default_dp_rank);
        for event in raw.events {
            match self.convert(event)? {
                Some((tier, data)) => {
                    let worker = crate::event::Worker { id: self.worker, dp_rank: rank.into() };
                    let mut event = RouterEvent::new(worker, seq, data);
                    event.tier = tier;
                    batch.events.push(event);
                }
                None => batch.skipped += 1,
            }
        }
        Ok(batch)
    }

    /// One event's tier and data; `None` when it is deliberately left out.
    fn convert(
        &mut self,
        event: RawEvent<'_>,
    ) -> Result<Option<(StorageTier, KvEventData)>, WireError> {
        let local = event.locality.is_none_or(|l| l.eq_ignore_ascii_case("LOCAL"));
        if !local || event.ownership.is_some() || event.group_idx.is_some_and(|g| g > 0) {
            return Ok(None);
        }
        let tier = tier_of(event.medium);
        match event.tag {
            Some("BlockStored") => self.stored(event).map(|data| data.map(|d| (tier, d))),
            Some("BlockRemoved") => {
                let hashes = event.block_hashes.ok_or(missing("BlockRemoved", "block_hashes"))?;
                if hashes.is_empty() {
                    return Ok(None);
                }
                let blocks = hashes.into_iter().map(fold).collect::<Result<_, _>>()?;
                Ok(Some((tier, KvEventData::Removed { blocks })))
            }
            Some("AllBlocksCleared") => Ok(Some((StorageTier::Device, KvEventData::Cleared))),
            Some(_) => Ok(None),
            None => Err(missing("event", "type")),
        }
    }

    fn stored(&mut self, event: RawEvent<'_>) -> Result<Option<KvEventData>, WireError> {
        const TAG: &str = "BlockStored";
        let hashes = event.block_hashes.ok_or(missing(TAG, "block_hashes"))?;
        let tokens = event.token_ids.ok_or(missing(TAG, "token_ids"))?;
        let size = event.block_size.ok_or(missing(TAG, "block_size"))?;
        let block_size =
            u32::try_from(size).ok().filter(|&s| s > 0).ok_or(WireError::BadBlockSize(size))?;
        let parent = event.parent.map(fold).transpose()?;
        if tokens.len() as u64 != hashes.len() as u64 * u64::from(block_size) {
            return Err(WireError::TokenCount {
                tokens: tokens.len(),
                blocks: hashes.len(),
                block_size,
            });
        }
        if hashes.is_empty() {
            return Ok(None);
        }
        let hasher =
            self.hasher(block_size, event.lora_name.unwrap_or(""), event.cache_salt.unwrap_or(""))?;
        let local = hasher.local_hashes(&tokens);
        let blocks = local
            .into_iter()
            .zip(hashes)
            .map(|(local, hash)| Ok(StoredBlock { local, hash: fold(hash)? }))
            .collect::<Result<_, WireError>>()?;
        Ok(Some(KvEventData::Stored { parent, blocks }))
    }

    fn hasher(
        &mut self,
        block_size: u32,
        lora: &str,
        salt: &str,
    ) -> Result<BlockHasher, WireError> {
        let key: HasherKey = (block_size, lora.into(), salt.into());
        if let Some(hasher) = self.hashers.get(&key) {
            return Ok(*hasher);
        }
        if self.hashers.len() >= MAX_HASHERS {
            self.hashers.clear();
        }
        let hasher = BlockHasher::new(block_size)
            .map_err(|_| WireError::BadBlockSize(block_size.into()))?
            .with_lora(lora)
            .with_namespace(salt);
        self.hashers.insert(key, hasher);
        Ok(hasher)
    }
}

/// The 8-byte big-endian sequence frame.
pub fn parse_seq(frame: &[u8]) -> Result<u64, WireError> {
    let bytes: [u8; 8] = frame.try_into().map_err(|_| WireError::SeqLength { got: frame.len() })?;
    Ok(u64::from_be_bytes(bytes))
}

/// The storage tier a `medium` names.
pub fn tier_of(medium: Option<&str>) -> StorageTier {
    let Some(medium) = medium else { return StorageTier::Device };
    let is = |name: &str| medium.eq_ignore_ascii_case(name);
    if is("GPU") {
        StorageTier::Device
    } else if is("CPU") || is("CPU_PINNED") {
        StorageTier::HostPinned
    } else if is("STORAGE") || is("DISK") {
        StorageTier::Disk
    } else {
        StorageTier::External
    }
}

/// A block hash as 64 bits: integers as they are, a digest's last 8 bytes big-endian (shorter
/// digests zero-extended), as `int.from_bytes(digest, "big") & (2**64 - 1)` in vLLM.
fn fold(hash: RawHash<'_>) -> Result<SequenceHash, WireError> {
    match hash {
        RawHash::Int(value) => Ok(SequenceHash(value)),
        RawHash::Bytes(bytes) if (1..=64).contains(&bytes.len()) => {
            let tail = &bytes[bytes.len().saturating_sub(8)..];
            Ok(SequenceHash(tail.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))))
        }
        RawHash::Bytes(bytes) => Err(WireError::BlockHashLength(bytes.len())),
    }
}

fn missing(event: &'static str, field: &'static str) -> WireError {
    WireError::MissingField { event, field }
}
