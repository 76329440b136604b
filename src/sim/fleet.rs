//! A fleet of mock workers replaying a trace: the KV event stream a real fleet would publish.
//!
//! Each request is hashed through the real path ([`TraceRequest::local_hashes`]), routed to a
//! worker, and served by that worker's [`MockKvManager`], which publishes `Stored`/`Removed`
//! events. Routing uses the simulator's exact knowledge of every cache, never an index under
//! test, so the event stream depends only on the trace and the [`FleetConfig`].
//!
//! Pure longest-prefix routing would send the whole Mooncake trace to one worker (every request
//! starts with the same system-prompt block), so [`Routing::BoundedShare`] caps each worker at
//! `(1 + share_slack) · n / W` of the first `n` requests (ARCHITECTURE.md §7).

use std::fmt;

use ahash::AHashSet;

use crate::event::{RouterEvent, SequenceHash, Worker};
use crate::hash::{BlockHasher, RequestHashes, sequence_hashes};
use crate::sim::kv_manager::{MockKvManager, StoreOutcome};
use crate::sim::trace::{TRACE_BLOCK_TOKENS, TraceRequest};
use crate::{KvEventData, LocalBlockHash};

/// How the fleet picks a worker for each request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Routing {
    /// The longest cached prefix among workers under their share bound; ties, and requests no
    /// worker has room for, go to the least-used worker (then the lowest index).
    #[default]
    BoundedShare,
    /// Worker `i mod W` for the `i`-th request, ignoring caches: the no-information baseline.
    RoundRobin,
}

/// The fleet's shape. [`Default`]: 16 workers of 16,384 blocks, 8 sub-blocks per trace block
/// (64-token KV blocks), share slack 0.25, the trace replayed once, bounded-share routing.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetConfig {
    /// Workers (each dp_rank 0, ids `0..workers`).
    pub workers: usize,
    /// KV blocks each worker caches at most.
    pub cache_blocks: usize,
    /// KV blocks per 512-token trace block: the KV block size is `512 / sub_blocks` tokens.
    /// Must divide 512.
    pub sub_blocks: u32,
    /// How far above an even share `n / W` a worker may go under [`Routing::BoundedShare`].
    pub share_slack: f64,
    /// Replays of the trace, appended one after the other; replay `s` uses token salt `s`, so
    /// each replay is a distinct set of conversations.
    pub dup: u32,
    /// The routing policy.
    pub routing: Routing,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            workers: 16,
            cache_blocks: 16_384,
            sub_blocks: 8,
            share_slack: 0.25,
            dup: 1,
            routing: Routing::BoundedShare,
        }
    }
}

impl FleetConfig {
    /// Tokens per KV block, `512 / sub_blocks` (0 when `sub_blocks` is 0).
    pub fn block_size(&self) -> u32 {
        TRACE_BLOCK_TOKENS.checked_div(self.sub_blocks).unwrap_or(0)
    }

    /// Checks that the fleet can run.
    pub fn validate(&self) -> Result<(), FleetConfigError> {
        if self.workers == 0 {
            return Err(FleetConfigError::NoWorkers);
        }
        if self.sub_blocks == 0 || !TRACE_BLOCK_TOKENS.is_multiple_of(self.sub_blocks) {
            return Err(FleetConfigError::SubBlocks { sub_blocks: self.sub_blocks });
        }
        if !(self.share_slack >= 0.0 && self.share_slack.is_finite()) {
            return Err(FleetConfigError::ShareSlack { share_slack: self.share_slack });
        }
        Ok(())
    }
}

/// Why a [`FleetConfig`] cannot run.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum FleetConfigError {
    /// `workers` is 0.
    NoWorkers,
    /// `sub_blocks` is 0 or does not divide 512.
    SubBlocks {
        /// The value given.
        sub_blocks: u32,
    },
    /// `share_slack` is negative, infinite or NaN.
    ShareSlack {
        /// The value given.
        share_slack: f64,
    },
}

impl fmt::Display for FleetConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoWorkers => f.write_str("a fleet needs at least one worker"),
            Self::SubBlocks { sub_blocks } => {
                write!(f, "sub_blocks {sub_blocks} does not divide the 512-token trace block")
            }
            Self::ShareSlack { share_slack } => {
                write!(f, "share_slack {share_slack} is not a finite non-negative number")
            }
        }
    }
}

