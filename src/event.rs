//! Ids, storage tiers and the KV events engines publish (ARCHITECTURE.md §2).

use std::fmt;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "serde", derive(Serialize, Deserialize), serde(transparent))]
        pub struct $name(pub $inner);

        impl From<$inner> for $name {
            fn from(value: $inner) -> Self {
                Self(value)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// An inference worker (one engine instance) in the fleet.
    WorkerId(u64)
);
id_type!(
    /// A data-parallel rank inside one worker; each rank has its own KV cache.
    DpRank(u32)
);
id_type!(
    /// Hash of one block's tokens (content only), see [`crate::hash`].
    LocalBlockHash(u64)
);
id_type!(
    /// Hash of a block together with its whole prefix.
    ///
    /// Engines publish their own ("external") sequence hashes; the router computes its own chain
    /// from local hashes. The two are never assumed equal.
    SequenceHash(u64)
);

/// The unit that owns one KV cache: a worker and one of its data-parallel ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Worker {
    /// The worker.
    pub id: WorkerId,
    /// Its data-parallel rank.
    pub dp_rank: DpRank,
}

impl Worker {
    /// The worker `id`, rank `dp_rank`.
    pub const fn new(id: u64, dp_rank: u32) -> Self {
        Self { id: WorkerId(id), dp_rank: DpRank(dp_rank) }
    }
}

impl fmt::Display for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.id, self.dp_rank)
    }
}

/// Where a cached block lives. Each tier has its own index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum StorageTier {
    /// GPU memory: the tier routing decisions are mostly made on.
    #[default]
    Device,
    /// Pinned host memory.
    HostPinned,
    /// Local disk.
    Disk,
    /// A remote or shared store.
    External,
}

impl StorageTier {
    /// Every tier, device first.
    pub const ALL: [StorageTier; 4] =
        [StorageTier::Device, StorageTier::HostPinned, StorageTier::Disk, StorageTier::External];
}

/// One block of a [`KvEventData::Stored`] event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct StoredBlock {
    /// Hash of the block's tokens, computed as [`crate::hash`] does.
    pub local: LocalBlockHash,
    /// The engine's own sequence hash for this block; later events name the block by it.
    pub hash: SequenceHash,
}

impl StoredBlock {
    /// A block with content hash `local`, named `hash` by its engine.
    pub const fn new(local: u64, hash: u64) -> Self {
        Self { local: LocalBlockHash(local), hash: SequenceHash(hash) }
    }
}

/// What happened to a worker's cache.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum KvEventData {
    /// A chain of blocks now cached, each the child of the previous one; the first is the child of
    /// `parent` (an engine hash this worker published before), or a root block when `None`.
    Stored {
        /// The engine hash of the block the chain continues, if any.
        parent: Option<SequenceHash>,
        /// The blocks, prefix first.
        blocks: Vec<StoredBlock>,
    },
    /// Blocks evicted, named by their engine hashes.
    Removed {
        /// The engine hashes of the evicted blocks.
        blocks: Vec<SequenceHash>,
    },
    /// The whole cache of this (worker, dp_rank) was dropped.
    Cleared,
}

/// One event from one worker's engine.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct KvEvent {
    /// Monotonic per (worker, dp_rank); used by recovery to spot gaps.
    pub event_id: u64,
    /// The data-parallel rank whose cache changed.
    pub dp_rank: DpRank,
    /// What changed.
    pub data: KvEventData,
}

/// A [`KvEvent`] with the worker and tier it came from: the unit the index applies.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct RouterEvent {
    /// The worker that published the event.
    pub worker_id: WorkerId,
    /// The storage tier it concerns.
    pub tier: StorageTier,
    /// The event.
    pub event: KvEvent,
}

impl RouterEvent {
    /// A device-tier event.
    pub fn new(worker: Worker, event_id: u64, data: KvEventData) -> Self {
        Self {
            worker_id: worker.id,
            tier: StorageTier::Device,
            event: KvEvent { event_id, dp_rank: worker.dp_rank, data },
        }
    }

