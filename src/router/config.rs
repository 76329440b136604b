//! [`RouterConfig`]: how a [`KvRouter`](super::KvRouter) weighs cache hits against load.

use std::fmt;
use std::time::Duration;

use crate::index::PoolConfig;
use crate::recovery::RecoveryConfig;
use crate::sequences::DEFAULT_EXPIRY;

/// How a [`KvRouter`](super::KvRouter) is set up. Every field has a documented default;
/// [`RouterConfig::validate`] (called by the router's builder) rejects nonsense with a typed
/// [`RouterConfigError`].
///
/// ```
/// use kvroute::router::RouterConfig;
///
/// let config = RouterConfig { temperature: 0.5, ..RouterConfig::new(64) };
/// assert!(config.validate().is_ok());
/// assert!(RouterConfig::new(0).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RouterConfig {
    /// Tokens per KV block, as the engines use. Required (no default makes sense).
    pub block_size: u32,
    /// Weight of the prefill term against the decode term in a worker's cost. Default 1.0.
    pub overlap_score_weight: f64,
    /// Weight of the prefill tokens already queued on a worker. `None` (the default) weighs
    /// them as `overlap_score_weight` does the request's own uncached tokens — Dynamo's
    /// formula. `Some(w)` decouples them: a high `overlap_score_weight` then values cache hits
    /// without also making a worker with one prompt queued look as costly as a cold one. On
    /// the bundled conversation trace (`kvroute replay`) overlap weight 16 with queued weight 1
    /// keeps 88% of the oracle's hit rate where Dynamo's weights keep 56%, at the same balance.
    pub queued_prefill_weight: Option<f64>,
    /// Softmax temperature over normalised costs; 0 picks a cheapest worker. Default 0.0.
    pub temperature: f64,
    /// Whether engines publish KV events. When false the router runs in approximate mode: it
    /// indexes its own decisions (see [`ApproxConfig`]). Default true.
    pub use_kv_events: bool,
    /// What a host-pinned block continuing the device match is worth, in device blocks.
    /// Default 0.75 (Dynamo's).
    pub host_hit_weight: f64,
    /// What a disk block continuing the match is worth. Default 0.25 (Dynamo's).
    pub disk_hit_weight: f64,
    /// What a block in the worker's external (remote) tier continuing the match is worth.
    /// Default 0.1.
    pub external_hit_weight: f64,
    /// What a fleet-wide shared cache's hit beyond a worker's own match is worth (see
    /// [`SharedCache`](super::SharedCache)). Default 0.5.
    pub shared_cache_hit_weight: f64,
    /// Whether routed requests pin their blocks in the load tracker (decode load counts shared
    /// prefixes once); when false only their prefill tokens and request counts are tracked.
    /// Default true.
    pub track_active_blocks: bool,
    /// How long a routed request may stay in flight before it is presumed lost. Default 300 s;
    /// `None` never expires.
    pub expiry: Option<Duration>,
    /// Whether routing decisions are published to peer routers (the builder then needs a
    /// publisher). Default false.
    pub replica_sync: bool,
    /// Approximate mode's settings (used when `use_kv_events` is false).
    pub approximate: ApproxConfig,
    /// Event recovery (see [`crate::recovery`]): when set, events go through per-stream
    /// cursors, and gaps, restarts and first contacts are healed from the source given to
    /// [`KvRouter::run_recovery`](super::KvRouter::run_recovery), which the caller must then run
    /// (a stream's first event waits for a full restore). Default `None`: events are applied
    /// as they come.
    pub recovery: Option<RecoveryConfig>,
    /// Session affinity's settings.
    pub sessions: SessionConfig,
    /// The device index's pool. Default [`PoolConfig::default`]. Its
    /// [`spread_lanes`](PoolConfig::spread_lanes) applies to the load tracker's peer lanes too.
    pub device_index: PoolConfig,
    /// Each lower tier's pool, started on the tier's first event. Default one lane.
    pub lower_tier_index: PoolConfig,
    /// Seed of the tie-breaking and sampling generator; `None` seeds from the clock.
    /// Default `None`.
    pub seed: Option<u64>,
}