impl std::error::Error for FleetConfigError {}

/// Counters of a fleet run. Block counts are KV blocks of the configured size.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct FleetStats {
    /// Requests served.
    pub requests: u64,
    /// Full KV blocks over all requests' prompts.
    pub requested_blocks: u64,
    /// Leading blocks the chosen worker already cached (prefix-cache hits).
    pub hit_blocks: u64,
    /// Blocks a single unlimited cache that saw every earlier request would have hit.
    pub oracle_hit_blocks: u64,
    /// Live (worker, block) entries at the end.
    pub live_entries: u64,
    /// Events published.
    pub events: u64,
    /// Blocks published in `Stored` events.
    pub stored_blocks: u64,
    /// Blocks published in `Removed` events.
    pub removed_blocks: u64,
    /// Per worker: requests served and blocks cached at the end, by worker index.
    pub workers: Vec<WorkerStats>,
}

/// One worker's share of a fleet run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerStats {
    /// The worker.
    pub worker: Worker,
    /// Requests it served.
    pub requests: u64,
    /// Blocks it caches at the end.
    pub blocks: usize,
}

impl FleetStats {
    /// Fraction of requested blocks that were prefix-cache hits on the chosen worker.
    pub fn hit_rate(&self) -> f64 {
        ratio(self.hit_blocks, self.requested_blocks)
    }

    /// Fraction of requested blocks the unlimited-cache oracle would have hit.
    pub fn oracle_hit_rate(&self) -> f64 {
        ratio(self.oracle_hit_blocks, self.requested_blocks)
    }

    /// Block operations published: stored plus removed blocks.
    pub fn block_ops(&self) -> u64 {
        self.stored_blocks + self.removed_blocks
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

/// What [`replay_fleet`] produced.
#[derive(Clone, Debug, Default)]
pub struct FleetReplay {
    /// Every event the workers published, in emission order.
    pub events: Vec<RouterEvent>,
    /// Each served request's local block hashes, in order: the queries a router would make.
    pub queries: Vec<Vec<LocalBlockHash>>,
    /// Counters of the run.
    pub stats: FleetStats,
}

/// Where [`Fleet::serve`] sent a request and what the worker did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// The index of the worker in the fleet.
    pub index: usize,
    /// What its cache did (`cached` is the hit).
    pub outcome: StoreOutcome,
}

/// A fleet of mock workers, served one request at a time: each request is routed by the
/// [`Routing`] policy on the simulator's exact view of every cache (never an index under test),
/// then cached by that worker's [`MockKvManager`], whose events go to the caller.
#[derive(Clone, Debug)]
pub struct Fleet {
    config: FleetConfig,
    hasher: BlockHasher,
    workers: Vec<MockKvManager>,
    served: Vec<u64>,
    /// Every sequence hash seen so far: the unlimited cache.
    oracle: AHashSet<SequenceHash>,
    stats: FleetStats,
}

impl Fleet {
    /// An idle fleet with empty caches.
    pub fn new(config: &FleetConfig) -> Result<Self, FleetConfigError> {
        config.validate()?;
        let hasher = BlockHasher::new(config.block_size())
            .map_err(|_| FleetConfigError::SubBlocks { sub_blocks: config.sub_blocks })?;
        let workers = (0..config.workers)
            .map(|w| MockKvManager::new(Worker::new(w as u64, 0), config.cache_blocks))
            .collect();
        Ok(Self {
            config: config.clone(),
            hasher,
            workers,
            served: vec![0; config.workers],
            oracle: AHashSet::new(),
            stats: FleetStats::default(),
        })
    }

    /// The hasher of the fleet's KV block size.
    pub fn hasher(&self) -> &BlockHasher {
        &self.hasher
    }

    /// The workers' caches, by index.
    pub fn workers(&self) -> &[MockKvManager] {
        &self.workers
    }

