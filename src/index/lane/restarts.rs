//! [`LaneRestart`]: the record of a lane that panicked and started over, and the log of them
//! [`crate::index::PoolStats`] reports.
//!
//! A panic while a lane applies an event is a bug, but it must not take the index down: the
//! lane drops everything it held (its state may be half changed), its workers' blocks with it,
//! and goes on with an empty tree. Those workers are *cleared*, as if their engines had sent
//! `Cleared` and forgotten them: they drop out of answers until their next events (or a
//! resync) bring them back. This log says which lane restarted, when, and whom it cleared.

use std::collections::VecDeque;
use std::time::SystemTime;

use crate::event::Worker;

/// How many restarts [`RestartLog`] keeps the details of (the count covers all).
pub(crate) const RECENT_RESTARTS: usize = 16;

/// One lane restart: a lane panicked applying an event (a bug), dropped everything it held and
/// went on with an empty tree. Its workers were *cleared*: they drop out of answers until their
/// next events (or a resync) bring them back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneRestart {
    /// The lane that panicked.
    pub lane: usize,
    /// When it started over.
    pub at: SystemTime,
    /// The (worker, dp_rank) pairs whose blocks it dropped, sorted.
    pub cleared: Vec<Worker>,
}

/// Every restart counted, the latest [`RECENT_RESTARTS`] kept.
#[derive(Debug, Default)]
pub(crate) struct RestartLog {
    pub(crate) total: u64,
    pub(crate) recent: VecDeque<LaneRestart>,
}

impl RestartLog {
    pub(crate) fn record(&mut self, restart: LaneRestart) {
        self.total += 1;
        if self.recent.len() == RECENT_RESTARTS {
            self.recent.pop_front();
        }
        self.recent.push_back(restart);
    }
}