impl RouterConfig {
    /// The defaults, for engines with `block_size`-token KV blocks.
    pub fn new(block_size: u32) -> Self {
        Self {
            block_size,
            overlap_score_weight: 1.0,
            queued_prefill_weight: None,
            temperature: 0.0,
            use_kv_events: true,
            host_hit_weight: 0.75,
            disk_hit_weight: 0.25,
            external_hit_weight: 0.1,
            shared_cache_hit_weight: 0.5,
            track_active_blocks: true,
            expiry: Some(DEFAULT_EXPIRY),
            replica_sync: false,
            approximate: ApproxConfig::default(),
            recovery: None,
            sessions: SessionConfig::default(),
            device_index: PoolConfig::default(),
            lower_tier_index: PoolConfig { lanes: 1, ..PoolConfig::default() },
            seed: None,
        }
    }

    /// Checks every field; the first problem found is the error.
    pub fn validate(&self) -> Result<(), RouterConfigError> {
        use RouterConfigError as E;
        if self.block_size == 0 {
            return Err(E::ZeroBlockSize);
        }
        let weights = [
            ("overlap_score_weight", self.overlap_score_weight),
            ("queued_prefill_weight", self.queued_prefill_weight.unwrap_or(0.0)),
            ("host_hit_weight", self.host_hit_weight),
            ("disk_hit_weight", self.disk_hit_weight),
            ("external_hit_weight", self.external_hit_weight),
            ("shared_cache_hit_weight", self.shared_cache_hit_weight),
        ];
        for (field, value) in weights {
            if !(value.is_finite() && value >= 0.0) {
                return Err(E::BadWeight { field, value });
            }
        }
        check_temperature(self.temperature)?;
        let approx = &self.approximate;
        if approx.ttl.is_zero() {
            return Err(E::ZeroTtl);
        }
        if approx.max_blocks == 0 {
            return Err(E::ZeroMaxBlocks);
        }
        if !(approx.prune_target > 0.0 && approx.prune_target <= 1.0) {
            return Err(E::BadPruneTarget(approx.prune_target));
        }
        if approx.lag >= approx.ttl {
            return Err(E::LagNotBelowTtl { lag: approx.lag, ttl: approx.ttl });
        }
        if self.sessions.idle_ttl.is_zero() {
            return Err(E::ZeroTtl);
        }
        if !(self.sessions.load_bound.is_finite() && self.sessions.load_bound >= 1.0) {
            return Err(E::BadLoadBound(self.sessions.load_bound));
        }
        for pool in [&self.device_index, &self.lower_tier_index] {
            pool.validate().map_err(E::Index)?;
        }
        if let Some(recovery) = &self.recovery {
            recovery.validate().map_err(E::Recovery)?;
        }
        Ok(())
    }
}

fn check_temperature(temperature: f64) -> Result<(), RouterConfigError> {
    if temperature.is_finite() && temperature >= 0.0 {
        Ok(())
    } else {
        Err(RouterConfigError::BadTemperature(temperature))
    }
}

/// Approximate mode (engines publish no KV events, as the SGLang and vLLM routers' cache-aware
/// policies assume): every decision is indexed as if the chosen worker had stored the request's
/// blocks, and forgotten again by age and size.
#[derive(Clone, Debug, PartialEq)]
pub struct ApproxConfig {
    /// A block not routed to its worker again for this long is presumed evicted. Default 120 s
    /// (Dynamo's).
    pub ttl: Duration,
    /// Blocks a worker is presumed to hold at most. Default 65,536.
    pub max_blocks: usize,
    /// Past `max_blocks`, the worker is pruned to this fraction of it, least recently routed
    /// first (tails before their prefixes). Default 0.8.
    pub prune_target: f64,
    /// How long a decision may wait to be indexed: a recorder thread takes the routing
    /// threads' decisions off their hands and, while they keep coming, picks them up this
    /// often (so routing never wakes it). Default 1 ms, far below any engine's prefill time.
    /// Zero hands each decision to the index on the routing thread before `route` returns, as
    /// does a router whose index lanes run inline
    /// ([`LaneMode::Inline`](crate::pool::LaneMode::Inline)) or that could not start the thread.
    /// [`KvRouter::flush`](super::KvRouter::flush) indexes every decision made before it.
    pub lag: Duration,
}

