//! The closed-loop fleet simulator: a trace routed through the real [`KvRouter`], served by mock
//! engines, whose KV events flow back into the router's index after a network delay.
//!
//! A discrete-event simulation in trace time (compressed by `speedup`), deterministic for a
//! seed. Each arriving request is routed by the policy under test — the cost model, a baseline
//! [`WorkerSelector`](crate::router::WorkerSelector), approximate mode, or the oracle-informed
//! router that reads every engine's cache directly — and recorded in the router's load tracker;
//! its engine ([`Engine`]) queues, prefills and decodes it, and the router hears of it as a
//! real gateway would: prefill done, each output block, finished. The engines' `Stored` and
//! `Removed` events reach the router's index `event_delay` after the prefill that caused them.
//!
//! Measured per run: the engines' realised prefix hit rate against the unlimited-cache oracle,
//! TTFT and end-to-end latency (simulated seconds), load imbalance (max over mean of the
//! workers' pinned blocks, sampled at each arrival), the wall time of each routing decision,
//! and the index's event rate.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::{Duration, Instant};

use ahash::AHashSet;

use crate::event::{RouterEvent, Worker};
use crate::hash::{BlockHasher, RequestHashes, sequence_hashes};
use crate::router::{
    KvRouter, LeastLoaded, Random, RoundRobin, RouteRequest, RouterConfig, RouterConfigError,
};
use crate::sequences::{ManualClock, RequestId};
use crate::sim::engine::{Admitted, Engine, EngineModel};
use crate::sim::trace::{TRACE_BLOCK_TOKENS, TraceRequest};

/// How requests are assigned to workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Policy {
    /// [`KvRouter`] with its cost model, fed the engines' KV events.
    KvAware,
    /// [`KvRouter`] with its cost model in approximate mode: no KV events, its own decisions
    /// indexed instead.
    Approximate,
    /// Each worker in turn.
    RoundRobin,
    /// A uniformly random worker.
    Random,
    /// The fewest requests in flight, then the fewest queued prefill tokens.
    LeastLoaded,
    /// The simulator's exact view of every cache: the longest cached prefix among workers
    /// under an even share (1.25 n/W of the first n requests): an upper reference, not a
    /// router anyone could run.
    OracleInformed,
}

impl Policy {
    /// Every policy, in table order.
    pub const ALL: [Policy; 6] = [
        Self::KvAware,
        Self::Approximate,
        Self::RoundRobin,
        Self::Random,
        Self::LeastLoaded,
        Self::OracleInformed,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::KvAware => "kv-aware",
            Self::Approximate => "approximate",
            Self::RoundRobin => "round-robin",
            Self::Random => "random",
            Self::LeastLoaded => "least-loaded",
            Self::OracleInformed => "oracle-informed",
        }
    }

    /// The policy named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The simulated fleet. [`Default`]: 16 workers, 64-token blocks, [`EngineModel::default`],
/// the trace compressed 10× (about 15 requests in flight per worker), KV events 10 ms late,
/// seed 0, 60 timeline buckets, the router's default overlap weight (1.0).
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Workers (ids `0..workers`, dp rank 0).
    pub workers: usize,
    /// Tokens per KV block; must divide 512 (the trace's block).
    pub block_size: u32,
    /// Each worker's speed and limits.
    pub engine: EngineModel,
    /// How much faster than the trace's timestamps requests arrive.
    pub speedup: f64,
    /// Seeds the router's tie-breaking and random choices.
    pub seed: u64,
    /// How late the engines' KV events reach the router.
    pub event_delay: Duration,
    /// Buckets of trace time in [`SimResult::timeline`].
    pub timeline_buckets: usize,
    /// The router's [`RouterConfig::overlap_score_weight`].
    pub overlap_score_weight: f64,
    /// The router's [`RouterConfig::queued_prefill_weight`].
    pub queued_prefill_weight: Option<f64>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            workers: 16,
            block_size: 64,
            engine: EngineModel::default(),
            speedup: 10.0,
            seed: 0,
            event_delay: Duration::from_millis(10),
            timeline_buckets: 60,
            overlap_score_weight: 1.0,
            queued_prefill_weight: None,
        }
    }
}

