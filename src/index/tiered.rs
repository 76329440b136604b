//! [`TieredIndex`]: one [`EventPool`] per storage tier, each fed only its own tier's events.
//!
//! Engines that offload KV blocks to host memory, disk or a remote store publish those blocks'
//! events with their tier. A block in a lower tier is cheaper to load than to recompute but
//! dearer than a device hit, so the router scores it at a tier weight; it counts only where it
//! *continues* the device match. Each tier's pool answers how many leading blocks of the query
//! each worker holds in that tier (offloading writes prefixes first, so a tier's blocks form
//! chains from the root as the device's do); the continuation of tier `t` is how far its match
//! reaches past the blocks already counted by the tiers above it:
//!
//! ```text
//! position p = device depth
//! for tier in [host-pinned, disk, external]:  continuation[tier] = max(0, depth[tier] - p);  p += continuation[tier]
//! ```
//!
//! A lower tier's pool is created on its first event (most fleets only ever publish device
//! events), with its own lanes, so device ingestion never queues behind an offload storm.

use crate::event::{LocalBlockHash, RouterEvent, StorageTier, Worker, WorkerId};
use crate::index::{EnqueueError, EventPool, PoolConfig, PoolConfigError, PoolStats, SubmitError};
use crate::pool::LaneDown;
use crate::scores::{OverlapScores, TieredScores};
use crate::sync::OnceLock;

/// The storage tiers below the device, in the order their matches continue it.
pub const LOWER_TIERS: [StorageTier; 3] =
    [StorageTier::HostPinned, StorageTier::Disk, StorageTier::External];

/// A prefix index per storage tier.
///
/// ```
/// use kvroute::index::{PoolConfig, TieredIndex};
/// use kvroute::{LocalBlockHash, RouterEvent, StorageTier, StoredBlock, Worker};
///
/// let index = TieredIndex::new(PoolConfig::default(), PoolConfig { lanes: 1, ..PoolConfig::default() })?;
/// let w = Worker::new(1, 0);
/// let blocks = |n: u64| (0..n).map(|i| StoredBlock::new(10 + i, 100 + i)).collect::<Vec<_>>();
/// index.apply(RouterEvent::stored(w, 0, None, blocks(2)))?; // device: blocks 0..2
/// let mut host = RouterEvent::stored(w, 0, None, blocks(5)); // host: blocks 0..5
/// host.tier = StorageTier::HostPinned;
/// index.apply(host)?;
/// index.flush()?;
///
/// let query: Vec<LocalBlockHash> = (10..16).map(LocalBlockHash).collect();
/// let scores = index.find_matches(&query);
/// assert_eq!(scores.device.get(w), 2);
/// assert_eq!(scores.continuation(StorageTier::HostPinned).get(w), 3); // blocks 2..5
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TieredIndex {
    device: EventPool,
    lower: [OnceLock<EventPool>; 3],
    lower_config: PoolConfig,
}

impl TieredIndex {
    /// The device pool set up by `device`; each lower tier's pool, once it sees an event, by
    /// `lower` (checked now, so a bad one fails here rather than on that event).
    pub fn new(device: PoolConfig, lower: PoolConfig) -> Result<Self, PoolConfigError> {
        lower.validate()?;
        let device = EventPool::new(device)?;
        Ok(Self { device, lower: Default::default(), lower_config: lower })
    }

    /// The device tier's pool.
    pub fn device(&self) -> &EventPool {
        &self.device
    }

    /// The pool of `tier`, if it exists (the device's always does).
    pub fn tier(&self, tier: StorageTier) -> Option<&EventPool> {
        match lower_slot(tier) {
            None => Some(&self.device),
            Some(slot) => self.lower[slot].get(),
        }
    }

    /// The pool of `tier`, started if it is a lower tier's first event. `None` if its lanes
    /// could not start (the OS refused a thread); the next event tries again.
    fn tier_or_start(&self, tier: StorageTier) -> Option<&EventPool> {
        let Some(slot) = lower_slot(tier) else { return Some(&self.device) };
        if let Some(pool) = self.lower[slot].get() {
            return Some(pool);
        }
        // Two first events may race to start the tier: the loser's pool is stopped unused.
        let pool = EventPool::new(self.lower_config.clone()).ok()?;
        let _ = self.lower[slot].set(pool);
        self.lower[slot].get()
    }

    /// Enqueues `event` on its tier's pool without waiting (see [`EventPool::apply`]). A lower
    /// tier whose lanes could not start reports [`SubmitError::LaneDown`].
    pub fn apply(&self, event: RouterEvent) -> Result<(), SubmitError> {
        match self.tier_or_start(event.tier) {
            Some(pool) => pool.apply(event),
            None => Err(SubmitError::LaneDown(event)),
        }
    }

    /// Enqueues `event` on its tier's pool, waiting for room (see [`EventPool::apply_blocking`]).
    /// An event over its tier's [`PoolConfig::max_event_blocks`] is refused at once; a lower
    /// tier whose lanes could not start reports [`EnqueueError::LaneDown`].
    pub fn apply_blocking(&self, event: RouterEvent) -> Result<(), EnqueueError> {
        if event.block_ops() > self.max_event_blocks(event.tier) {
            // Refused (and counted) by the pool without starting a lower tier for it.
            return match self.tier(event.tier) {
                Some(pool) => pool.apply_blocking(event),
                None => Err(EnqueueError::TooManyBlocks(event)),
            };
        }
        self.tier_or_start(event.tier).ok_or(LaneDown)?.apply_blocking(event)
    }