    /// The worker index the routing policy picks for a request (router sequence hashes).
    pub fn route(&self, sequence: &[SequenceHash]) -> usize {
        let count = self.workers.len();
        let n = self.stats.requests + 1;
        if self.config.routing == Routing::RoundRobin {
            return (self.stats.requests % count as u64) as usize;
        }
        // May worker `w` take the n-th request? (served + 1) <= (1 + slack) * n / W.
        let bound = (1.0 + self.config.share_slack) * n as f64;
        let under = |w: usize| ((self.served[w] + 1) * count as u64) as f64 <= bound;
        let least = self.served.iter().copied().min().unwrap_or(0);
        let any_under = (0..count).any(under);
        let eligible = |w: &usize| if any_under { under(*w) } else { self.served[*w] == least };
        // Longest prefix, then least used, then lowest index.
        (0..count)
            .filter(eligible)
            .max_by_key(|&w| {
                let prefix = self.workers[w].cached_prefix(sequence);
                (prefix, std::cmp::Reverse(self.served[w]), std::cmp::Reverse(w))
            })
            .unwrap_or(0)
    }

    /// Routes a request with the fleet's policy and serves it. Events go to `events`.
    pub fn serve(&mut self, request: &RequestHashes, events: &mut Vec<RouterEvent>) -> Served {
        let index = self.route(&request.sequence);
        self.serve_on(index, request, events)
    }

    /// Serves a request on worker `index` (taken modulo the fleet size), bypassing the policy:
    /// for routers under test that pick the worker themselves.
    pub fn serve_on(
        &mut self,
        index: usize,
        request: &RequestHashes,
        events: &mut Vec<RouterEvent>,
    ) -> Served {
        let index = index % self.workers.len();
        let blocks = request.local.len().min(request.sequence.len());
        let oracle_hits =
            request.sequence[..blocks].iter().take_while(|seq| self.oracle.contains(seq)).count();
        self.oracle.extend(&request.sequence[..blocks]);

        let before = events.len();
        let outcome = self.workers[index].store(request, events);
        for event in &events[before..] {
            match &event.event.data {
                KvEventData::Stored { blocks, .. } => {
                    self.stats.stored_blocks += blocks.len() as u64
                }
                KvEventData::Removed { blocks } => self.stats.removed_blocks += blocks.len() as u64,
                KvEventData::Cleared => {}
            }
        }
        self.served[index] += 1;
        let stats = &mut self.stats;
        stats.requests += 1;
        stats.requested_blocks += blocks as u64;
        stats.hit_blocks += outcome.cached as u64;
        stats.oracle_hit_blocks += oracle_hits as u64;
        stats.events += (events.len() - before) as u64;
        Served { index, outcome }
    }

    /// The counters so far, with the live entries and per-worker figures as of now.
    pub fn stats(&self) -> FleetStats {
        let mut stats = self.stats.clone();
        stats.live_entries = self.workers.iter().map(|kv| kv.len() as u64).sum();
        stats.workers = self
            .workers
            .iter()
            .zip(&self.served)
            .map(|(kv, &requests)| WorkerStats { worker: kv.worker(), requests, blocks: kv.len() })
            .collect();
        stats
    }
}

/// Replays `trace` through a fleet ([`FleetConfig::dup`] times, appended) and returns the event
/// stream, the queries and the counters.
///
/// # Panics
///
/// If `config` is invalid ([`FleetConfig::validate`]); [`try_replay_fleet`] returns the error.
pub fn replay_fleet(trace: &[TraceRequest], config: &FleetConfig) -> FleetReplay {
    try_replay_fleet(trace, config).unwrap_or_else(|err| panic!("invalid fleet config: {err}"))
}

/// [`replay_fleet`], with an invalid configuration as an error.
pub fn try_replay_fleet(
    trace: &[TraceRequest],
    config: &FleetConfig,
) -> Result<FleetReplay, FleetConfigError> {
    let mut fleet = Fleet::new(config)?;
    let mut events = Vec::new();
    let mut queries = Vec::with_capacity(trace.len() * config.dup as usize);
    for salt in 0..u64::from(config.dup) {
        for request in trace {
            let local = request.local_hashes(fleet.hasher(), salt);
            let request = RequestHashes { sequence: sequence_hashes(&local), local };
            fleet.serve(&request, &mut events);
            queries.push(request.local);
        }
    }
    Ok(FleetReplay { events, queries, stats: fleet.stats() })
}