/// Why a simulation could not run.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SimError {
    /// `workers` is 0.
    NoWorkers,
    /// `block_size` is 0 or does not divide 512.
    BadBlockSize(u32),
    /// `speedup` is not a positive finite number.
    BadSpeedup(f64),
    /// The engine model has a zero or non-finite rate, batch or capacity.
    BadEngine,
    /// The router rejected its configuration.
    Router(RouterConfigError),
    /// The router's index lanes stopped.
    IndexDown,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoWorkers => f.write_str("the fleet needs at least one worker"),
            Self::BadBlockSize(b) => {
                write!(f, "block size {b} must be a positive divisor of {TRACE_BLOCK_TOKENS}")
            }
            Self::BadSpeedup(s) => write!(f, "speed-up {s} must be a positive number"),
            Self::BadEngine => f.write_str("engine rates, batch and capacity must be positive"),
            Self::Router(e) => write!(f, "router: {e}"),
            Self::IndexDown => f.write_str("the router's index lanes stopped"),
        }
    }
}

impl std::error::Error for SimError {}

impl SimConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.workers == 0 {
            return Err(SimError::NoWorkers);
        }
        if self.block_size == 0 || !TRACE_BLOCK_TOKENS.is_multiple_of(self.block_size) {
            return Err(SimError::BadBlockSize(self.block_size));
        }
        if !(self.speedup.is_finite() && self.speedup > 0.0) {
            return Err(SimError::BadSpeedup(self.speedup));
        }
        let e = &self.engine;
        if !(e.prefill_tokens_per_s.is_finite() && e.prefill_tokens_per_s > 0.0)
            || e.max_batch == 0
            || e.capacity == 0
        {
            return Err(SimError::BadEngine);
        }
        Ok(())
    }
}

/// A trace prepared for simulation: every request's block hashes, computed once and shared by
/// every policy's run.
#[derive(Debug)]
pub struct SimInput {
    requests: Vec<SimRequest>,
    /// Blocks a single unlimited cache would have hit over the whole trace.
    oracle_hit_blocks: u64,
    block_size: u32,
}

#[derive(Debug)]
struct SimRequest {
    /// Arrival in trace seconds.
    arrival: f64,
    isl: usize,
    output: usize,
    hashes: RequestHashes,
}

impl SimInput {
    /// Hashes `trace` into blocks of `block_size` tokens (which must divide 512).
    pub fn new(trace: &[TraceRequest], block_size: u32) -> Result<Self, SimError> {
        if block_size == 0 || !TRACE_BLOCK_TOKENS.is_multiple_of(block_size) {
            return Err(SimError::BadBlockSize(block_size));
        }
        let hasher = BlockHasher::new(block_size).map_err(|_| SimError::BadBlockSize(0))?;
        let mut seen = AHashSet::new();
        let mut oracle_hit_blocks = 0;
        let requests = trace
            .iter()
            .map(|request| {
                let local = request.local_hashes(&hasher, 0);
                let sequence = sequence_hashes(&local);
                oracle_hit_blocks +=
                    sequence.iter().take_while(|s| seen.contains(*s)).count() as u64;
                seen.extend(sequence.iter().copied());
                SimRequest {
                    arrival: request.timestamp as f64 / 1000.0,
                    isl: request.token_count(),
                    output: request.output_length as usize,
                    hashes: RequestHashes { local, sequence },
                }
            })
            .collect();
        Ok(Self { requests, oracle_hit_blocks, block_size })
    }

    /// Requests in the trace.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether the trace is empty.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// The unlimited-cache oracle's block hit rate.
    pub fn oracle_hit_rate(&self) -> f64 {
        let requested: usize = self.requests.iter().map(|r| r.hashes.local.len()).sum();
        ratio(self.oracle_hit_blocks as f64, requested as f64)
    }
}

/// One bucket of trace time in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TimelinePoint {
    /// The bucket's end, in trace seconds.
    pub trace_seconds: f64,
    /// Block hit rate of the requests that arrived in it.
    pub hit_rate: f64,
    /// Median TTFT of those requests (simulated seconds).
    pub ttft_p50: f64,
}

