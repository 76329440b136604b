//! Engine event wire formats (feature `wire`): decoders from the bytes engines publish to
//! [`RouterEvent`](crate::RouterEvent)s, and the ZMQ subscriber that feeds them to a router
//! (feature `zmq`).
//!
//! Layout: [`VllmDecoder`] (`vllm.rs`; the serde visitors of the raw batch in `vllm_raw.rs`)
//! reads vLLM's and SGLang's KV event batches; `dynamo.rs` reads and writes Dynamo's
//! `RouterEvent` in JSON and named MessagePack; [`WireError`] says why a payload was refused;
//! `zmq/` (feature `zmq`) is the subscriber.
//!
//! Guarantees: decoding never panics and never allocates without bound on hostile input (serde's
//! cautious preallocation, a nesting limit); every refusal is a typed [`WireError`]. A decoded
//! event carries the hashes the engine published plus kvroute's own local hashes of its tokens,
//! computed exactly as [`crate::hash`] computes a request's, so events and requests meet in the
//! index. The golden tests decode bytes made by vLLM's own event classes (`tests/data/vllm/`).

mod dynamo;
mod error;
mod vllm;
mod vllm_raw;
#[cfg(feature = "zmq")]
pub mod zmq;

pub use dynamo::{dynamo_from_json, dynamo_from_msgpack, dynamo_to_json, dynamo_to_msgpack};
pub use error::WireError;
pub use vllm::{DecodedBatch, VllmDecoder, parse_seq, tier_of};
#[cfg(test)]
mod vllm_tests;
