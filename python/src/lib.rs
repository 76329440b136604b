//! `kvroute._kvroute`: the Python extension module of kvroute (built by maturin as an abi3
//! wheel named `kvroute`; the `kvroute/` Python package re-exports it with type stubs).
//!
//! It wraps only the crate's public API, one concept per file:
//!
//! - `router.rs`: `KvRouter` (config as keyword arguments) and `RouteDecision`;
//! - `events.rs`: `RouterEvent` (frozen; to and from dicts in Dynamo's JSON shape);
//! - `hasher.rs`: `BlockHasher`;
//! - `decoder.rs`: `VllmDecoder` and `DecodedBatch` (vLLM/SGLang msgpack batches);
//! - `subscriber.rs`: `ZmqSubscriber` (engines' ZMQ streams into a router, on its threads);
//! - `nats.rs`: `NatsReplica` (router replicas over NATS);
//! - `recovery.rs`: a Python object as the `RecoverySource` of `KvRouter.run_recovery`;
//! - `tokens.rs`: token arguments (uint32 buffers without per-element work, or int lists);
//!   `buffer.rs`: the buffer protocol on CPython >= 3.11 (the only `unsafe` code);
//! - `errors.rs`: the exception hierarchy under `KvrouteError`, with the Rust messages.
//!
//! Every call that can wait or take more than a few µs releases the GIL.

use pyo3::prelude::*;

mod buffer;
mod decoder;
mod errors;
mod events;
mod hasher;
mod nats;
mod recovery;
mod router;
mod subscriber;
mod tokens;

/// The module: classes, exceptions and the crate version.
#[pymodule]
fn _kvroute(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<router::PyKvRouter>()?;
    m.add_class::<router::PyRouteDecision>()?;
    m.add_class::<events::PyRouterEvent>()?;
    m.add_class::<hasher::PyBlockHasher>()?;
    m.add_class::<decoder::PyVllmDecoder>()?;
    m.add_class::<decoder::PyDecodedBatch>()?;
    m.add_class::<subscriber::PyZmqSubscriber>()?;
    m.add_class::<nats::PyNatsReplica>()?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