/// What one policy's run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimResult {
    /// The policy.
    pub policy: Option<Policy>,
    /// Requests served.
    pub requests: usize,
    /// Realised block hit rate on the engines.
    pub hit_rate: f64,
    /// The unlimited-cache oracle's block hit rate on the same trace.
    pub oracle_hit_rate: f64,
    /// TTFT percentiles, simulated seconds.
    pub ttft_p50: f64,
    /// See `ttft_p50`.
    pub ttft_p99: f64,
    /// End-to-end latency percentiles, simulated seconds.
    pub e2e_p50: f64,
    /// See `e2e_p50`.
    pub e2e_p99: f64,
    /// Mean over arrivals of max/mean pinned blocks across workers.
    pub imbalance: f64,
    /// Wall time of one routing decision, microseconds.
    pub decision_p50_us: f64,
    /// See `decision_p50_us`.
    pub decision_p99_us: f64,
    /// KV events the router's index took, per wall second of the run.
    pub index_events_per_s: f64,
    /// KV events the router's index took.
    pub index_events: u64,
    /// Wall time of the run.
    pub wall: Duration,
    /// Hit rate and TTFT over trace time.
    pub timeline: Vec<TimelinePoint>,
}

/// What happens next in a run; ordered by time, then by when it was scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Arrive(usize),
    PrefillDone(usize),
    OutputBlock(usize),
    Finish(usize),
    /// A batch of KV events (index into the run's outbox) reaches the router.
    Deliver(usize),
}

/// Runs `policy` over `input`; `progress(done)` is called every 256 arrivals.
pub fn simulate(
    input: &SimInput,
    policy: Policy,
    config: &SimConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<SimResult, SimError> {
    config.validate()?;
    if config.block_size != input.block_size {
        return Err(SimError::BadBlockSize(config.block_size));
    }
    Run::new(input, policy, config)?.run(progress)
}

/// One policy's run.
struct Run<'a> {
    input: &'a SimInput,
    policy: Policy,
    config: &'a SimConfig,
    router: KvRouter,
    clock: ManualClock,
    now: f64,
    engines: Vec<Engine>,
    steps: BinaryHeap<Reverse<(u64, u64, Step)>>,
    scheduled: u64,
    outbox: Vec<Vec<RouterEvent>>,
    /// The router's index may lag the events delivered: flush before the next decision.
    stale: bool,
    // Per request: worker, arrival (sim s), first token, cached blocks.
    worker_of: Vec<usize>,
    first_token: Vec<f64>,
    cached: Vec<usize>,
    served: Vec<u64>,
    ttft: Vec<f64>,
    e2e: Vec<f64>,
    decisions_ns: Vec<u64>,
    imbalance_sum: f64,
    imbalance_samples: u64,
    index_events: u64,
}

impl<'a> Run<'a> {
    fn new(input: &'a SimInput, policy: Policy, config: &'a SimConfig) -> Result<Self, SimError> {
        let router_config = RouterConfig {
            seed: Some(config.seed),
            overlap_score_weight: config.overlap_score_weight,
            queued_prefill_weight: config.queued_prefill_weight,
            use_kv_events: policy != Policy::Approximate,
            // Requests may queue for long under overload: never expire them behind our back.
            expiry: None,
            ..RouterConfig::new(config.block_size)
        };
        let clock = ManualClock::new();
        let builder = KvRouter::builder(router_config).clock(clock.clone());
        let builder = match policy {
            Policy::RoundRobin => builder.selector(RoundRobin::default()),
            Policy::Random => builder.selector(Random),
            Policy::LeastLoaded => builder.selector(LeastLoaded),
            _ => builder,
        };
        let router = builder.build().map_err(SimError::Router)?;
        let engines = (0..config.workers)
            .map(|w| {
                let worker = Worker::new(w as u64, 0);
                router.add_worker(worker);
                Engine::new(worker, config.engine.clone(), config.block_size)
            })
            .collect();
        let n = input.len();
        let mut run = Self {
            input,
            policy,
            config,
            router,
            clock,
            now: 0.0,
            engines,
            steps: BinaryHeap::new(),
            scheduled: 0,
            outbox: Vec::new(),
            stale: false,
            worker_of: vec![usize::MAX; n],
            first_token: vec![0.0; n],
            cached: vec![0; n],
            served: vec![0; config.workers],
            ttft: Vec::with_capacity(n),
            e2e: Vec::with_capacity(n),
            decisions_ns: Vec::with_capacity(n),
            imbalance_sum: 0.0,
            imbalance_samples: 0,
            index_events: 0,
        };
        for (i, request) in input.requests.iter().enumerate() {
            run.schedule(request.arrival / config.speedup, Step::Arrive(i));
        }
        Ok(run)
    }

