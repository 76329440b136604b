//! The router: which worker should serve this request?
//!
//! [`KvRouter`] sits above the prefix index ([`crate::index`]) and the load tracker
//! ([`crate::sequences`]); neither of them knows it exists. One synchronous call,
//! [`KvRouter::route`], answers on the caller's thread:
//!
//! 1. **hash** the prompt's full blocks (Dynamo-compatible, salted by LoRA and namespace);
//! 2. **match** them in every storage tier's index ([`TieredIndex`](crate::index::TieredIndex)):
//!    per worker the device depth and the lower tiers' continuations, plus a fleet-wide
//!    [`SharedCache`] if one is plugged in;
//! 3. **load**: every worker's potential load with the request added (one pass over the
//!    tracker's shards);
//! 4. **select** by the cost model (`cost.rs`): per candidate
//!    `logit = overlap_score_weight × prefill_blocks + decode_blocks`, argmin at temperature 0
//!    (ties at random, seedable), softmax over min–max-normalised logits above it — or any
//!    [`WorkerSelector`] the user plugs in ([`RoundRobin`], [`Random`], [`LeastLoaded`] ship
//!    for comparison).
//!
//! Around that: sessions keep a conversation on its worker ([`SessionConfig`]); worker roles
//! ([`WorkerRole`]) route a disaggregated request's prefill and decode in one call; without KV
//! events, approximate mode ([`ApproxConfig`]) indexes the router's own decisions as synthetic
//! events through the same index, forgetting them by TTL and size.
//!
//! ## Layout
//!
//! `config.rs` settings and their validation; `request.rs` the question and the answer;
//! `cost.rs` the model and the per-thread scratch buffers; `selector.rs` the policies;
//! `kv_router.rs` the facade, `builder.rs` its construction; `approx/`, `sessions.rs`,
//! `shared_cache.rs`, `workers.rs` one feature each; `rng.rs` the generator; `stats.rs` the
//! counters.
//!
//! ## Guarantees
//!
//! A refused call (a typed [`RouteError`]) changes nothing. `route` never picks a worker that
//! is unregistered, not allowed, or of the wrong role. A warm `route` that asks for no
//! breakdown allocates nothing beyond its answer (buffers are reused per thread; in approximate
//! mode the queued decision takes the hash buffers and the next route hashes into new ones, and
//! `update_states`' tracker entries are state, not answer). Queries
//! never wait for the index lanes; they see events as of each lane's last applied one.
//!
//! ```
//! use kvroute::router::{KvRouter, RouteRequest, RouterConfig};
//! use kvroute::{RouterEvent, StoredBlock, Worker};
//!
//! let router = KvRouter::new(RouterConfig { seed: Some(7), ..RouterConfig::new(4) })?;
//! let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
//! router.add_worker(a);
//! router.add_worker(b);
//!
//! // Worker b's engine reports it cached the first two blocks of this prompt.
//! let prompt: Vec<u32> = (0..12).collect();
//! let hashes = kvroute::hash::BlockHasher::new(4)?.hash_request(&prompt);
//! let blocks = (0..2).map(|i| StoredBlock { local: hashes.local[i], hash: (500 + i as u64).into() });
//! router.apply_event(RouterEvent::stored(b, 0, None, blocks.collect()))?;
//! router.flush()?;
//!
//! let decision = router.route(&RouteRequest::tokens(&prompt).with_id("r1").update_states(true))?;
//! assert_eq!((decision.worker, decision.overlap_blocks), (b, 2));
//! router.mark_prefill_completed(&"r1".into())?;
//! router.free(&"r1".into())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod approx;
mod builder;
mod config;
mod cost;
mod error;
mod kv_router;
mod request;
#[cfg(all(test, not(loom)))]
mod restart_tests;
mod rng;
mod selector;
mod sessions;
mod shared_cache;
mod stats;
mod workers;

pub use approx::ApproxStats;
pub use builder::KvRouterBuilder;
pub use config::{ApproxConfig, RouteOverrides, RouterConfig, RouterConfigError, SessionConfig};
pub use error::RouteError;
pub use kv_router::KvRouter;
pub use request::{Candidate, RouteDecision, RouteInput, RouteRequest};
pub use rng::RouterRng;
pub use selector::{
    CostSelector, LeastLoaded, Random, RoundRobin, SelectContext, WorkerSelector, argmin_by,
};
pub use shared_cache::{SharedCache, SharedCacheError};
pub use stats::RouterStats;
pub use workers::WorkerRole;
