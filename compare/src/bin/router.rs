//! Side by side: one routing decision by `kvroute::KvRouter::route` against Dynamo 1.6.1's own
//! path for the same decision, on identical state.
//!
//! `cargo run --release -p kvroute-compare --bin router [-- --runs N --queries Q --approximate --cold]`
//!
//! State, per fleet size (16, 64 and 256 workers): the bundled conversation trace replayed
//! through `kvroute::sim`'s mock fleet of that many workers (64-token blocks, one engine hash
//! per prefix as Dynamo's setup asks), its events loaded into both indexes; then the trace's
//! last 16 × W requests made active on the worker holding most of each (ties by index), both
//! trackers given the same requests, three in four with their prefill done.
//!
//! Queries: trace requests as 128-block prompts of 64-token blocks (8,192 tokens: the
//! request's own tokens, cut there or padded with tokens no one holds), each copied into one
//! buffer (untimed) right before its decision, as tokens fresh from a tokenizer would be.
//!
//! Dynamo's path, as its router runs it for a query-only decision and all synchronous (its
//! async wrappers only add a future): **hash** `compute_block_hash_for_seq` and
//! `compute_seq_hash_for_block`; **match** `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>`
//! `backend().find_matches`; **load** `OverlapAnalysis::signals` over the device match and
//! `ActiveSequencesMultiWorker::project_worker_loads`; **select** a `SchedulingRequest` handed to
//! `DefaultWorkerSelector` (the `bench` feature exposes it). kvroute's: `KvRouter::route`, the
//! whole call; its stages timed on their own through the public pieces it is made of
//! (`BlockHasher::hash_request_into`, `TieredIndex::find_matches`,
//! `MultiWorkerSequences::potential_loads`), select being the rest of the call.
//!
//! **`--cold`**: each decision reads its prompt where it is stored instead of from a fresh
//! copy: 2,000 prompts of 32 KiB (64 MiB) taken in turn are out of every cache, as a router's
//! prompts are when they come from a queue or another thread's buffers.
//!
//! **`--approximate`**: both routers index their own decisions instead of KV events. The state
//! is then the trace's requests (their first 128 blocks) routed by kvroute in approximate mode,
//! each decision also recorded in Dynamo's approximate indexer
//! (`ThreadPoolIndexer::new_with_pruning`, default TTL) for the same worker, so both start from
//! the same presumed blocks; and every timed decision of each subject records itself: kvroute's
//! `route` as it is, Dynamo's path above followed by its
//! `process_routing_decision_hash_slices`, awaited as its router awaits it.
//!
//! Totals are timed without stage timers; stages in a separate pass. Both subjects are timed
//! in alternating rounds in one process (each round: every prompt in a row by one subject,
//! then by the other), so machine noise weighs on both alike.

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::time::Instant;

use dynamo_kv_router::approx::PruneConfig;
use dynamo_kv_router::indexer::{MatchDetails, SyncIndexer, ThreadPoolIndexer, TieredMatchDetails};
use dynamo_kv_router::protocols::{
    self as dy, BlockHashOptions, RoutingConstraints, WorkerConfigLike, WorkerId, WorkerWithDpRank,
};
use dynamo_kv_router::scheduling::{OverlapAnalysis, ScheduleMode};
use dynamo_kv_router::{
    ActiveSequencesMultiWorker, ConcurrentRadixTreeCompressed, DefaultWorkerSelector,
    KvRouterConfig, NoopSequencePublisher, SchedulingRequest, SequenceRequest,
    WorkerSelectionInput, WorkerSelector,
};
use kvroute::hash::{BlockHasher, RequestHashes};
use kvroute::sequences::RequestId;
use kvroute::sim::trace::{TraceRequest, load_trace};
use kvroute::sim::{FleetConfig, bundled_trace_path, replay_fleet};
use kvroute::{KvRouter, RouteRequest, RouterConfig, Worker};
use kvroute_compare::convert;
use kvroute_compare::latency::percentile;
use kvroute_compare::workload::shared_engine_hashes;

const BLOCK_SIZE: u32 = 64;
const PROMPT_BLOCKS: usize = 128;
const PROMPT_TOKENS: usize = PROMPT_BLOCKS * BLOCK_SIZE as usize;
const ACTIVE_PER_WORKER: usize = 16;
const FLEETS: [usize; 3] = [16, 64, 256];
const LANES: usize = 2;