    fn schedule(&mut self, at: f64, step: Step) {
        let nanos = (at.max(0.0) * 1e9) as u64;
        self.steps.push(Reverse((nanos, self.scheduled, step)));
        self.scheduled += 1;
    }

    fn run(mut self, progress: &(dyn Fn(usize) + Sync)) -> Result<SimResult, SimError> {
        let started = Instant::now();
        let mut arrived = 0;
        while let Some(Reverse((nanos, _, step))) = self.steps.pop() {
            let now = nanos as f64 / 1e9;
            if now > self.now {
                self.clock.advance(Duration::from_secs_f64(now - self.now));
                self.now = now;
            }
            match step {
                Step::Arrive(i) => {
                    self.arrive(i);
                    arrived += 1;
                    if arrived % 256 == 0 {
                        progress(arrived);
                    }
                }
                Step::PrefillDone(i) => self.prefill_done(i),
                Step::OutputBlock(i) => {
                    if self.routed_by_router() {
                        let _ = self.router.add_output_block(&id(i));
                    }
                }
                Step::Finish(i) => self.finish(i),
                Step::Deliver(batch) => {
                    for event in std::mem::take(&mut self.outbox[batch]) {
                        self.router.apply_event(event).map_err(|_| SimError::IndexDown)?;
                        self.index_events += 1;
                        self.stale = true;
                    }
                }
            }
        }
        progress(arrived);
        Ok(self.result(started.elapsed()))
    }

    fn routed_by_router(&self) -> bool {
        self.policy != Policy::OracleInformed
    }

    fn arrive(&mut self, i: usize) {
        let request = &self.input.requests[i];
        let worker = if self.routed_by_router() {
            if self.stale || self.policy == Policy::Approximate {
                // Deterministic runs: the decision sees exactly the events delivered so far.
                let _ = self.router.flush();
                self.stale = false;
            }
            let ask = RouteRequest::hashes(&request.hashes.local, request.isl.max(1))
                .with_id(id(i))
                .update_states(true);
            let started = Instant::now();
            let decision = self.router.route(&ask);
            self.decisions_ns.push(started.elapsed().as_nanos() as u64);
            match decision {
                Ok(decision) => decision.worker.id.0 as usize,
                Err(_) => i % self.engines.len(),
            }
        } else {
            self.oracle_choice(i)
        };
        self.worker_of[i] = worker;
        self.served[worker] += 1;
        self.sample_imbalance();
        self.engines[worker].enqueue(i, request.isl, request.output);
        self.admit(worker);
    }

    /// The longest cached prefix among workers under their share, ties to the least used.
    fn oracle_choice(&self, i: usize) -> usize {
        let n = self.served.iter().sum::<u64>() as f64 + 1.0;
        let bound = 1.25 * n / self.engines.len() as f64;
        let sequence = &self.input.requests[i].hashes.sequence;
        let eligible =
            (0..self.engines.len()).filter(|&w| (self.served[w] as f64) < bound.max(1.0));
        let best = eligible.max_by_key(|&w| {
            let cached = self.engines[w].kv().cached_prefix(sequence);
            (cached, Reverse(self.served[w]), Reverse(w))
        });
        best.unwrap_or_else(|| (0..self.engines.len()).min_by_key(|&w| self.served[w]).unwrap_or(0))
    }

    fn sample_imbalance(&mut self) {
        let pinned = self.engines.iter().map(|e| e.pinned_blocks() as f64);
        let (max, sum) = pinned.fold((0.0f64, 0.0), |(m, s), p| (m.max(p), s + p));
        if sum > 0.0 {
            self.imbalance_sum += max / (sum / self.engines.len() as f64);
            self.imbalance_samples += 1;
        }
    }

