//! [`SequencesBuilder`]: how a [`MultiWorkerSequences`] is configured.

use std::fmt;
use std::time::Duration;

use super::DEFAULT_EXPIRY;
use super::clock::{Clock, SystemClock};
use super::error::ConfigError;
use super::fleet_state::{FleetConfig, FleetState, Replica};
use super::multi::MultiWorkerSequences;
use super::replica::SequencePublisher;
use crate::sync::Arc;

/// Worker shards by default: one. An all-worker query walks one trie per shard, and a prefix
/// shared by several workers is stored and walked once per shard, so fewer shards answer
/// faster: 1 rather than 2 took the `documents` query's full-churn p99 (`kvroute-compare`'s
/// `sequences`, another thread adding and freeing at full speed; sittings' medians) from
/// 0.45–0.64× Dynamo's to 0.42–0.55×, as 2 rather than 4 had taken its quiescent p99 from
/// 0.47–0.48× to 0.37–0.39×.
/// What one shard gives up is writers on different workers working in parallel: two threads
/// adding and freeing at full speed on 64 workers made 1.0–1.3 M pairs/s with one shard and
/// 1.3–1.5 M with two, far above what a router's requests ask (a few writes per request).
/// Callers with many concurrent writers may want more ([`SequencesBuilder::worker_shards`]).
pub const DEFAULT_WORKER_SHARDS: usize = 1;

/// Request-index shards by default.
pub const DEFAULT_REQUEST_SHARDS: usize = 64;

/// Peer-event lanes by default (threads applying other replicas' events).
pub const DEFAULT_PEER_LANES: usize = 2;

/// The most worker shards or request-index shards a tracker may have (each is a lock, made
/// up front).
pub const MAX_SHARDS: usize = 1 << 16;

/// The most peer-event lanes (threads) a tracker may have.
pub const MAX_PEER_LANES: usize = 1024;

/// The most events a peer lane's queue may hold.
pub const MAX_PEER_QUEUE: usize = 1 << 24;

/// Configures a [`MultiWorkerSequences`]; start from [`MultiWorkerSequences::builder`].
///
/// ```
/// use std::time::Duration;
/// use kvroute::sequences::{ManualClock, MultiWorkerSequences};
///
/// let fleet = MultiWorkerSequences::builder(32)
///     .expiry(Some(Duration::from_secs(120)))
///     .worker_shards(16)
///     .clock(ManualClock::new())
///     .build()?;
/// assert_eq!(fleet.block_size(), 32);
/// assert!(MultiWorkerSequences::builder(0).build().is_err());
/// # Ok::<(), kvroute::sequences::ConfigError>(())
/// ```
pub struct SequencesBuilder {
    block_size: u32,
    expiry: Option<Duration>,
    worker_shards: usize,
    request_shards: usize,
    clock: Box<dyn Clock>,
    replica: Option<Replica>,
    peer_lanes: usize,
    peer_queue: usize,
    spread_peer_lanes: bool,
}

impl MultiWorkerSequences {
    /// A builder for workers whose KV blocks hold `block_size` tokens. Defaults: requests
    /// expire after [`DEFAULT_EXPIRY`] on the system clock, [`DEFAULT_WORKER_SHARDS`] worker
    /// shards, [`DEFAULT_REQUEST_SHARDS`] request-index shards, no replica sync.
    pub fn builder(block_size: u32) -> SequencesBuilder {
        SequencesBuilder {
            block_size,
            expiry: Some(DEFAULT_EXPIRY),
            worker_shards: DEFAULT_WORKER_SHARDS,
            request_shards: DEFAULT_REQUEST_SHARDS,
            clock: Box::new(SystemClock),
            replica: None,
            peer_lanes: DEFAULT_PEER_LANES,
            peer_queue: 1024,
            spread_peer_lanes: true,
        }
    }
}

impl SequencesBuilder {
    /// Requests still in flight this long after they were added are dropped (lazily: when a
    /// request is added to the same worker, or on [`MultiWorkerSequences::expire_stale`]);
    /// `None` keeps them until freed.
    pub fn expiry(mut self, expiry: Option<Duration>) -> Self {
        self.expiry = expiry;
        self
    }