struct Args {
    runs: usize,
    queries: usize,
    approximate: bool,
    cold: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { runs: 3, queries: 2_000, approximate: false, cold: false };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("{name} needs a positive integer"))
        };
        match flag.as_str() {
            "--runs" => args.runs = value("--runs")?,
            "--queries" => args.queries = value("--queries")?,
            "--approximate" => args.approximate = true,
            "--cold" => args.cold = true,
            other => {
                return Err(format!(
                    "unknown flag {other}; usage: router [--runs N] [--queries Q] [--approximate] [--cold]"
                ));
            }
        }
    }
    Ok(args)
}

/// A request's prompt as exactly [`PROMPT_TOKENS`] tokens.
fn prompt(request: &TraceRequest, filler: u32) -> Vec<u32> {
    let mut tokens: Vec<u32> = request.token_iter(0).take(PROMPT_TOKENS).collect();
    let start = tokens.len() as u32;
    // Tokens above the trace's range (its tokens are below 2^31): held by no worker.
    tokens.extend((start..PROMPT_TOKENS as u32).map(|i| 0x8000_0000 | (filler << 14) | i));
    tokens
}

/// What Dynamo's selector reads of a worker's configuration.
#[derive(Default)]
struct Config {
    taints: HashSet<String>,
}

impl WorkerConfigLike for Config {
    fn data_parallel_start_rank(&self) -> u32 {
        0
    }
    fn data_parallel_size(&self) -> u32 {
        1
    }
    fn max_num_batched_tokens(&self) -> Option<u64> {
        None
    }
    fn total_kv_blocks(&self) -> Option<u64> {
        None
    }
    fn taints(&self) -> &HashSet<String> {
        &self.taints
    }
}

struct Dynamo {
    indexer: ThreadPoolIndexer<ConcurrentRadixTreeCompressed>,
    sequences: ActiveSequencesMultiWorker<NoopSequencePublisher>,
    selector: DefaultWorkerSelector,
    config: KvRouterConfig,
    workers: HashMap<WorkerId, Config>,
    /// Approximate mode: the runtime its decisions are recorded on.
    approximate: Option<tokio::runtime::Runtime>,
}

/// Nanoseconds of Dynamo's four stages.
type Stages = [u64; 4];

impl Dynamo {
    fn new(workers: usize, approximate: bool) -> Self {
        let ranges: HashMap<u64, (u32, u32)> = (0..workers as u64).map(|w| (w, (0, 1))).collect();
        let config = KvRouterConfig::default();
        Self {
            indexer: match approximate {
                false => {
                    ThreadPoolIndexer::new(ConcurrentRadixTreeCompressed::new(), LANES, BLOCK_SIZE)
                }
                true => ThreadPoolIndexer::new_with_pruning(
                    ConcurrentRadixTreeCompressed::new(),
                    LANES,
                    BLOCK_SIZE,
                    PruneConfig::default(),
                ),
            },
            sequences: ActiveSequencesMultiWorker::new(
                NoopSequencePublisher,
                BLOCK_SIZE as usize,
                ranges,
                false,
                0,
                "decode",
            ),
            selector: DefaultWorkerSelector::new(Some(config.clone()), "decode"),
            config,
            workers: (0..workers as u64).map(|w| (w, Config::default())).collect(),
            approximate: approximate
                .then(|| tokio::runtime::Builder::new_current_thread().build().expect("runtime")),
        }
    }

    /// Approximate mode: records that a prompt went to `worker`, and waits until it is indexed.
    fn record(&self, worker: WorkerWithDpRank, local: &[dy::LocalBlockHash], sequence: &[u64]) {
        if let Some(runtime) = &self.approximate {
            let recorded =
                self.indexer.process_routing_decision_hash_slices(worker, local, sequence);
            runtime.block_on(recorded).expect("dynamo records the decision");
        }
    }

    fn add(&self, id: &str, worker: usize, sequence: &[u64], isl: usize, overlap: u32, done: bool) {
        let request = SequenceRequest {
            request_id: id.to_string(),
            token_sequence: Some(sequence.to_vec()),
            track_prefill_tokens: true,
            expected_output_tokens: None,
            prefill_load_hint: Some(dy::PrefillLoadHint {
                initial_effective_prefill_tokens: isl - overlap as usize * BLOCK_SIZE as usize,
                expected_prefill_duration: None,
            }),
            worker: WorkerWithDpRank::new(worker as u64, 0),
            lora_name: None,
        };
        let now = tokio::time::Instant::now();
        self.sequences.add_request(request, now).expect("dynamo add");
        if done {
            self.sequences.mark_prefill_completed(&id.to_string(), now).expect("dynamo prefill");
        }
    }

