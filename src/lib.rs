//! # kvroute
//!
//! KV-cache-aware request routing for LLM inference fleets: send each request to the worker whose
//! KV cache already holds the longest prefix of it, without overloading anyone.
//!
//! ## Usage
//!
//! A gateway keeps one [`router::KvRouter`]: it registers the workers, hands in the KV events
//! their engines publish, and asks, for every request, which worker should serve it.
//!
//! ```
//! use kvroute::router::{KvRouter, RouteRequest, RouterConfig};
//! use kvroute::{RouterEvent, StoredBlock, Worker};
//!
//! let router = KvRouter::new(RouterConfig::new(4))?; // 4-token KV blocks
//! let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
//! router.add_worker(a);
//! router.add_worker(b);
//!
//! // Worker b's engine reports (a KV event) that it cached the first two blocks of a prompt.
//! let prompt: Vec<u32> = (0..12).collect();
//! let hashes = kvroute::hash::BlockHasher::new(4)?.hash_request(&prompt);
//! let cached = vec![
//!     StoredBlock { local: hashes.local[0], hash: 7001.into() },
//!     StoredBlock { local: hashes.local[1], hash: 7002.into() },
//! ];
//! router.apply_event(RouterEvent::stored(b, 1, None, cached))?;
//! router.flush()?; // only needed to see an event at once
//!
//! // Route the request and record it as in flight on the chosen worker.
//! let request = RouteRequest::tokens(&prompt).with_id("req-1").update_states(true);
//! let decision = router.route(&request)?;
//! assert_eq!((decision.worker, decision.overlap_blocks), (b, 2));
//!
//! // As the engine reports progress:
//! router.mark_prefill_completed(&"req-1".into())?;
//! router.free(&"req-1".into())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Real event streams lose, duplicate and reorder events, and workers restart: with
//! `RouterConfig::recovery` set, events go through per-stream cursors and what is missing is
//! fetched from the engines' own records (see [`recovery`]); a router can also save its index
//! to a file and start warm from it after a restart.
//!
//! The layers below it stand on their own: the prefix index answers, per worker, how many
//! leading blocks of a request it already holds.
//!
//! ```
//! use kvroute::hash::BlockHasher;
//! use kvroute::index::ReferenceIndex;
//! use kvroute::{RouterEvent, StoredBlock, Worker};
//!
//! let hasher = BlockHasher::new(4)?;
//! let prompt: Vec<u32> = (0..12).collect();
//! let request = hasher.hash_request(&prompt);
//!
//! // Worker 7 reports that it cached the first two blocks (named by its own engine hashes).
//! let worker = Worker::new(7, 0);
//! let blocks = vec![
//!     StoredBlock { local: request.local[0], hash: 100.into() },
//!     StoredBlock { local: request.local[1], hash: 101.into() },
//! ];
//! let mut index = ReferenceIndex::new();
//! index.apply(&RouterEvent::stored(worker, 1, None, blocks))?;
//!
//! let scores = index.find_matches(&request.local);
//! assert_eq!(scores.get(worker), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Consistency
//!
//! Bad input never panics and never corrupts other workers' state: a `Stored` whose parent the
//! worker does not hold, a `Removed` of an unknown block, an event for an unknown worker — each
//! is a typed [`ApplyError`] and the index stays consistent.
//!
//! [`index::EventPool`] applies each worker's events in order on that worker's lane; after
//! [`index::EventPool::flush`] returns, every event enqueued before it is visible to queries.
//! A query runs concurrently with ingestion and never waits for a lane. It sees each run (a chain
//! of blocks with the same holders) either before or after a concurrent change; an event that
//! changes several runs may be seen half-applied, as a prefix of the worker's chain.
//!
//! ## Performance
//!
//! Measured side by side with NVIDIA Dynamo's `dynamo-kv-router` 1.6.1 on three workload shapes
//! (`BENCHMARKS.md` has today's tables and the commands that reproduce them): `find_matches`
//! takes 0.2–0.5× the time of Dynamo's concurrent tree at the median and at p99, also while
//! ingesting; memory per live entry is 48–60 bytes, 0.2–0.45× Dynamo's; ingest runs 1.2–2.5×
//! Dynamo's throughput (the figure a loaded host moves most). The active-sequence tracker answers
//! all-worker load queries in a fifth to a third of Dynamo's time, with 5–8× its add/free
//! throughput, and one routing decision takes 0.23–0.39× Dynamo's.

pub mod event;
pub mod hash;
pub mod index;
#[cfg(all(feature = "nats", not(loom)))]
pub mod nats;
pub mod pool;
pub mod recovery;
pub mod router;
mod scores;
pub mod sequences;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "wire")]
pub mod wire;

mod mix;
mod prefetch;
mod sync;
mod u64_map;

pub use event::{
    ApplyError, ApplyErrorKind, DpRank, KvEvent, KvEventData, LocalBlockHash, RouterEvent,
    SequenceHash, StorageTier, StoredBlock, Worker, WorkerId,
};
pub use router::{KvRouter, RouteDecision, RouteRequest, RouterConfig};
pub use scores::{OverlapScores, TieredScores};
pub use sequences::{
    ActiveSequences, MultiWorkerSequences, PotentialLoad, RequestId, SequenceEvent,
    SequencePublisher, WorkerLoad,
};

#[cfg(loom)]
#[doc(hidden)]
pub use index::handback::Handback;
#[cfg(loom)]
#[doc(hidden)]
pub use sync::backlog::Backlog;

/// The README's examples run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
