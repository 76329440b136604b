//! The ZMQ subscriber (feature `zmq`): vLLM/SGLang engines' KV event publishers into an index.
//!
//! Layout: [`ZmqSubscriber`] (`subscriber.rs`) owns one thread per endpoint (`worker.rs`); each
//! decodes with [`VllmDecoder`](crate::wire::VllmDecoder) and sequences whole batches through a
//! recovery cursor (`batches.rs`: the ZMQ `seq` is the event id, one token per batch); the
//! engine's replay socket is the [`RecoverySource`](crate::recovery::RecoverySource)
//! (`replay.rs`). Settings in `config.rs`, counters in `stats.rs`.
//!
//! Guarantees: an endpoint's batches reach the index in `seq` order, each once (duplicates
//! dropped, gaps filled from the replay socket before later batches apply); an undecodable batch
//! is counted and applied as empty, never stalling its stream; a dead endpoint only stalls its
//! own thread; the caller's threads never block on ZMQ. Memory is bounded: no message over
//! [`SubscriberConfig::max_message_size`] is read, a replay answer is bounded in batches and
//! bytes, and the live batches kept while a replay is awaited are at most recovery's buffer.
//! A reconnect to a publisher restores the endpoint in full from its replay socket (the engine
//! may have restarted and its first batches been lost); so do batches published before the
//! subscription took effect, which the replay socket is asked about until the first batch
//! arrives live (with no batch after them, nothing else would reveal them). No two endpoints
//! feed one (worker, rank) stream.
//!
//! libzmq itself is compiled from source and linked in (`zmq-sys`); building it needs a C++
//! compiler, no system library.

mod batches;
mod config;
mod replay;
mod stats;
mod subscriber;
mod worker;

pub use config::{SubscriberConfig, ZmqEndpoint, ZmqError};
pub use stats::{EndpointStats, SubscriberStats};
pub use subscriber::ZmqSubscriber;