impl Default for ApproxConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(120),
            max_blocks: 65_536,
            prune_target: 0.8,
            lag: Duration::from_millis(1),
        }
    }
}

/// Session affinity: requests naming the same session go to the worker first chosen for it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    /// A session unused this long is forgotten. Default 600 s.
    pub idle_ttl: Duration,
    /// The session's worker is kept while its projected decode blocks stay within this many
    /// times the least loaded candidate's (plus one block); past it the request is routed
    /// afresh and the session moves. Default 2.0.
    pub load_bound: f64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self { idle_ttl: Duration::from_secs(600), load_bound: 2.0 }
    }
}

/// Per-request changes to the router's weights.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RouteOverrides {
    /// Replaces [`RouterConfig::overlap_score_weight`].
    pub overlap_score_weight: Option<f64>,
    /// Replaces [`RouterConfig::temperature`].
    pub temperature: Option<f64>,
}

impl RouteOverrides {
    pub(crate) fn validate(&self) -> Result<(), RouterConfigError> {
        if let Some(value) = self.overlap_score_weight
            && !(value.is_finite() && value >= 0.0)
        {
            return Err(RouterConfigError::BadWeight { field: "overlap_score_weight", value });
        }
        self.temperature.map_or(Ok(()), check_temperature)
    }
}

/// Why a [`RouterConfig`] (or a request's [`RouteOverrides`]) was rejected.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RouterConfigError {
    /// `block_size` is 0.
    ZeroBlockSize,
    /// A weight is negative, infinite or NaN.
    BadWeight {
        /// The field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// The temperature is negative, infinite or NaN.
    BadTemperature(f64),
    /// A TTL is zero.
    ZeroTtl,
    /// `approximate.max_blocks` is zero.
    ZeroMaxBlocks,
    /// `approximate.prune_target` is not in (0, 1].
    BadPruneTarget(f64),
    /// `approximate.lag` is not shorter than `approximate.ttl`: decisions could expire before
    /// they are indexed.
    LagNotBelowTtl {
        /// The lag.
        lag: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// `sessions.load_bound` is below 1 or not finite.
    BadLoadBound(f64),
    /// An index pool's sizes are out of range, or its lanes could not start.
    Index(crate::index::PoolConfigError),
    /// `replica_sync` is on but the builder was given no publisher.
    MissingPublisher,
    /// The load tracker rejected its settings.
    Sequences(crate::sequences::ConfigError),
    /// Recovery's settings are out of range.
    Recovery(crate::recovery::RecoveryConfigError),
}

impl fmt::Display for RouterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBlockSize => f.write_str("block_size must be at least one token"),
            Self::BadWeight { field, value } => {
                write!(f, "{field} must be a finite non-negative number, not {value}")
            }
            Self::BadTemperature(t) => {
                write!(f, "temperature must be a finite non-negative number, not {t}")
            }
            Self::ZeroTtl => f.write_str("a TTL must be longer than zero"),
            Self::ZeroMaxBlocks => f.write_str("approximate.max_blocks must be at least 1"),
            Self::BadPruneTarget(p) => {
                write!(f, "approximate.prune_target must be in (0, 1], not {p}")
            }
            Self::LagNotBelowTtl { lag, ttl } => {
                write!(
                    f,
                    "approximate.lag ({lag:?}) must be shorter than approximate.ttl ({ttl:?})"
                )
            }
            Self::BadLoadBound(b) => write!(f, "sessions.load_bound must be at least 1, not {b}"),
            Self::Index(e) => write!(f, "index: {e}"),
            Self::MissingPublisher => f.write_str("replica_sync is on but no publisher was given"),
            Self::Sequences(e) => write!(f, "load tracker: {e}"),
            Self::Recovery(e) => write!(f, "recovery: {e}"),
        }
    }
}

impl std::error::Error for RouterConfigError {}
