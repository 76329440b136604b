//! [`KvRouterBuilder`]: a [`KvRouter`] from a config plus the parts a config cannot hold.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::hash::BlockHasher;
use crate::index::TieredIndex;
use crate::pool::LaneMode;
use crate::recovery::RecoveryCore;
use crate::router::approx::ApproxTracker;
use crate::router::kv_router::{Counters, KvRouter};
use crate::router::sessions::SessionTable;
use crate::router::{
    CostSelector, RouterConfig, RouterConfigError, RouterRng, SharedCache, WorkerSelector,
};
use crate::sequences::{Clock, MultiWorkerSequences, SequencePublisher, SystemClock};
use crate::sync::RwLock;

/// Builds a [`KvRouter`]: the config, and optionally a selector, a clock, a shared cache and a
/// replica publisher.
pub struct KvRouterBuilder {
    config: RouterConfig,
    selector: Box<dyn WorkerSelector>,
    clock: Arc<dyn Clock>,
    shared_cache: Option<Box<dyn SharedCache>>,
    publisher: Option<(u64, Box<dyn SequencePublisher>)>,
}

impl KvRouterBuilder {
    pub(crate) fn new(config: RouterConfig) -> Self {
        Self {
            config,
            selector: Box::new(CostSelector),
            clock: Arc::new(SystemClock),
            shared_cache: None,
            publisher: None,
        }
    }

    /// Routes with `selector` instead of the cost model's [`CostSelector`].
    pub fn selector(mut self, selector: impl WorkerSelector) -> Self {
        self.selector = Box::new(selector);
        self
    }

    /// Reads time from `clock` (request expiry, approximate-mode TTL, session TTL).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Scores hits in a fleet-wide shared KV store.
    pub fn shared_cache(mut self, cache: impl SharedCache) -> Self {
        self.shared_cache = Some(Box::new(cache));
        self
    }

    /// Publishes this router's request changes to its peers as `router_id` (needs
    /// [`RouterConfig::replica_sync`]).
    pub fn publisher(mut self, router_id: u64, publisher: impl SequencePublisher) -> Self {
        self.publisher = Some((router_id, Box::new(publisher)));
        self
    }

    /// Validates the config and starts the router (its index lanes included).
    pub fn build(self) -> Result<KvRouter, RouterConfigError> {
        let config = self.config;
        config.validate()?;
        if config.replica_sync && self.publisher.is_none() {
            return Err(RouterConfigError::MissingPublisher);
        }
        let hasher =
            BlockHasher::new(config.block_size).map_err(|_| RouterConfigError::ZeroBlockSize)?;
        let tracker = |publisher: Option<(u64, Box<dyn SequencePublisher>)>| {
            let mut builder = MultiWorkerSequences::builder(config.block_size)
                .expiry(config.expiry)
                .clock(SharedClock(self.clock.clone()))
                .spread_peer_lanes(config.device_index.spread_lanes);
            if let Some((router_id, publisher)) = publisher.filter(|_| config.replica_sync) {
                builder = builder.replica(router_id, BoxedPublisher(publisher));
            }
            builder.build().map_err(RouterConfigError::Sequences)
        };
        let sequences = tracker(self.publisher)?;
        let prefill_sequences = tracker(None)?;
        let rng = config.seed.map_or_else(RouterRng::from_entropy, RouterRng::new);
        let index = TieredIndex::new(config.device_index.clone(), config.lower_tier_index.clone())
            .map_err(RouterConfigError::Index)?;
        let index = crate::sync::Arc::new(index);
        let now = self.clock.now();
        // Inline lanes ask for no threads: approximate mode then records on the routing thread.
        let background = config.device_index.mode == LaneMode::Threads;
        let approx = (!config.use_kv_events).then(|| {
            ApproxTracker::new(config.approximate.clone(), now, index.clone(), background)
        });
        Ok(KvRouter {
            index,
            sessions: SessionTable::new(config.sessions.idle_ttl),
            hasher,
            sequences,
            prefill_sequences,
            workers: RwLock::new(Default::default()),
            selector: self.selector,
            rng,
            clock: self.clock,
            approx,
            recovery: config
                .recovery
                .clone()
                .map(RecoveryCore::new)
                .transpose()
                .map_err(RouterConfigError::Recovery)?,
            restarts_seen: Default::default(),
            shared_cache: self.shared_cache,
            counters: Counters::default(),
            started: Instant::now(),
            config,
        })
    }
}

impl fmt::Debug for KvRouterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvRouterBuilder")
            .field("config", &self.config)
            .field("shared_cache", &self.shared_cache.is_some())
            .field("publisher", &self.publisher.as_ref().map(|(id, _)| id))
            .finish_non_exhaustive()
    }
}

/// One clock shared by the router and its load trackers.
struct SharedClock(Arc<dyn Clock>);

impl Clock for SharedClock {
    fn now(&self) -> Instant {
        self.0.now()
    }
}

/// A boxed publisher handed on to the tracker's builder.
struct BoxedPublisher(Box<dyn SequencePublisher>);

impl SequencePublisher for BoxedPublisher {
    fn publish(&self, event: crate::sequences::SequenceEvent) {
        self.0.publish(event);
    }
}
