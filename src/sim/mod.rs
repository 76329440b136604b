//! Workload simulation: Mooncake traces, mock engine KV caches and a fleet replayer that turns a
//! trace into the KV event stream a real fleet would publish (ARCHITECTURE.md §5.5).
//!
//! ```no_run
//! use kvroute::index::ReferenceIndex;
//! use kvroute::sim::{FleetConfig, bundled_trace_path, replay_fleet, trace::load_trace};
//!
//! let trace = load_trace(bundled_trace_path())?;
//! let replay = replay_fleet(&trace, &FleetConfig::default());
//! let mut index = ReferenceIndex::new();
//! for event in &replay.events {
//!     index.apply(event)?;
//! }
//! println!("hit rate {:.1}%", 100.0 * replay.stats.hit_rate());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::PathBuf;

mod closed_loop;
mod engine;
mod fleet;
mod kv_manager;
pub mod load;
pub mod shapes;
pub mod trace;

pub use closed_loop::{Policy, SimConfig, SimError, SimInput, SimResult, TimelinePoint, simulate};
pub use engine::{Admitted, Engine, EngineModel};
pub use fleet::{
    Fleet, FleetConfig, FleetConfigError, FleetReplay, FleetStats, Routing, Served, WorkerStats,
    replay_fleet, try_replay_fleet,
};
pub use kv_manager::{MockKvManager, StoreOutcome};

/// `<CARGO_MANIFEST_DIR>/data/conversation_trace.jsonl`: the Mooncake conversation trace shipped
/// in the repository (not in the published crate; see `data/README.md`).
pub fn bundled_trace_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data").join("conversation_trace.jsonl")
}
