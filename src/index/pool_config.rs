//! [`PoolConfigError`]: why an [`EventPool`](super::EventPool) could not start, and the
//! validation of a [`PoolConfig`] behind it.
//!
//! Sizes are checked before anything is allocated or spawned: zero lanes, queue slots or
//! workers make no working index, and lane counts or queues beyond the limits below are taken
//! for mistakes (each lane is an OS thread; each queue slot may hold an event).

use std::fmt;

use super::PoolConfig;
use crate::pool::SpawnError;

/// The most lanes (threads) a pool may have.
pub const MAX_LANES: usize = 1024;

/// The most events a lane's queue may hold.
pub const MAX_QUEUE_CAPACITY: usize = 1 << 24;

/// The most blocks one event may be allowed to carry (`max_event_blocks`): far below 2³², so
/// no run a single event makes can outgrow the lanes' 32-bit lengths.
pub const MAX_EVENT_BLOCKS: usize = 1 << 24;

/// The most blocks (tree nodes) one lane holds: ids and offsets inside a lane are 32-bit. A
/// `Stored` event that would take a lane past it is rejected
/// ([`ApplyError::IndexFull`](crate::ApplyError::IndexFull)) and the lane stays as it was.
pub const MAX_LANE_BLOCKS: usize = 1 << 31;

/// The most allocator room a lane may reserve at once (`lane_heap_reserve`): glibc's thread
/// heaps hold at most 64 MiB each.
pub const MAX_LANE_HEAP_RESERVE: usize = 64 << 20;

/// Why a [`PoolConfig`] was rejected or its pool could not start. Nothing is left running.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolConfigError {
    /// `lanes` is 0.
    ZeroLanes,
    /// `queue_capacity` is 0.
    ZeroQueueCapacity,
    /// `max_workers` is 0.
    ZeroMaxWorkers,
    /// `lanes` is above [`MAX_LANES`].
    TooManyLanes(usize),
    /// `queue_capacity` is above [`MAX_QUEUE_CAPACITY`].
    QueueTooLarge(usize),
    /// `max_event_blocks` is 0 or above [`MAX_EVENT_BLOCKS`].
    BadMaxEventBlocks(usize),
    /// `lane_heap_reserve` is above [`MAX_LANE_HEAP_RESERVE`].
    HeapReserveTooLarge(usize),
    /// The OS would not start a lane's thread.
    Spawn(SpawnError),
}

impl fmt::Display for PoolConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLanes => f.write_str("an index pool needs at least one lane"),
            Self::ZeroQueueCapacity => f.write_str("an index pool's queues need room for an event"),
            Self::ZeroMaxWorkers => f.write_str("an index pool must admit at least one worker"),
            Self::TooManyLanes(n) => write!(f, "{n} lanes is more than the {MAX_LANES} allowed"),
            Self::QueueTooLarge(n) => {
                write!(f, "a queue of {n} events is more than the {MAX_QUEUE_CAPACITY} allowed")
            }
            Self::BadMaxEventBlocks(n) => {
                write!(f, "max_event_blocks must be 1 to {MAX_EVENT_BLOCKS}, not {n}")
            }
            Self::HeapReserveTooLarge(n) => write!(
                f,
                "a lane heap reserve of {n} bytes is more than the {MAX_LANE_HEAP_RESERVE} allowed"
            ),
            Self::Spawn(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PoolConfigError {}

impl From<SpawnError> for PoolConfigError {
    fn from(error: SpawnError) -> Self {
        Self::Spawn(error)
    }
}

impl PoolConfig {
    /// Checks the sizes: none may be zero, and lanes, queues and the heap reserve may not
    /// exceed [`MAX_LANES`], [`MAX_QUEUE_CAPACITY`] and [`MAX_LANE_HEAP_RESERVE`].
    /// [`EventPool::new`](super::EventPool::new) does this first.
    pub fn validate(&self) -> Result<(), PoolConfigError> {
        use PoolConfigError as E;
        match (self.lanes, self.queue_capacity, self.max_workers) {
            (0, _, _) => Err(E::ZeroLanes),
            (_, 0, _) => Err(E::ZeroQueueCapacity),
            (_, _, 0) => Err(E::ZeroMaxWorkers),
            (lanes, _, _) if lanes > MAX_LANES => Err(E::TooManyLanes(lanes)),
            (_, queue, _) if queue > MAX_QUEUE_CAPACITY => Err(E::QueueTooLarge(queue)),
            _ if !(1..=MAX_EVENT_BLOCKS).contains(&self.max_event_blocks) => {
                Err(E::BadMaxEventBlocks(self.max_event_blocks))
            }
            _ if self.lane_heap_reserve > MAX_LANE_HEAP_RESERVE => {
                Err(E::HeapReserveTooLarge(self.lane_heap_reserve))
            }
            _ => Ok(()),
        }
    }
}