    /// A device-tier `Stored` event.
    pub fn stored(
        worker: Worker,
        event_id: u64,
        parent: Option<SequenceHash>,
        blocks: Vec<StoredBlock>,
    ) -> Self {
        Self::new(worker, event_id, KvEventData::Stored { parent, blocks })
    }

    /// A device-tier `Removed` event.
    pub fn removed(worker: Worker, event_id: u64, blocks: Vec<SequenceHash>) -> Self {
        Self::new(worker, event_id, KvEventData::Removed { blocks })
    }

    /// A device-tier `Cleared` event.
    pub fn cleared(worker: Worker, event_id: u64) -> Self {
        Self::new(worker, event_id, KvEventData::Cleared)
    }

    /// The (worker, dp_rank) whose cache the event describes.
    pub fn worker(&self) -> Worker {
        Worker { id: self.worker_id, dp_rank: self.event.dp_rank }
    }

    /// How many block operations the event carries (1 for `Cleared`).
    pub fn block_ops(&self) -> usize {
        match &self.event.data {
            KvEventData::Stored { blocks, .. } => blocks.len(),
            KvEventData::Removed { blocks } => blocks.len(),
            KvEventData::Cleared => 1,
        }
    }

    /// The event cut into events of at most `max_blocks` blocks each (at least one), with its
    /// id, worker and tier: what an index that bounds its events' size takes in its place.
    /// Applied in order, the pieces change an index as the whole event would, except that
    /// each piece is all-or-nothing on its own: a `Stored` chain's later pieces continue the
    /// previous piece's last block; a `Removed` list keeps its order. An event within the
    /// bound comes back whole, without a copy.
    pub fn split(self, max_blocks: usize) -> impl Iterator<Item = RouterEvent> {
        EventPieces { event: Some(self), max: max_blocks.max(1), at: 0 }
    }
}

/// The pieces of [`RouterEvent::split`], made one at a time.
struct EventPieces {
    /// What is left to cut (`None` once done).
    event: Option<RouterEvent>,
    max: usize,
    /// The first block of the next piece.
    at: usize,
}

impl Iterator for EventPieces {
    type Item = RouterEvent;

    fn next(&mut self) -> Option<RouterEvent> {
        let whole = self.event.as_ref()?;
        if self.at == 0 && whole.block_ops() <= self.max {
            return self.event.take();
        }
        let (at, len) = (self.at, whole.block_ops());
        let end = len.min(at + self.max);
        let data = match &whole.event.data {
            KvEventData::Stored { parent, blocks } => KvEventData::Stored {
                parent: if at == 0 { *parent } else { Some(blocks[at - 1].hash) },
                blocks: blocks[at..end].to_vec(),
            },
            KvEventData::Removed { blocks } => {
                KvEventData::Removed { blocks: blocks[at..end].to_vec() }
            }
            // One block operation: never over the bound.
            KvEventData::Cleared => return self.event.take(),
        };
        let piece = RouterEvent {
            worker_id: whole.worker_id,
            tier: whole.tier,
            event: KvEvent { event_id: whole.event.event_id, dp_rank: whole.event.dp_rank, data },
        };
        self.at = end;
        if end == len {
            self.event = None;
        }
        Some(piece)
    }
}

