//! The sticky lane pool: a fixed set of OS threads ("lanes"), each draining its own bounded
//! queue, that apply one worker's index events (or one request's peer events) in order and
//! different ones in parallel. `lanes.rs` is the pool itself, private to the crate;
//! `inline.rs` the same lanes driven on the callers' threads instead, and `mode.rs` the choice
//! between the two ([`LaneMode`]); `spread.rs` moves two busy lane threads apart when they
//! share a CPU while a caller waits on them. What callers of the index and the load tracker
//! meet of it is here: [`LaneMode`], [`LaneDown`] when a lane has stopped, and [`SpawnError`]
//! when the OS would not start one.

use std::fmt;

pub(crate) mod heap_room;
mod inline;
mod lanes;
mod mode;
mod spread;

pub use mode::LaneMode;
pub(crate) use mode::Lanes;

#[cfg(not(loom))]
pub(crate) use lanes::{Lane, StickyPool, TrySend};
// The loom models drive the pool directly.
#[cfg(loom)]
#[doc(hidden)]
pub use lanes::{Lane, StickyPool, TrySend};

/// A lane of the pool has stopped: its handler panicked (a bug). Calls that involve it fail
/// with this rather than wait for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneDown;

impl fmt::Display for LaneDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a lane of the pool has stopped")
    }
}

impl std::error::Error for LaneDown {}

/// The OS would not start a lane's thread (a thread or memory limit): why, as it said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnError {
    /// The OS error's kind.
    pub kind: std::io::ErrorKind,
    /// The OS error, as text.
    pub message: String,
}

impl From<std::io::Error> for SpawnError {
    fn from(error: std::io::Error) -> Self {
        Self { kind: error.kind(), message: error.to_string() }
    }
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "could not start a lane thread: {}", self.message)
    }
}

impl std::error::Error for SpawnError {}
