//! Prefix indexes: which worker holds which KV block.
//!
//! - [`EventPool`] is the concurrent index: lock-free queries on the caller's thread, events
//!   applied by sticky per-worker lanes (threads of their own, or the callers' in
//!   [`LaneMode::Inline`]).
//! - [`TieredIndex`] keeps one [`EventPool`] per storage tier and scores the lower tiers as
//!   continuations of the device match.
//! - [`ReferenceIndex`] is the single-threaded oracle: short and obviously correct; every faster
//!   structure is checked against it.

mod chain;
mod chunked;
mod event_pool;
pub(crate) mod handback;
mod held_blocks;
mod holder_sets;
mod lane;
#[cfg(all(test, not(loom)))]
pub(crate) use lane::INJECTED_PANIC;
mod lane_trie;
mod locals;
mod node_ids;
mod pool_config;
mod probe_map;
mod reference;
mod restarts;
mod routes;
mod run;
mod run_table;
mod seq_hashes;
mod spent;
mod tag_map;
mod tiered;
mod versions;
mod walk;
mod worker_dump;
mod worker_slots;

use std::collections::BTreeMap;

pub use crate::pool::LaneMode;
pub use crate::scores::OverlapScores;
pub use event_pool::{EventPool, PoolStats, SubmitError};
pub use pool_config::{
    MAX_EVENT_BLOCKS, MAX_LANE_BLOCKS, MAX_LANE_HEAP_RESERVE, MAX_LANES, MAX_QUEUE_CAPACITY,
    PoolConfig, PoolConfigError,
};
pub use reference::ReferenceIndex;
pub use restarts::LaneRestart;
pub(crate) use tiered::TierScratch;
pub use tiered::{LOWER_TIERS, TieredIndex};

use crate::event::{SequenceHash, Worker};

/// A canonical view of an index for equality checks: per worker, each engine hash it holds with
/// our sequence hash of that block's prefix.
pub type IndexSnapshot = BTreeMap<Worker, BTreeMap<SequenceHash, SequenceHash>>;

#[cfg(loom)]
#[doc(hidden)]
pub mod loom_internals;
