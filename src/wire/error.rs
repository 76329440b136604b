//! Why a payload could not be decoded.

use std::fmt;

/// A payload that could not be decoded. Decoding never panics: every malformed input ends here.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// A ZMQ message without the `[topic, seq, payload]` frames.
    FrameCount {
        /// The frames received.
        got: usize,
    },
    /// The sequence frame is not 8 bytes.
    SeqLength {
        /// Its length.
        got: usize,
    },
    /// The MessagePack is malformed or has the wrong shape; the text says where.
    Msgpack(String),
    /// The JSON is malformed or has the wrong shape; the text says where.
    Json(String),
    /// An event lacks a field it cannot do without.
    MissingField {
        /// The event's tag.
        event: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A `BlockStored` with a block size of 0, or one above `u32::MAX`.
    BadBlockSize(u64),
    /// A `BlockStored` whose token count is not its blocks times its block size.
    TokenCount {
        /// Tokens in the event.
        tokens: usize,
        /// Block hashes in the event.
        blocks: usize,
        /// Its block size.
        block_size: u32,
    },
    /// A block hash given as bytes of an unsupported length (1 to 64 are folded).
    BlockHashLength(usize),
    /// A data-parallel rank that is negative or does not fit 32 bits.
    BadDpRank(i64),
    /// A Dynamo event this crate has no equivalent for (a cache-owner residency domain).
    Unsupported(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FrameCount { got } => {
                write!(f, "expected 3 frames (topic, seq, payload), got {got}")
            }
            Self::SeqLength { got } => write!(f, "sequence frame of {got} bytes, expected 8"),
            Self::Msgpack(why) => write!(f, "malformed msgpack: {why}"),
            Self::Json(why) => write!(f, "malformed JSON: {why}"),
            Self::MissingField { event, field } => write!(f, "{event} event without `{field}`"),
            Self::BadBlockSize(size) => write!(f, "block size {size} is not in 1..=u32::MAX"),
            Self::TokenCount { tokens, blocks, block_size } => write!(
                f,
                "{tokens} tokens for {blocks} blocks of {block_size} (expected {})",
                *blocks as u64 * u64::from(*block_size)
            ),
            Self::BlockHashLength(len) => write!(f, "block hash of {len} bytes (1 to 64 folded)"),
            Self::BadDpRank(rank) => write!(f, "data-parallel rank {rank} out of range"),
            Self::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<rmp_serde::decode::Error> for WireError {
    fn from(error: rmp_serde::decode::Error) -> Self {
        Self::Msgpack(error.to_string())
    }
}

impl From<serde_json::Error> for WireError {
    fn from(error: serde_json::Error) -> Self {
        Self::Json(error.to_string())
    }
}
