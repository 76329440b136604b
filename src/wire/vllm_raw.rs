//! The vLLM/SGLang event batch as it is on the wire, before validation: serde visitors that
//! take each event as a map tagged by `type` or as a positional tuple, keep the fields kvroute
//! uses and skip the rest (unknown keys, trailing tuple elements) unread.
//!
//! Nothing here judges the values: missing fields, block sizes and hash lengths are checked by
//! the decoder ([`super::vllm`]), which turns them into typed errors.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// `[ts, events, data_parallel_rank]`; a shorter array omits the rank, a longer one carries
/// fields a newer producer added (skipped).
#[derive(Debug, Default)]
pub(crate) struct RawBatch<'a> {
    pub ts: f64,
    pub events: Vec<RawEvent<'a>>,
    pub dp_rank: Option<i64>,
}

/// A block hash as sent: an integer (signed or unsigned) or a digest's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawHash<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

/// One event's fields that kvroute reads; `None` where the producer left them out.
#[derive(Debug, Default)]
pub(crate) struct RawEvent<'a> {
    pub tag: Option<&'a str>,
    pub block_hashes: Option<Vec<RawHash<'a>>>,
    pub parent: Option<RawHash<'a>>,
    pub token_ids: Option<Vec<u32>>,
    pub block_size: Option<u64>,
    pub medium: Option<&'a str>,
    pub lora_name: Option<&'a str>,
    pub cache_salt: Option<&'a str>,
    pub group_idx: Option<u64>,
    pub locality: Option<&'a str>,
    pub ownership: Option<&'a str>,
}

impl<'de: 'a, 'a> Deserialize<'de> for RawBatch<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BatchVisitor;
        impl<'de> Visitor<'de> for BatchVisitor {
            type Value = RawBatch<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event batch [ts, events, data_parallel_rank]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let ts = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let events =
                    seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                let dp_rank = seq.next_element::<Option<i64>>()?.flatten();
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(RawBatch { ts, events, dp_rank })
            }
        }
        deserializer.deserialize_seq(BatchVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawHash<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HashVisitor;
        impl<'de> Visitor<'de> for HashVisitor {
            type Value = RawHash<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a block hash (a 64-bit integer or a digest's bytes)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawHash::Int(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                // A signed hash is the same 64 bits read as unsigned (Dynamo's reading too).
                Ok(RawHash::Int(v as u64))
            }
            fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
                Ok(RawHash::Bytes(v))
            }
        }
        deserializer.deserialize_any(HashVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawEvent<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(EventVisitor)
    }
}

struct EventVisitor;

/// Reads the next tuple element into `slot`; false once the tuple has ended.
fn next_into<'de, A, T>(seq: &mut A, slot: &mut Option<T>) -> Result<bool, A::Error>
where
    A: SeqAccess<'de>,
    T: Deserialize<'de>,
{
    match seq.next_element::<Option<T>>()? {
        Some(value) => {
            *slot = value;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Skips one tuple element; false once the tuple has ended.
fn skip<'de, A: SeqAccess<'de>>(seq: &mut A) -> Result<bool, A::Error> {
    Ok(seq.next_element::<IgnoredAny>()?.is_some())
}

impl<'de> Visitor<'de> for EventVisitor {
    type Value = RawEvent<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a KV event as a map tagged by `type` or a tuple starting with its tag")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut event = RawEvent::default();
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "type" => event.tag = map.next_value()?,
                "block_hashes" => event.block_hashes = map.next_value()?,
                "parent_block_hash" => event.parent = map.next_value()?,
                "token_ids" => event.token_ids = map.next_value()?,
                "block_size" => event.block_size = map.next_value()?,
                "medium" => event.medium = map.next_value()?,
                "lora_name" => event.lora_name = map.next_value()?,
                "cache_salt" => event.cache_salt = map.next_value()?,
                "group_idx" => event.group_idx = map.next_value()?,
                "locality" => event.locality = map.next_value()?,
                "ownership" => event.ownership = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(event)
    }

    /// vLLM's field order: `BlockStored` is `[tag, block_hashes, parent_block_hash, token_ids,
    /// block_size, lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
    /// kv_cache_spec_sliding_window, locality, ownership, …]`, `BlockRemoved` is `[tag,
    /// block_hashes, medium, group_idx, locality, ownership, …]`. A tuple may end after any
    /// field (SGLang's `BlockStored` ends at `lora_id`); later elements are skipped.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut event = RawEvent::default();
        if !next_into(&mut seq, &mut event.tag)? {
            return Ok(event);
        }
        let e = &mut event;
        let _ = match e.tag {
            Some("BlockStored") => {
                next_into(&mut seq, &mut e.block_hashes)?
                    && next_into(&mut seq, &mut e.parent)?
                    && next_into(&mut seq, &mut e.token_ids)?
                    && next_into(&mut seq, &mut e.block_size)?
                    && skip(&mut seq)? // lora_id: superseded by lora_name
                    && next_into(&mut seq, &mut e.medium)?
                    && next_into(&mut seq, &mut e.lora_name)?
                    && skip(&mut seq)? // extra_keys
                    && next_into(&mut seq, &mut e.group_idx)?
                    && skip(&mut seq)? // kv_cache_spec_kind
                    && skip(&mut seq)? // kv_cache_spec_sliding_window
                    && next_into(&mut seq, &mut e.locality)?
                    && next_into(&mut seq, &mut e.ownership)?
            }
            Some("BlockRemoved") => {
                next_into(&mut seq, &mut e.block_hashes)?
                    && next_into(&mut seq, &mut e.medium)?
                    && next_into(&mut seq, &mut e.group_idx)?
                    && next_into(&mut seq, &mut e.locality)?
                    && next_into(&mut seq, &mut e.ownership)?
            }
            _ => true,
        };
        while skip(&mut seq)? {}
        Ok(event)
    }
}
