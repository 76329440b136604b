//! [`WorkerSlots`]: which worker each of a lane's 64 holder bits stands for, as queries read it.
//!
//! A run's holders travel as a sorted list and, when every holder has one of the lane's 64
//! slots, as a bit set over those slots too (see [`super::holder_sets`]): a query then
//! narrows its matching workers with one AND per run instead of merging lists, and looks the
//! workers up here only once they drop out.
//!
//! Only the lane writes a slot, and only when it hands the slot to a worker: before any version
//! with that worker's bit is published or any bit set in place (so a reader that loads such a
//! version or bits, with acquire, sees the name), and never while a reader might still hold
//! the slot's previous bit (a freed slot comes back only through the lane's reclaimer, after
//! every reader pinned before the worker's last bits were cleared or versions unlinked has
//! unpinned). So a reader reads a slot without ordering of its own.

use crate::event::{DpRank, Worker, WorkerId};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Holder bits per lane: the width of a run's bit set.
pub(crate) const SLOTS: usize = 64;

struct Name {
    id: AtomicU64,
    dp_rank: AtomicU32,
}

/// See the [module docs](self).
pub(crate) struct WorkerSlots {
    names: [Name; SLOTS],
}

impl Default for WorkerSlots {
    fn default() -> Self {
        let name = || Name { id: AtomicU64::new(0), dp_rank: AtomicU32::new(0) };
        Self { names: std::array::from_fn(|_| name()) }
    }
}

impl WorkerSlots {
    /// Lane side: `slot` now stands for `worker` (see the [module docs](self) for when).
    pub(crate) fn name(&self, slot: u8, worker: Worker) {
        let name = &self.names[slot as usize];
        name.id.store(worker.id.0, Ordering::Relaxed);
        name.dp_rank.store(worker.dp_rank.0, Ordering::Relaxed);
    }

    /// The worker `slot` stands for, in a version the caller loaded under its current pin.
    #[inline]
    pub(crate) fn worker(&self, slot: u32) -> Worker {
        let name = &self.names[slot as usize % SLOTS];
        let id = WorkerId(name.id.load(Ordering::Relaxed));
        Worker { id, dp_rank: DpRank(name.dp_rank.load(Ordering::Relaxed)) }
    }
}