    /// How many shards the workers are spread over (rounded up to a power of two, at least 1;
    /// at most [`MAX_SHARDS`], or [`build`](Self::build) fails). More shards let more writers
    /// work at once; each all-worker query walks every shard.
    pub fn worker_shards(mut self, shards: usize) -> Self {
        self.worker_shards = shards;
        self
    }

    /// How many shards the request-id index has (rounded up to a power of two, at least 1; at
    /// most [`MAX_SHARDS`], or [`build`](Self::build) fails).
    pub fn request_shards(mut self, shards: usize) -> Self {
        self.request_shards = shards;
        self
    }

    /// Reads the time from `clock` (for tests: a [`super::ManualClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// Turns replica sync on: this replica is `router_id`, and every change made through the
    /// tracker's methods is published to `publisher`. Peer events are applied with
    /// [`MultiWorkerSequences::apply_peer_event`].
    pub fn replica(mut self, router_id: u64, publisher: impl SequencePublisher) -> Self {
        self.replica = Some(Replica { router_id, publisher: Box::new(publisher) });
        self
    }

    /// How many threads apply peer events (each request's events go to one of them, in order),
    /// and how many events each may have queued before senders wait (each at least 1; at most
    /// [`MAX_PEER_LANES`] and [`MAX_PEER_QUEUE`], or [`build`](Self::build) fails). Defaults:
    /// [`DEFAULT_PEER_LANES`] lanes of 1024 events.
    pub fn peer_lanes(mut self, lanes: usize, queue_capacity: usize) -> Self {
        self.peer_lanes = lanes.max(1);
        self.peer_queue = queue_capacity.max(1);
        self
    }

    /// Whether two busy peer lanes that share a CPU while a caller waits on them move apart, on
    /// Linux (as the index's lanes do: see [`crate::index::LaneMode::Threads`]). Default: on. Turn it
    /// off if you place the lanes' threads yourself: a lane then never changes its affinity.
    pub fn spread_peer_lanes(mut self, on: bool) -> Self {
        self.spread_peer_lanes = on;
        self
    }

    /// The tracker, with no workers yet (see [`MultiWorkerSequences::update_workers`]). Fails
    /// with a typed error on a zero block size, a size beyond its limit, or a peer lane the OS
    /// would not start (leaving nothing running).
    pub fn build(self) -> Result<MultiWorkerSequences, ConfigError> {
        if self.block_size == 0 {
            return Err(ConfigError::ZeroBlockSize);
        }
        let limits = [
            ("worker_shards", self.worker_shards, MAX_SHARDS),
            ("request_shards", self.request_shards, MAX_SHARDS),
            ("peer_lanes", self.peer_lanes, MAX_PEER_LANES),
            ("peer_queue", self.peer_queue, MAX_PEER_QUEUE),
        ];
        for (setting, requested, max) in limits {
            if requested > max {
                return Err(ConfigError::TooLarge { setting, requested, max });
            }
        }
        let inner = FleetState::new(FleetConfig {
            block_size: self.block_size,
            expiry: self.expiry,
            worker_shards: self.worker_shards,
            request_shards: self.request_shards,
            clock: self.clock,
            replica: self.replica,
        });
        let queues = (self.peer_queue, self.spread_peer_lanes);
        MultiWorkerSequences::from_parts(Arc::new(inner), self.peer_lanes, queues)
    }
}

impl fmt::Debug for SequencesBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SequencesBuilder")
            .field("block_size", &self.block_size)
            .field("expiry", &self.expiry)
            .field("worker_shards", &self.worker_shards)
            .field("request_shards", &self.request_shards)
            .field("router_id", &self.replica.as_ref().map(|r| r.router_id))
            .field("peer_lanes", &self.peer_lanes)
            .field("spread_peer_lanes", &self.spread_peer_lanes)
            .finish_non_exhaustive()
    }
}