/// Why an index rejected (all or part of) an event. The index stays consistent either way.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApplyError {
    /// A `Stored` named a parent this worker does not hold; nothing was stored.
    UnknownParent {
        /// The worker.
        worker: Worker,
        /// The parent engine hash.
        parent: SequenceHash,
    },
    /// A `Stored` reused an engine hash this worker holds for a different prefix, or named a
    /// prefix the worker already holds under another engine hash; nothing was stored.
    HashConflict {
        /// The worker.
        worker: Worker,
        /// The conflicting engine hash.
        block: SequenceHash,
    },
    /// A `Removed` named blocks this worker does not hold. Those were skipped; the known blocks
    /// of the same event were removed.
    UnknownBlocks {
        /// The worker.
        worker: Worker,
        /// The first unknown engine hash.
        first: SequenceHash,
        /// How many of the event's blocks were unknown.
        count: usize,
    },
    /// A `Removed` or `Cleared` for a worker the index has never seen (or has removed).
    UnknownWorker {
        /// The worker.
        worker: Worker,
    },
    /// The worker could not be admitted: the index holds as many workers as it can.
    TooManyWorkers {
        /// The worker.
        worker: Worker,
        /// The index's capacity.
        capacity: usize,
    },
    /// The event carries more blocks than the index takes in one event; nothing was applied.
    TooManyBlocks {
        /// The worker.
        worker: Worker,
        /// The event's blocks.
        blocks: usize,
        /// The most one event may carry.
        limit: usize,
    },
    /// The worker's lane of the index holds as many blocks as it can address (node ids and run
    /// offsets are 32-bit; see [`crate::index::MAX_LANE_BLOCKS`]); nothing was stored. Removals
    /// make room again.
    IndexFull {
        /// The worker.
        worker: Worker,
        /// The event's blocks.
        blocks: usize,
        /// The most blocks one lane holds.
        capacity: usize,
    },
}

impl ApplyError {
    /// A short stable name for the error's kind, for counters and logs.
    pub fn kind(&self) -> ApplyErrorKind {
        match self {
            Self::UnknownParent { .. } => ApplyErrorKind::UnknownParent,
            Self::HashConflict { .. } => ApplyErrorKind::HashConflict,
            Self::UnknownBlocks { .. } => ApplyErrorKind::UnknownBlocks,
            Self::UnknownWorker { .. } => ApplyErrorKind::UnknownWorker,
            Self::TooManyWorkers { .. } => ApplyErrorKind::TooManyWorkers,
            Self::TooManyBlocks { .. } => ApplyErrorKind::TooManyBlocks,
            Self::IndexFull { .. } => ApplyErrorKind::IndexFull,
        }
    }
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownParent { worker, parent } => {
                write!(f, "worker {worker}: stored block's parent {parent} is unknown")
            }
            Self::HashConflict { worker, block } => {
                write!(f, "worker {worker}: block {block} conflicts with a block it already holds")
            }
            Self::UnknownBlocks { worker, first, count } => {
                write!(f, "worker {worker}: {count} removed block(s) unknown, first {first}")
            }
            Self::UnknownWorker { worker } => write!(f, "worker {worker} is unknown"),
            Self::TooManyWorkers { worker, capacity } => {
                write!(f, "worker {worker} rejected: index already holds {capacity} workers")
            }
            Self::TooManyBlocks { worker, blocks, limit } => {
                write!(f, "worker {worker}: event of {blocks} blocks rejected (at most {limit})")
            }
            Self::IndexFull { worker, blocks, capacity } => write!(
                f,
                "worker {worker}: {blocks} blocks rejected: its lane holds all it can ({capacity})"
            ),
        }
    }
}

impl std::error::Error for ApplyError {}

/// The kinds of [`ApplyError`], as indexes into error counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ApplyErrorKind {
    /// See [`ApplyError::UnknownParent`].
    UnknownParent,
    /// See [`ApplyError::HashConflict`].
    HashConflict,
    /// See [`ApplyError::UnknownBlocks`].
    UnknownBlocks,
    /// See [`ApplyError::UnknownWorker`].
    UnknownWorker,
    /// See [`ApplyError::TooManyWorkers`].
    TooManyWorkers,
    /// See [`ApplyError::TooManyBlocks`].
    TooManyBlocks,
    /// See [`ApplyError::IndexFull`].
    IndexFull,
}

impl ApplyErrorKind {
    /// Every kind, in counter order.
    pub const ALL: [ApplyErrorKind; 7] = [
        Self::UnknownParent,
        Self::HashConflict,
        Self::UnknownBlocks,
        Self::UnknownWorker,
        Self::TooManyWorkers,
        Self::TooManyBlocks,
        Self::IndexFull,
    ];

    /// The kind's position in [`Self::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}
