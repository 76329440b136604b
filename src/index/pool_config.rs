//! [`PoolConfig`]: how an [`EventPool`](super::EventPool) is set up, the limits its sizes are
//! checked against, and [`PoolConfigError`]: why one was rejected or could not start.
//!
//! Sizes are checked before anything is allocated or spawned: zero lanes, queue slots or
//! workers make no working index, and lane counts or queues beyond the limits below are taken
//! for mistakes (each lane is an OS thread; each queue slot may hold an event).

use std::fmt;

use crate::pool::{LaneMode, SpawnError};

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

/// How an [`EventPool`](super::EventPool) is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Lanes (threads) applying events. Default: 2.
    pub lanes: usize,
    /// Events each lane's queue holds before [`EventPool::apply`] reports it full. Default: 8,192.
    /// A busy lane takes its whole queue at once, so up to twice this many events can be
    /// pending on a lane: queued, and in the lane's hands. Queued events hold their blocks'
    /// hashes (16 bytes a block), so this bounds memory; deeper queues keep a producer that
    /// waits on one busy lane from leaving the other lanes without work (events are applied in
    /// order, so it cannot skip ahead): on the 2-core comparison, 8,192 ingests about 10% faster
    /// than 4,096.
    ///
    /// [`EventPool::apply`]: super::EventPool::apply
    pub queue_capacity: usize,
    /// (worker, dp_rank) pairs the index holds at once. Default: 4,096.
    pub max_workers: usize,
    /// Blocks one event may carry (a `Stored` or `Removed` event's list). Default: 16,384
    /// (262,144 tokens at 16 tokens a block). Larger events are refused before they are
    /// queued ([`SubmitError::TooManyBlocks`], [`EnqueueError::TooManyBlocks`]; a lane that
    /// is handed one anyway rejects it with [`ApplyError::TooManyBlocks`]), so a lane's queued
    /// events hold at most `2 × queue_capacity × max_event_blocks` block hashes.
    /// [`RouterEvent::split`](crate::RouterEvent::split) cuts a longer event into events
    /// within the bound.
    ///
    /// [`SubmitError::TooManyBlocks`]: super::SubmitError::TooManyBlocks
    /// [`EnqueueError::TooManyBlocks`]: super::EnqueueError::TooManyBlocks
    /// [`ApplyError::TooManyBlocks`]: crate::ApplyError::TooManyBlocks
    pub max_event_blocks: usize,
    /// Whether the lanes are threads of their own (the default) or apply each event on the
    /// thread that hands it over ([`LaneMode::Inline`]: no threads, deterministic, and an event
    /// is visible to queries as soon as `apply` returns).
    pub mode: LaneMode,
    /// The most allocator room a lane thread reserves at once. A lane reserves room (allocates
    /// and frees it) when its tree passes 16,384 blocks and at each doubling after, for about
    /// as much again as its tree: with glibc, it then grows its heap without a system call per
    /// page (`pool/heap_room.rs`; a fresh `documents` ingest ran about a tenth faster). Small
    /// indexes never reserve. Default: 16 MiB, at most [`MAX_LANE_HEAP_RESERVE`]; 0 reserves
    /// nothing.
    pub lane_heap_reserve: usize,
    /// Whether two busy lane threads that share a CPU while a caller waits on them (a flush, a
    /// snapshot) move apart, on Linux ([`LaneMode::Threads`] says how). Default: on. On the
    /// 2-core test VM a fresh ingest took 0.87–1.02 of the time it took without, depending on
    /// how slowly the kernel balanced that hour. Turn it
    /// off if you place the lanes' threads yourself: a lane then never changes its affinity.
    pub spread_lanes: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            lanes: 2,
            queue_capacity: 8192,
            max_workers: 4096,
            max_event_blocks: 16_384,
            mode: LaneMode::Threads,
            lane_heap_reserve: 16 << 20,
            spread_lanes: true,
        }
    }
}

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
