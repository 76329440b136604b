//! [`LaneMode`]: whether a pool's lanes run on threads of their own or on the callers', and
//! [`Lanes`], the pool that is either.

use super::LaneDown;
use super::SpawnError;
use super::inline::InlineLanes;
use super::lanes::{Lane, StickyPool, TrySend};

/// Where the lanes of a pool apply what they are sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LaneMode {
    /// Each lane is an OS thread draining its own queue: senders return at once and lanes work
    /// in parallel. The default. On Linux, while a caller waits on the lanes (a flush), a busy
    /// lane that finds another on its CPU moves itself to an allowed CPU no lane is on, by
    /// narrowing its own thread's affinity for a moment and restoring it; it is never left
    /// pinned. An embedder that places threads itself turns that off
    /// ([`PoolConfig::spread_lanes`](crate::index::PoolConfig::spread_lanes),
    /// [`SequencesBuilder::spread_peer_lanes`](crate::sequences::SequencesBuilder::spread_peer_lanes)).
    #[default]
    Threads,
    /// No threads: each event or task is applied on the caller's thread before the call
    /// returns (one caller at a time per lane, behind a mutex). Deterministic and free of
    /// wakeups, for single-threaded embedders, simulations, replays and fuzzing; slower per
    /// event for a producer that could have handed the work to another core.
    Inline,
}

/// A pool of lanes in either [`LaneMode`]; the methods are those of [`StickyPool`].
pub(crate) enum Lanes<L: Lane> {
    Threads(StickyPool<L>),
    Inline(InlineLanes<L>),
}

impl<L: Lane> Lanes<L> {
    /// `lanes` lanes with queues of `queue_capacity` messages and the states
    /// `make_lane(lane_index)`; threads only: the queues, and whether busy lanes sharing a CPU
    /// move apart (`spread`, see [`LaneMode::Threads`]).
    pub(crate) fn new(
        mode: LaneMode,
        lanes: usize,
        (queue_capacity, spread): (usize, bool),
        make_lane: impl FnMut(usize) -> L,
    ) -> Result<Self, SpawnError> {
        Ok(match mode {
            LaneMode::Threads => {
                Self::Threads(StickyPool::with_spread(lanes, queue_capacity, spread, make_lane)?)
            }
            LaneMode::Inline => Self::Inline(InlineLanes::new(lanes, make_lane)),
        })
    }

    /// Whether busy lanes sharing a CPU move apart (never inline: no lane has a thread).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn spreads(&self) -> bool {
        match self {
            Self::Threads(pool) => pool.spreads(),
            Self::Inline(_) => false,
        }
    }

    /// Producers waiting for room in a lane's queue (never inline: an inline lane has no
    /// queue to wait on).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn waiting(&self, lane: usize) -> usize {
        match self {
            Self::Threads(pool) => pool.waiting(lane),
            Self::Inline(_) => 0,
        }
    }

    pub(crate) fn lanes(&self) -> usize {
        match self {
            Self::Threads(pool) => pool.lanes(),
            Self::Inline(pool) => pool.lanes(),
        }
    }

    pub(crate) fn send_with(
        &self,
        lane: usize,
        message: L::Message,
        while_waiting: impl FnMut(),
    ) -> Result<(), LaneDown> {
        match self {
            Self::Threads(pool) => pool.send_with(lane, message, while_waiting),
            Self::Inline(pool) => pool.send(lane, message),
        }
    }

    pub(crate) fn try_send(
        &self,
        lane: usize,
        message: L::Message,
    ) -> Result<(), TrySend<L::Message>> {
        match self {
            Self::Threads(pool) => pool.try_send(lane, message),
            Self::Inline(pool) => pool.try_send(lane, message),
        }
    }

    pub(crate) fn run_on_lane<R, F>(&self, lane: usize, task: F) -> Result<R, LaneDown>
    where
        R: Send + 'static,
        F: FnOnce(&mut L) -> R + Send + 'static,
    {
        match self {
            Self::Threads(pool) => pool.run_on_lane(lane, task),
            Self::Inline(pool) => pool.run_on_lane(lane, task),
        }
    }

    pub(crate) fn run_on_all<R, F>(&self, task: F) -> Result<Vec<R>, LaneDown>
    where
        R: Send + 'static,
        F: Fn(&mut L) -> R + Send + Sync + Clone + 'static,
    {
        match self {
            Self::Threads(pool) => pool.run_on_all(task),
            Self::Inline(pool) => pool.run_on_all(task),
        }
    }

    pub(crate) fn flush(&self) -> Result<(), LaneDown> {
        match self {
            Self::Threads(pool) => pool.flush(),
            Self::Inline(pool) => pool.flush(),
        }
    }
}