    /// [`Self::apply_blocking`] of `event` cut into pieces its tier takes
    /// ([`EventPool::apply_split`]).
    pub fn apply_split(&self, event: RouterEvent) -> Result<(), LaneDown> {
        self.tier_or_start(event.tier).ok_or(LaneDown)?.apply_split(event)
    }

    /// Blocks one event of `tier` may carry ([`PoolConfig::max_event_blocks`] of its pool).
    pub fn max_event_blocks(&self, tier: StorageTier) -> usize {
        match lower_slot(tier) {
            None => self.device.max_event_blocks(),
            Some(_) => self.lower_config.max_event_blocks,
        }
    }

    /// Returns once every event enqueued before the call, in every tier, is visible to queries.
    pub fn flush(&self) -> Result<(), LaneDown> {
        self.pools().try_for_each(|pool| pool.flush())
    }

    /// Per worker, the device match and each lower tier's continuation of it (module docs).
    pub fn find_matches(&self, query: &[LocalBlockHash]) -> TieredScores {
        let mut scratch = TierScratch::default();
        self.find_matches_into(query, &mut scratch);
        let [host, disk, external] = scratch.lower.map(OverlapScores::from_pairs);
        TieredScores {
            device: OverlapScores::from_pairs(scratch.device),
            lower: [host, disk, external],
        }
    }

    /// [`Self::find_matches`] into reused buffers: the router's allocation-free path. A lower
    /// tier that never saw an event costs nothing.
    pub(crate) fn find_matches_into(&self, query: &[LocalBlockHash], out: &mut TierScratch) {
        self.device.find_matches_into(query, &mut out.device);
        for (slot, continuation) in out.lower.iter_mut().enumerate() {
            continuation.clear();
            if let Some(pool) = self.lower[slot].get() {
                pool.find_matches_into(query, continuation);
            }
        }
        if out.lower.iter().all(Vec::is_empty) {
            return;
        }
        // Turn each lower tier's depth into its continuation past the tiers above it.
        let TierScratch { device, lower, reached } = out;
        reached.clear();
        reached.extend_from_slice(device);
        for continuation in lower.iter_mut() {
            continuation.retain_mut(|(worker, depth)| {
                let at = reached.iter().position(|(w, _)| w == worker);
                let before = at.map_or(0, |at| reached[at].1);
                if *depth <= before {
                    return false;
                }
                match at {
                    Some(at) => reached[at].1 = *depth,
                    None => reached.push((*worker, *depth)),
                }
                *depth -= before;
                true
            });
        }
    }

    /// Forgets every dp_rank of `id` in every tier. Returns how many (worker, dp_rank) pairs
    /// the device tier removed.
    pub fn remove_worker(&self, id: WorkerId) -> Result<usize, LaneDown> {
        let removed = self.device.remove_worker(id)?;
        for pool in self.lower.iter().filter_map(OnceLock::get) {
            pool.remove_worker(id)?;
        }
        Ok(removed)
    }

    /// Forgets one (worker, dp_rank) in every tier. Returns whether the device tier knew it.
    pub fn remove_worker_dp_rank(&self, worker: Worker) -> Result<bool, LaneDown> {
        let known = self.device.remove_worker_dp_rank(worker)?;
        for pool in self.lower.iter().filter_map(OnceLock::get) {
            pool.remove_worker_dp_rank(worker)?;
        }
        Ok(known)
    }

    /// Each tier's counters, device first, then [`LOWER_TIERS`] (zero for a tier never used).
    pub fn stats(&self) -> [PoolStats; 4] {
        let stats = |slot: usize| self.lower[slot].get().map(EventPool::stats).unwrap_or_default();
        [self.device.stats(), stats(0), stats(1), stats(2)]
    }

    fn pools(&self) -> impl Iterator<Item = &EventPool> {
        std::iter::once(&self.device).chain(self.lower.iter().filter_map(OnceLock::get))
    }
}

impl std::fmt::Debug for TieredIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let started: Vec<_> = LOWER_TIERS.iter().filter(|&&t| self.tier(t).is_some()).collect();
        f.debug_struct("TieredIndex")
            .field("device", &self.device)
            .field("lower_tiers_started", &started)
            .finish()
    }
}

/// Where a lower tier's pool lives in [`TieredIndex::lower`]; `None` for the device.
fn lower_slot(tier: StorageTier) -> Option<usize> {
    LOWER_TIERS.iter().position(|&t| t == tier)
}

/// Reused buffers of one tiered query: `(worker, blocks)` pairs per tier.
#[derive(Debug, Default)]
pub(crate) struct TierScratch {
    /// Device depth per worker.
    pub device: Vec<(Worker, u32)>,
    /// Per lower tier (in [`LOWER_TIERS`] order), each worker's continuation past the tiers
    /// above it; workers with none are absent.
    pub lower: [Vec<(Worker, u32)>; 3],
    /// Depth reached so far per worker, while converting.
    reached: Vec<(Worker, u32)>,
}
