//! Workload shapes: synthetic traces beside the Mooncake conversation trace, each with the fleet
//! it is meant to be replayed through, so the index and load tracker are measured on more than
//! one kind of prefix structure.
//!
//! Layout: [`documents`] (many roots, documents reused: [`DocumentReuse`]), [`shared`] (heavy
//! cross-worker sharing: [`SharedPrefixes`]), [`zipf`] (the popularity law both draw from), and
//! here [`Shape`], which names every shape and builds its trace and fleet.
//!
//! Guarantees: every generator is deterministic for its parameters (seeded [`LoadRng`], no clock,
//! no global state) and yields ordinary [`TraceRequest`]s whose `hash_ids` follow the Mooncake
//! convention (an id names a block with its prefix), so [`crate::sim::replay_fleet`] turns them
//! into the same kind of event and query streams as the bundled trace.
//!
//! ```
//! use kvroute::sim::replay_fleet;
//! use kvroute::sim::shapes::DocumentReuse;
//!
//! let shape = DocumentReuse { documents: 50, requests: 400, ..DocumentReuse::default() };
//! let replay = replay_fleet(&shape.trace(), &DocumentReuse::fleet());
//! assert_eq!(replay.queries.len(), 400);
//! assert!(replay.stats.hit_rate() > 0.3);
//! ```
//!
//! [`LoadRng`]: crate::sim::load::LoadRng

use std::fmt;

use crate::sim::trace::{TraceError, TraceRequest, load_trace};
use crate::sim::{FleetConfig, bundled_trace_path};

pub mod documents;
pub mod shared;
pub mod zipf;

pub use documents::DocumentReuse;
pub use shared::SharedPrefixes;
pub use zipf::Zipf;

/// Hands out block ids no request of the trace has used yet, a run of them at a time (a new
/// document, prompt or tail: ids name blocks with their prefix, so new content needs new ids).
#[derive(Default)]
pub(crate) struct FreshIds(u64);

impl FreshIds {
    /// The next `len` unused ids.
    pub(crate) fn take(&mut self, len: usize) -> Vec<u64> {
        let ids = (self.0..self.0 + len as u64).collect();
        self.0 += len as u64;
        ids
    }
}

/// A named workload shape: its trace and the fleet it is replayed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Shape {
    /// The bundled Mooncake conversation trace: one system-prompt block in front of every
    /// request, long multi-turn runs (16 workers × 16,384 blocks of 64 tokens).
    Conversation,
    /// [`DocumentReuse`] with its defaults.
    Documents,
    /// [`SharedPrefixes`] with its defaults.
    SharedFleet,
}

impl Shape {
    /// Every shape, in the order reports list them.
    pub const ALL: [Self; 3] = [Self::Conversation, Self::Documents, Self::SharedFleet];

    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Conversation => "conversation",
            Self::Documents => "documents",
            Self::SharedFleet => "shared-fleet",
        }
    }

    /// Parses [`Self::name`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The shape's trace and fleet (the conversation trace is read from the repository).
    pub fn build(self) -> Result<(Vec<TraceRequest>, FleetConfig), TraceError> {
        Ok(match self {
            Self::Conversation => {
                let config = FleetConfig {
                    workers: 16,
                    cache_blocks: 16_384,
                    sub_blocks: 8,
                    ..FleetConfig::default()
                };
                (load_trace(bundled_trace_path())?, config)
            }
            Self::Documents => (DocumentReuse::default().trace(), DocumentReuse::fleet()),
            Self::SharedFleet => (SharedPrefixes::default().trace(), SharedPrefixes::fleet()),
        })
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests;
