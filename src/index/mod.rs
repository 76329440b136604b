//! Prefix indexes: which worker holds which KV block.
//!
//! - [`EventPool`] is the concurrent index: lock-free queries on the caller's thread, events
//!   applied by sticky per-worker lanes (threads of their own, or the callers' in
//!   [`LaneMode::Inline`]).
//! - [`TieredIndex`] keeps one [`EventPool`] per storage tier and scores the lower tiers as
//!   continuations of the device match.
//! - [`ReferenceIndex`] is the single-threaded oracle: short and obviously correct; every faster
//!   structure is checked against it.
//!
//! ## Layout
//!
//! - `lane/`: the writer's side. A lane's tree of runs, its arenas and node ids, its workers'
//!   engine-hash maps, dumps, restarts, and the block lists it hands back to producers.
//! - `runs/`: what readers load. Runs and their versions, content hashes and holder sets, the
//!   lane's worker slots, and the table runs are found in.
//! - Here: the pool (`event_pool.rs`) and its configuration (`pool_config.rs`), the query's walk
//!   over the lanes' run tables (`walk.rs`), the tiers (`tiered.rs`) and the reference
//!   (`reference.rs`).
//!
//! Dependencies point down: the pool uses the lanes, the walk and the runs; the lanes and the
//! walk use the runs; the runs use neither.

mod event_pool;
mod lane;
mod pool_config;
mod reference;
mod runs;
mod tiered;
mod walk;

#[cfg(loom)]
pub(crate) use lane::handback;
#[cfg(all(test, not(loom)))]
pub(crate) use lane::index_lane::INJECTED_PANIC;

use std::collections::BTreeMap;

pub use crate::pool::LaneMode;
pub use crate::scores::OverlapScores;
pub use event_pool::{EnqueueError, EventPool, PoolStats, SubmitError};
pub use lane::restarts::LaneRestart;
pub use pool_config::{
    MAX_EVENT_BLOCKS, MAX_LANE_BLOCKS, MAX_LANE_HEAP_RESERVE, MAX_LANES, MAX_QUEUE_CAPACITY,
    PoolConfig, PoolConfigError,
};
pub use reference::ReferenceIndex;
pub(crate) use tiered::TierScratch;
pub use tiered::{LOWER_TIERS, TieredIndex};

use crate::event::{SequenceHash, Worker};

/// A canonical view of an index for equality checks: per worker, each engine hash it holds with
/// our sequence hash of that block's prefix.
pub type IndexSnapshot = BTreeMap<Worker, BTreeMap<SequenceHash, SequenceHash>>;

#[cfg(loom)]
#[doc(hidden)]
pub mod loom_internals;