    /// One decision; `stages` (when given) receives each stage's time.
    fn route(&self, tokens: &[u32], stages: Option<&mut Stages>) -> (WorkerWithDpRank, f64) {
        let mut clock = Instant::now();
        let mut lap = |stages: &mut Option<&mut Stages>, at: usize| {
            if let Some(stages) = stages {
                let now = Instant::now();
                stages[at] += (now - clock).as_nanos() as u64;
                clock = now;
            }
        };
        let mut stages = stages;
        let local = dy::compute_block_hash_for_seq(tokens, BLOCK_SIZE, BlockHashOptions::default());
        let sequence = dy::compute_seq_hash_for_block(&local);
        lap(&mut stages, 0);
        let overlap_scores = self.indexer.backend().find_matches(&local, false);
        lap(&mut stages, 1);
        let tiered = TieredMatchDetails {
            device: MatchDetails {
                overlap_scores,
                last_matched_hashes: Default::default(),
                kv_transfer_candidates: None,
            },
            lower_tier: HashMap::new(),
        };
        let overlap = OverlapAnalysis::new(&self.config, BLOCK_SIZE, &tiered).signals();
        let worker_loads =
            self.sequences.project_worker_loads(Some(&sequence), tokio::time::Instant::now());
        lap(&mut stages, 2);
        let request = SchedulingRequest {
            mode: ScheduleMode::QueryOnly { request_id: None },
            token_seq: Some(sequence),
            isl_tokens: tokens.len(),
            lora_name: None,
            expected_output_tokens: None,
            affinity_target: None,
            pinned_worker: None,
            allowed_worker_ids: None,
            routing_constraints: RoutingConstraints::default(),
            router_config_override: None,
            track_prefill_tokens: true,
            priority_jump: 0.0,
            strict_priority: 0,
            policy_class: None,
            session_context: None,
            overlap,
            kv_transfer_candidates: None,
            retain_kv_transfer_chain: false,
            shared_cache_hits: None,
            worker_loads,
            resp_tx: None,
        };
        let input = WorkerSelectionInput::configured(
            &self.workers,
            &request,
            request.eligibility(),
            BLOCK_SIZE,
        );
        let selected = self.selector.select_worker(input).expect("dynamo selects a worker");
        if let Some(sequence) = &request.token_seq {
            self.record(selected.worker, &local, sequence);
        }
        lap(&mut stages, 3);
        (selected.worker, selected.effective_overlap_blocks)
    }
}

struct Ours {
    router: KvRouter,
    hasher: BlockHasher,
}

impl Ours {
    fn new(workers: usize, approximate: bool) -> Self {
        let config = RouterConfig { use_kv_events: !approximate, ..RouterConfig::new(BLOCK_SIZE) };
        let router = KvRouter::new(config).expect("default config");
        for w in 0..workers as u64 {
            router.add_worker(Worker::new(w, 0));
        }
        Self { router, hasher: BlockHasher::new(BLOCK_SIZE).expect("block size") }
    }

    fn route(&self, tokens: &[u32]) -> (Worker, u32) {
        let decision = self.router.route(&RouteRequest::tokens(tokens)).expect("kvroute routes");
        (decision.worker, decision.overlap_blocks)
    }

    /// The stages timed on their own: hash, match, load; select is the whole call minus them.
    fn stages(&self, tokens: &[u32], hashes: &mut RequestHashes, bytes: &mut Vec<u8>) -> Stages {
        let start = Instant::now();
        self.hasher.hash_request_into(tokens, &[], hashes, bytes);
        let hashed = Instant::now();
        let scores = self.router.index().find_matches(&hashes.local);
        let matched = Instant::now();
        let loads =
            self.router.sequences().potential_loads(&hashes.sequence, tokens.len(), &scores.device);
        let loaded = Instant::now();
        black_box((scores, loads));
        let whole = Instant::now();
        black_box(self.route(tokens));
        let total = whole.elapsed().as_nanos() as u64;
        let hash = (hashed - start).as_nanos() as u64;
        let matching = (matched - hashed).as_nanos() as u64;
        let load = (loaded - matched).as_nanos() as u64;
        [hash, matching, load, total.saturating_sub(hash + matching + load)]
    }
}