    fn admit(&mut self, worker: usize) {
        let (mut events, mut admitted) = (Vec::new(), Vec::new());
        let requests = &self.input.requests;
        self.engines[worker].admit(self.now, |r| &requests[r].hashes, &mut events, &mut admitted);
        for Admitted { request, prefill_end, outcome, .. } in admitted {
            self.cached[request] = outcome.cached;
            self.schedule(prefill_end, Step::PrefillDone(request));
            if !events.is_empty() && self.policy != Policy::Approximate {
                self.outbox.push(std::mem::take(&mut events));
                let batch = self.outbox.len() - 1;
                self.schedule(
                    prefill_end + self.config.event_delay.as_secs_f64(),
                    Step::Deliver(batch),
                );
            }
            events.clear();
        }
    }

    fn prefill_done(&mut self, i: usize) {
        let request = &self.input.requests[i];
        let arrival = request.arrival / self.config.speedup;
        self.first_token[i] = self.now;
        self.ttft.push(self.now - arrival);
        if self.routed_by_router() {
            let _ = self.router.mark_prefill_completed(&id(i));
        }
        let model = self.engines[self.worker_of[i]].model().clone();
        let block_size = self.config.block_size as usize;
        let end = self.now + model.decode_seconds(request.output);
        for k in 1..=request.output / block_size {
            let at = self.now + model.decode_seconds(k * block_size);
            self.schedule(at, Step::OutputBlock(i));
        }
        self.schedule(end, Step::Finish(i));
    }

    fn finish(&mut self, i: usize) {
        let request = &self.input.requests[i];
        self.e2e.push(self.now - request.arrival / self.config.speedup);
        if self.routed_by_router() {
            let _ = self.router.free(&id(i));
        }
        let worker = self.worker_of[i];
        self.engines[worker].finish(request.isl, request.output);
        self.admit(worker);
    }

    fn result(mut self, wall: Duration) -> SimResult {
        let requested: usize = self.input.requests.iter().map(|r| r.hashes.local.len()).sum();
        let hits: usize = self.cached.iter().sum();
        let timeline = self.timeline();
        self.ttft.sort_by(f64::total_cmp);
        self.e2e.sort_by(f64::total_cmp);
        self.decisions_ns.sort_unstable();
        let decision = |q| percentile(&self.decisions_ns, q) as f64 / 1000.0;
        SimResult {
            policy: Some(self.policy),
            requests: self.input.len(),
            hit_rate: ratio(hits as f64, requested as f64),
            oracle_hit_rate: self.input.oracle_hit_rate(),
            ttft_p50: percentile_f(&self.ttft, 0.5),
            ttft_p99: percentile_f(&self.ttft, 0.99),
            e2e_p50: percentile_f(&self.e2e, 0.5),
            e2e_p99: percentile_f(&self.e2e, 0.99),
            imbalance: ratio(self.imbalance_sum, self.imbalance_samples as f64),
            decision_p50_us: decision(0.5),
            decision_p99_us: decision(0.99),
            index_events_per_s: self.index_events as f64 / wall.as_secs_f64().max(1e-9),
            index_events: self.index_events,
            wall,
            timeline,
        }
    }

    fn timeline(&self) -> Vec<TimelinePoint> {
        let requests = &self.input.requests;
        let end = requests.iter().map(|r| r.arrival).fold(0.0, f64::max).max(1e-9);
        let buckets = self.config.timeline_buckets.max(1);
        let bucket_of =
            |arrival: f64| (((arrival / end) * buckets as f64) as usize).min(buckets - 1);
        let mut hit = vec![(0usize, 0usize); buckets];
        let mut ttfts = vec![Vec::new(); buckets];
        for (i, request) in requests.iter().enumerate() {
            let b = bucket_of(request.arrival);
            hit[b].0 += self.cached[i];
            hit[b].1 += request.hashes.local.len();
            ttfts[b].push(self.first_token[i] - request.arrival / self.config.speedup);
        }
        (0..buckets)
            .map(|b| {
                ttfts[b].sort_by(f64::total_cmp);
                TimelinePoint {
                    trace_seconds: end * (b + 1) as f64 / buckets as f64,
                    hit_rate: ratio(hit[b].0 as f64, hit[b].1 as f64),
                    ttft_p50: percentile_f(&ttfts[b], 0.5),
                }
            })
            .collect()
    }
}

fn id(i: usize) -> RequestId {
    RequestId::from(i.to_string())
}

fn ratio(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn percentile_f(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}