/// One fleet size's state in both subjects, and the queries.
fn build(
    trace: &[TraceRequest],
    workers: usize,
    queries: usize,
    approximate: bool,
) -> (Dynamo, Ours, Vec<Vec<u32>>) {
    let dynamo = Dynamo::new(workers, approximate);
    let ours = Ours::new(workers, approximate);
    if approximate {
        // The same decisions in both: kvroute's, recorded by Dynamo for the same worker.
        for request in trace {
            let tokens: Vec<u32> = request.token_iter(0).take(PROMPT_TOKENS).collect();
            let (worker, _) = ours.route(&tokens);
            let hashes = ours.hasher.hash_request(&tokens);
            let local: Vec<dy::LocalBlockHash> =
                hashes.local.iter().map(|h| dy::LocalBlockHash(h.0)).collect();
            let sequence: Vec<u64> = hashes.sequence.iter().map(|h| h.0).collect();
            dynamo.record(WorkerWithDpRank::new(worker.id.0, 0), &local, &sequence);
        }
    } else {
        let config = FleetConfig { workers, ..FleetConfig::default() };
        let replay = replay_fleet(trace, &config);
        for event in &shared_engine_hashes(&replay.events) {
            dynamo.indexer.enqueue_event(convert::to_dynamo(event)).expect("dynamo enqueue");
            ours.router.apply_event(event.clone()).expect("kvroute lanes are up");
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    runtime.block_on(dynamo.indexer.flush_and_wait()).expect("dynamo flush");
    ours.router.flush().expect("kvroute flush");

    let active = (ACTIVE_PER_WORKER * workers).min(trace.len());
    for (i, request) in trace[trace.len() - active..].iter().enumerate() {
        let tokens = prompt(request, i as u32);
        let hashes = ours.hasher.hash_request(&tokens);
        let scores = ours.router.index().device().find_matches(&hashes.local);
        let (worker, overlap) = (0..workers)
            .map(|w| (w, scores.get(Worker::new(w as u64, 0))))
            .max_by_key(|&(w, overlap)| (overlap, std::cmp::Reverse(w)))
            .expect("workers");
        let id = format!("active-{i}");
        let done = i % 4 != 0;
        let sequence: Vec<u64> = hashes.sequence.iter().map(|h| h.0).collect();
        dynamo.add(&id, worker, &sequence, tokens.len(), overlap, done);
        let rid = RequestId::from(id);
        ours.router.add_request(rid.clone(), &tokens, Worker::new(worker as u64, 0)).expect("add");
        if done {
            ours.router.mark_prefill_completed(&rid).expect("known");
        }
    }
    let step = (trace.len() / queries).max(1);
    let prompts = (0..queries).map(|q| prompt(&trace[(q * step) % trace.len()], 0x3000 + q as u32));
    (dynamo, ours, prompts.collect())
}

#[derive(Default)]
struct Timings {
    dynamo: Vec<u64>,
    ours: Vec<u64>,
    dynamo_stages: Stages,
    our_stages: Stages,
    same_worker: usize,
    same_overlap: usize,
    decisions: usize,
}

fn time<T>(f: impl FnOnce() -> T) -> u64 {
    let start = Instant::now();
    black_box(f());
    start.elapsed().as_nanos() as u64
}

/// The prompt a timed decision reads: where it is stored (`cold`), or copied into `fresh` first.
fn timed_prompt<'a>(stored: &'a [u32], fresh: &'a mut Vec<u32>, cold: bool) -> &'a [u32] {
    if cold {
        return stored;
    }
    fresh.clear();
    fresh.extend_from_slice(stored);
    fresh
}

fn measure(dynamo: &Dynamo, ours: &Ours, prompts: &[Vec<u32>], cold: bool) -> Timings {
    const ROUNDS: usize = 6;
    let mut t = Timings::default();
    // Warm-up and agreement: the same decision on the same state.
    for tokens in prompts {
        let (theirs, their_overlap) = dynamo.route(tokens, None);
        let (mine, my_overlap) = ours.route(tokens);
        t.same_worker += usize::from(theirs.worker_id == mine.id.0);
        t.same_overlap += usize::from(their_overlap.round() as u32 == my_overlap);
        t.decisions += 1;
    }
    // Rounds alternate which subject goes first; within a round each times every prompt in a
    // row, as a router serving a stream of requests would.
    for round in 0..ROUNDS {
        // Each prompt is copied into one buffer before its (timed) decision: a router gets
        // the tokens fresh from its tokenizer, in cache, not from 32 MB of stored prompts.
        // With `cold`, each decision reads the prompt where it is stored.
        let mut fresh = Vec::with_capacity(PROMPT_TOKENS);
        let mut dynamo_round = |samples: &mut Vec<u64>| {
            for tokens in prompts {
                let tokens = timed_prompt(tokens, &mut fresh, cold);
                samples.push(time(|| dynamo.route(tokens, None)));
            }
        };
        let mut fresh = Vec::with_capacity(PROMPT_TOKENS);
        let mut our_round = |samples: &mut Vec<u64>| {
            for tokens in prompts {
                let tokens = timed_prompt(tokens, &mut fresh, cold);
                samples.push(time(|| ours.route(tokens)));
            }
        };
        if round % 2 == 0 {
            dynamo_round(&mut t.dynamo);
            our_round(&mut t.ours);
        } else {
            our_round(&mut t.ours);
            dynamo_round(&mut t.dynamo);
        }
    }
    let (mut hashes, mut bytes) = (RequestHashes::default(), Vec::new());
    let mut fresh = Vec::with_capacity(PROMPT_TOKENS);
    for tokens in prompts {
        fresh.clone_from(tokens);
        dynamo.route(&fresh, Some(&mut t.dynamo_stages));
        fresh.clone_from(tokens);
        let stages = ours.stages(&fresh, &mut hashes, &mut bytes);
        for (sum, ns) in t.our_stages.iter_mut().zip(stages) {
            *sum += ns;
        }
    }
    t
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let path = bundled_trace_path();
    let trace = load_trace(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
    let mode = if args.approximate { "approximate mode (no KV events)" } else { "KV events" };
    let mode = if args.cold { format!("{mode}, cold prompts") } else { mode.to_string() };
    println!(
        "route, {mode}: {} trace requests; prompts of {PROMPT_BLOCKS} x {BLOCK_SIZE}-token blocks; \
         {ACTIVE_PER_WORKER} active requests per worker; {} timed decisions per subject per run; \
         {} runs",
        trace.len(),
        args.queries * 6,
        args.runs,
    );
    let mut rows = Vec::new();
    for workers in FLEETS {
        let (dynamo, ours, prompts) = build(&trace, workers, args.queries, args.approximate);
        let mut per_run = Vec::new();
        for run in 0..args.runs {
            let mut t = measure(&dynamo, &ours, &prompts, args.cold);
            let n = prompts.len() as f64 * 1e3;
            let stage = |s: &Stages| s.map(|ns| ns as f64 / n);
            let figures = [
                percentile(&mut t.dynamo, 50.0).unwrap_or(0) as f64 / 1e3,
                percentile(&mut t.dynamo, 99.0).unwrap_or(0) as f64 / 1e3,
                percentile(&mut t.ours, 50.0).unwrap_or(0) as f64 / 1e3,
                percentile(&mut t.ours, 99.0).unwrap_or(0) as f64 / 1e3,
            ];
            let (ds, os) = (stage(&t.dynamo_stages), stage(&t.our_stages));
            println!(
                "{workers:>3} workers run {run}: p50/p99 dynamo {:.2}/{:.2} us, kvroute {:.2}/{:.2} \
                 us; mean stages hash/match/load/select dynamo {:.2}/{:.2}/{:.2}/{:.2}, kvroute \
                 {:.2}/{:.2}/{:.2}/{:.2} us; same worker {:.1}%, same overlap {:.1}%",
                figures[0],
                figures[1],
                figures[2],
                figures[3],
                ds[0],
                ds[1],
                ds[2],
                ds[3],
                os[0],
                os[1],
                os[2],
                os[3],
                100.0 * t.same_worker as f64 / t.decisions as f64,
                100.0 * t.same_overlap as f64 / t.decisions as f64,
            );
            per_run.push((figures, ds, os));
        }
        rows.push((workers, per_run));
    }
    println!();
    println!("medians over {} runs (ratio: median of kvroute / dynamo within each run)", args.runs);
    println!(
        "{:>7} | {:>15} | {:>15} | {:>11} | {:>27} | {:>27}",
        "workers",
        "dynamo p50/p99",
        "kvroute p50/p99",
        "ratio",
        "dynamo hash/match/load/sel",
        "kvroute hash/match/load/sel"
    );
    for (workers, per_run) in rows {
        let med = |i: usize| median(per_run.iter().map(|(f, _, _)| f[i]).collect());
        let ratio =
            |i: usize, j: usize| median(per_run.iter().map(|(f, _, _)| f[j] / f[i]).collect());
        let stages = |mine: bool| -> String {
            (0..4)
                .map(|s| {
                    let v = median(
                        per_run.iter().map(|(_, d, o)| if mine { o[s] } else { d[s] }).collect(),
                    );
                    format!("{v:.2}")
                })
                .collect::<Vec<_>>()
                .join("/")
        };
        println!(
            "{workers:>7} | {:>15} | {:>15} | {:>11} | {:>27} | {:>27}",
            format!("{:.2}/{:.2}", med(0), med(1)),
            format!("{:.2}/{:.2}", med(2), med(3)),
            format!("{:.2}/{:.2}", ratio(0, 2), ratio(1, 3)),
            stages(false),
            stages(true),
        );
    }
    println!("times in microseconds; stages are means of a separate pass (kvroute's select = the");
    println!("whole route minus its hash, match and load timed on their own)");
}
