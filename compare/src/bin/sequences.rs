//! Side by side: kvroute's `MultiWorkerSequences` against dynamo-kv-router 1.6.1's
//! `ActiveSequencesMultiWorker` (both synchronous), on identical state.
//!
//! SequenceLoad (fixed seed), one per shape (`--shapes`, default all three of
//! `kvroute::sim::load::LoadShape`): `conversation` is 64 workers × 1,000 active requests of
//! 100–200 blocks (16 tokens each); every request starts with a 32-block system prompt shared by
//! all, then the context of one of its worker's 32 conversations (0–48 blocks, shared by ~31
//! requests), then its own tail. Candidates are 256 blocks: system prompt + a random
//! conversation's context + a fresh tail; the prefix index says every worker holds the system
//! prompt and the conversation's worker holds the context too. `documents` has no system prompt
//! and 4,096 documents each held by 3 workers (requests of 20–40 blocks); `shared-fleet` has 256
//! contexts held by every worker (requests of 40–60 blocks).
//!
//! Measured per subject: add+free churn pairs/s (one thread; each pair frees a random request and
//! adds a fresh one to the same worker, request generation included for both); latency of the
//! all-worker potential-load query, quiescent, while another thread churns as fast as it can (so
//! the faster tracker also carries more churn), and while it churns at a fixed pace (the same load
//! on both); bytes per active
//! request (RSS delta of a child process that builds only that subject's state). Both states
//! live in one process and are measured in alternating rounds, so machine noise hits both alike.
//!
//! `cargo run --release -p kvroute-compare --bin sequences [-- --runs N] [--shapes a,b]
//! [--worker-shards N]`

use std::collections::HashMap;
use std::hint::black_box;
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dynamo_kv_router::protocols::{PrefillLoadHint, WorkerWithDpRank};
use dynamo_kv_router::{
    ActiveSequencesMultiWorker, NoopSequencePublisher, PrefillTokenDeltas, SequenceRequest,
};
use kvroute::sequences::{MultiWorkerSequences, PotentialLoad, RequestId};
use kvroute::sim::load::{LoadCandidate, LoadRng, LoadShape, SequenceLoad};
use kvroute::{OverlapScores, SequenceHash, Worker};

const CHURN_PAIRS: usize = 200_000;
const QUERIES: usize = 20_000;
const SEED: u64 = 0x5EED_2026;
/// One churn pair every 100 µs (≈ 10,000 pairs/s, which both subjects sustain while queried):
/// the "under paced churn" rows put the same load on both.
const PACE: Duration = Duration::from_micros(100);

/// `--worker-shards N`: kvroute's worker shards (default: the builder's), set once in `main`.
static WORKER_SHARDS: OnceLock<Option<usize>> = OnceLock::new();

/// What both trackers are driven through.
trait Subject: Sync + Sized {
    type Id: Clone + Send;
    type Query: Sync;
    fn new(shape: &LoadShape) -> Self;
    fn id(name: String) -> Self::Id;
    fn add(&self, id: Self::Id, worker: usize, blocks: Vec<SequenceHash>, isl: usize, overlap: u32);
    fn free(&self, id: &Self::Id);
    fn prepare(&self, candidate: &LoadCandidate) -> Self::Query;
    /// Runs the all-worker query; returns (worker, potential blocks, potential tokens) sorted.
    fn query(&self, query: &Self::Query) -> Vec<(u64, usize, usize)>;
    /// The query as timed: as little post-processing as the API allows.
    fn query_timed(&self, query: &Self::Query) -> usize;
}

struct Dynamo(ActiveSequencesMultiWorker<NoopSequencePublisher>, usize);

struct DynamoQuery {
    blocks: Vec<u64>,
    deltas: PrefillTokenDeltas,
}

impl Subject for Dynamo {
    type Id = String;
    type Query = DynamoQuery;

    fn new(shape: &LoadShape) -> Self {
        let ranges: HashMap<u64, (u32, u32)> =
            (0..shape.workers as u64).map(|w| (w, (0, 1))).collect();
        let tracker = ActiveSequencesMultiWorker::new(
            NoopSequencePublisher,
            shape.block_size,
            ranges,
            false,
            0,
            "decode",
        );
        Self(tracker, shape.block_size)
    }

    fn id(name: String) -> String {
        name
    }

    fn add(&self, id: String, worker: usize, blocks: Vec<SequenceHash>, isl: usize, overlap: u32) {
        let blocks = blocks.into_iter().map(|block| block.0).collect();
        let tokens = isl - overlap as usize * self.1;
        let request = SequenceRequest {
            request_id: id,
            token_sequence: Some(blocks),
            track_prefill_tokens: true,
            expected_output_tokens: None,
            prefill_load_hint: Some(PrefillLoadHint {
                initial_effective_prefill_tokens: tokens,
                expected_prefill_duration: None,
            }),
            worker: WorkerWithDpRank::new(worker as u64, 0),
            lora_name: None,
        };
        self.0.add_request(request, tokio::time::Instant::now()).expect("dynamo add");
    }

    fn free(&self, id: &String) {
        self.0.free(id, tokio::time::Instant::now()).expect("dynamo free");
    }

    fn prepare(&self, candidate: &LoadCandidate) -> DynamoQuery {
        let mut by_worker = HashMap::default();
        let home_tokens = candidate.isl - candidate.home_overlap * self.1;
        for &holder in &candidate.holders {
            by_worker.insert(WorkerWithDpRank::new(holder as u64, 0), home_tokens);
        }
        let default_tokens = candidate.isl - candidate.shared_overlap * self.1;
        let deltas = PrefillTokenDeltas::new(default_tokens, by_worker);
        DynamoQuery { blocks: candidate.blocks.iter().map(|block| block.0).collect(), deltas }
    }

    fn query(&self, query: &DynamoQuery) -> Vec<(u64, usize, usize)> {
        let (blocks, tokens, _) =
            self.0.potential_blocks_and_tokens::<false>(Some(&query.blocks), &query.deltas);
        let mut out: Vec<_> = blocks
            .iter()
            .map(|(w, &b)| (w.worker_id, b, tokens.get(w).copied().unwrap_or(0)))
            .collect();
        out.sort_unstable();
        out
    }

    fn query_timed(&self, query: &DynamoQuery) -> usize {
        let (blocks, tokens, _) =
            self.0.potential_blocks_and_tokens::<false>(Some(&query.blocks), &query.deltas);
        blocks.len() + tokens.len()
    }
}

struct Ours(MultiWorkerSequences);

struct OurQuery {
    blocks: Vec<SequenceHash>,
    isl: usize,
    overlaps: OverlapScores,
}

impl Subject for Ours {
    type Id = RequestId;
    type Query = OurQuery;

    fn new(shape: &LoadShape) -> Self {
        let mut builder = MultiWorkerSequences::builder(shape.block_size as u32);
        if let Some(shards) = WORKER_SHARDS.get().copied().flatten() {
            builder = builder.worker_shards(shards);
        }
        let tracker = builder.build().expect("config");
        tracker.update_workers((0..shape.workers as u64).map(|w| Worker::new(w, 0)));
        Self(tracker)
    }

    fn id(name: String) -> RequestId {
        RequestId::from(name)
    }

    fn add(
        &self,
        id: RequestId,
        worker: usize,
        blocks: Vec<SequenceHash>,
        isl: usize,
        overlap: u32,
    ) {
        let worker = Worker::new(worker as u64, 0);
        self.0.add_request(id, worker, Some(&blocks), isl, overlap).expect("kvroute add");
    }

    fn free(&self, id: &RequestId) {
        self.0.free(id).expect("kvroute free");
    }

    fn prepare(&self, candidate: &LoadCandidate) -> OurQuery {
        OurQuery {
            blocks: candidate.blocks.clone(),
            isl: candidate.isl,
            overlaps: candidate.overlaps(),
        }
    }

    fn query(&self, query: &OurQuery) -> Vec<(u64, usize, usize)> {
        let loads = self.0.potential_loads(&query.blocks, query.isl, &query.overlaps);
        let mut out: Vec<_> =
            loads.iter().map(|l| (l.worker.id.0, l.potential_blocks, l.potential_tokens)).collect();
        out.sort_unstable();
        out
    }

    fn query_timed(&self, query: &OurQuery) -> usize {
        let loads: Vec<PotentialLoad> =
            self.0.potential_loads(&query.blocks, query.isl, &query.overlaps);
        loads.len()
    }
}

/// A subject with its active requests (per worker, in slots) and the generators.
struct Fleet<S: Subject> {
    subject: S,
    active: Vec<Vec<S::Id>>,
}

/// Builds the state; `keep_ids` keeps the driver's list of active ids (not kept when only the
/// subject's own memory is measured).
fn build<S: Subject>(workload: &SequenceLoad, rng: &mut LoadRng, keep_ids: bool) -> Fleet<S> {
    let shape = workload.shape();
    let subject = S::new(shape);
    let mut active: Vec<Vec<S::Id>> = (0..shape.workers).map(|_| Vec::new()).collect();
    for slot in 0..shape.requests_per_worker {
        for (worker, ids) in active.iter_mut().enumerate() {
            let (blocks, isl, overlap) = workload.request(rng, worker);
            let id = S::id(format!("w{worker}-r{slot}"));
            if keep_ids {
                ids.push(id.clone());
            }
            subject.add(id, worker, blocks, isl, overlap);
        }
    }
    Fleet { subject, active }
}

/// One churn pair: free a random request, add a fresh one to the same worker.
fn churn_pair<S: Subject>(
    subject: &S,
    active: &mut [Vec<S::Id>],
    workload: &SequenceLoad,
    rng: &mut LoadRng,
    counter: &mut u64,
) {
    let worker = rng.below(workload.shape().workers);
    let slot = rng.below(workload.shape().requests_per_worker);
    subject.free(&active[worker][slot]);
    let (blocks, isl, overlap) = workload.request(rng, worker);
    *counter += 1;
    let id = S::id(format!("c{counter}"));
    subject.add(id.clone(), worker, blocks, isl, overlap);
    active[worker][slot] = id;
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at].as_nanos() as f64 / 1_000.0
}

/// Times `count` queries cycling over `queries`, appending the latencies.
fn time_queries<S: Subject>(
    subject: &S,
    queries: &[S::Query],
    count: usize,
    samples: &mut Vec<Duration>,
) {
    for i in 0..count {
        let query = &queries[i % queries.len()];
        let start = Instant::now();
        black_box(subject.query_timed(black_box(query)));
        samples.push(start.elapsed());
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Measured {
    churn_pairs_per_s: f64,
    p50: f64,
    p99: f64,
    p50_churn: f64,
    p99_churn: f64,
    churn_during_queries: f64,
    p50_paced: f64,
    p99_paced: f64,
    paced_churn: f64,
    bytes_per_request: f64,
}

/// One subject's state, driver and accumulated measurements.
struct Bench<S: Subject> {
    fleet: Fleet<S>,
    queries: Vec<S::Query>,
    rng: LoadRng,
    counter: u64,
    churn_time: Duration,
    churn_pairs: usize,
    quiescent: Vec<Duration>,
    under_churn: Vec<Duration>,
    background_pairs: u64,
    background_time: Duration,
    under_paced: Vec<Duration>,
    paced_pairs: u64,
    paced_time: Duration,
}

impl<S: Subject> Bench<S> {
    fn new(workload: &SequenceLoad, run: u64) -> Self {
        let mut rng = LoadRng::new(SEED ^ run);
        let fleet = build::<S>(workload, &mut rng, true);
        let mut candidates = LoadRng::new(SEED ^ 0xCA4D ^ run);
        let queries =
            (0..256).map(|_| fleet.subject.prepare(&workload.candidate(&mut candidates))).collect();
        Self {
            fleet,
            queries,
            rng,
            counter: 0,
            churn_time: Duration::ZERO,
            churn_pairs: 0,
            quiescent: Vec::new(),
            under_churn: Vec::new(),
            background_pairs: 0,
            background_time: Duration::ZERO,
            under_paced: Vec::new(),
            paced_pairs: 0,
            paced_time: Duration::ZERO,
        }
    }

    fn churn(&mut self, workload: &SequenceLoad, pairs: usize) {
        let start = Instant::now();
        let fleet = &mut self.fleet;
        for _ in 0..pairs {
            churn_pair(
                &fleet.subject,
                &mut fleet.active,
                workload,
                &mut self.rng,
                &mut self.counter,
            );
        }
        self.churn_time += start.elapsed();
        self.churn_pairs += pairs;
    }

    fn query(&mut self, count: usize) {
        time_queries(&self.fleet.subject, &self.queries, count, &mut self.quiescent);
    }

    /// `count` timed queries while another thread churns the same state, as fast as it can
    /// (`pace: None`) or one pair every `pace` (the same load on both subjects).
    fn query_under_churn(&mut self, workload: &SequenceLoad, count: usize, pace: Option<Duration>) {
        let stop = AtomicBool::new(false);
        let pairs = AtomicU64::new(0);
        let Fleet { subject, active } = &mut self.fleet;
        let subject = &*subject;
        let (rng, counter) = (&mut self.rng, &mut self.counter);
        let samples = if pace.is_some() { &mut self.under_paced } else { &mut self.under_churn };
        let queries = &self.queries;
        let started = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut done = 0;
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    churn_pair(subject, active, workload, rng, counter);
                    done += 1;
                    if let Some(pace) = pace {
                        next += pace;
                        if let Some(wait) = next.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                    }
                }
                pairs.store(done, Ordering::Relaxed);
            });
            // Let the churner get going.
            std::thread::sleep(Duration::from_millis(5));
            time_queries(subject, queries, count, samples);
            stop.store(true, Ordering::Relaxed);
        });
        let (time, total) = if pace.is_some() {
            (&mut self.paced_time, &mut self.paced_pairs)
        } else {
            (&mut self.background_time, &mut self.background_pairs)
        };
        *time += started.elapsed();
        *total += pairs.load(Ordering::Relaxed);
    }

    fn result(&mut self) -> Measured {
        self.quiescent.sort_unstable();
        self.under_churn.sort_unstable();
        self.under_paced.sort_unstable();
        Measured {
            churn_pairs_per_s: self.churn_pairs as f64 / self.churn_time.as_secs_f64(),
            p50: percentile(&self.quiescent, 0.50),
            p99: percentile(&self.quiescent, 0.99),
            p50_churn: percentile(&self.under_churn, 0.50),
            p99_churn: percentile(&self.under_churn, 0.99),
            churn_during_queries: self.background_pairs as f64 / self.background_time.as_secs_f64(),
            p50_paced: percentile(&self.under_paced, 0.50),
            p99_paced: percentile(&self.under_paced, 0.99),
            paced_churn: self.paced_pairs as f64 / self.paced_time.as_secs_f64(),
            bytes_per_request: f64::NAN,
        }
    }
}

/// One run: both subjects built side by side, then measured in alternating rounds so that
/// whatever else the machine does weighs on both alike.
fn measure(shape: &LoadShape, run: u64) -> (Measured, Measured) {
    const ROUNDS: usize = 10;
    let workload = SequenceLoad::with_shape(shape.clone(), &mut LoadRng::new(SEED ^ run));
    let mut dynamo = Bench::<Dynamo>::new(&workload, run);
    let mut ours = Bench::<Ours>::new(&workload, run);
    let churn = CHURN_PAIRS / ROUNDS;
    let count = QUERIES / ROUNDS;
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            dynamo.churn(&workload, churn);
            ours.churn(&workload, churn);
        } else {
            ours.churn(&workload, churn);
            dynamo.churn(&workload, churn);
        }
    }
    // Warm-up, then quiescent and under churn, alternating.
    dynamo.query(count);
    ours.query(count);
    dynamo.quiescent.clear();
    ours.quiescent.clear();
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            dynamo.query(count);
            ours.query(count);
            dynamo.query_under_churn(&workload, count, None);
            ours.query_under_churn(&workload, count, None);
            dynamo.query_under_churn(&workload, count, Some(PACE));
            ours.query_under_churn(&workload, count, Some(PACE));
        } else {
            ours.query(count);
            dynamo.query(count);
            ours.query_under_churn(&workload, count, None);
            dynamo.query_under_churn(&workload, count, None);
            ours.query_under_churn(&workload, count, Some(PACE));
            dynamo.query_under_churn(&workload, count, Some(PACE));
        }
    }
    (dynamo.result(), ours.result())
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// In a child process: bytes of RSS per active request after building the state.
fn memory_child<S: Subject>(shape: LoadShape) {
    let mut rng = LoadRng::new(SEED);
    let workload = SequenceLoad::with_shape(shape, &mut rng);
    let before = rss_bytes();
    let fleet = build::<S>(&workload, &mut rng, false);
    let after = rss_bytes();
    let shape = workload.shape();
    let requests = (shape.workers * shape.requests_per_worker) as f64;
    println!("BYTES_PER_REQUEST {}", (after - before) as f64 / requests);
    black_box(&fleet.subject);
}

fn memory_of(subject: &str, shape: &str) -> f64 {
    let exe = std::env::current_exe().expect("own path");
    let output = Command::new(exe)
        .args(["--subject", subject, "--shape", shape])
        .args(
            WORKER_SHARDS
                .get()
                .copied()
                .flatten()
                .map(|n| ["--worker-shards".to_string(), n.to_string()])
                .into_iter()
                .flatten(),
        )
        .output()
        .expect("child run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("BYTES_PER_REQUEST "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// Both subjects answer identically on the same (small) state.
fn check_agreement(shape: &LoadShape) {
    let mut rng_a = LoadRng::new(SEED);
    let mut rng_b = LoadRng::new(SEED);
    let workload = SequenceLoad::with_shape(shape.clone(), &mut rng_a);
    SequenceLoad::with_shape(shape.clone(), &mut rng_b);
    let dynamo = build::<Dynamo>(&workload, &mut rng_a, false);
    let ours = build::<Ours>(&workload, &mut rng_b, false);
    for _ in 0..32 {
        let candidate = workload.candidate(&mut rng_a);
        workload.candidate(&mut rng_b);
        let theirs = dynamo.subject.query(&dynamo.subject.prepare(&candidate));
        let mine = ours.subject.query(&ours.subject.prepare(&candidate));
        assert_eq!(theirs, mine, "the two trackers disagree on the same state");
    }
    println!("agreement: both trackers give identical potential blocks and tokens (32 candidates)");
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

type Field = fn(&Measured) -> f64;

/// (label, figure, target) of every table row.
const ROWS: [(&str, Field, &str); 10] = [
    ("add+free churn (pairs/s)", |m| m.churn_pairs_per_s, ">= 2.00"),
    ("query p50 quiescent (us)", |m| m.p50, "<= 0.50"),
    ("query p99 quiescent (us)", |m| m.p99, "<= 0.50"),
    ("query p50 under churn (us)", |m| m.p50_churn, "<= 0.70"),
    ("query p99 under churn (us)", |m| m.p99_churn, "<= 0.50*"),
    ("churn while queried (pairs/s)", |m| m.churn_during_queries, "-"),
    ("query p50 under paced churn (us)", |m| m.p50_paced, "<= 0.50"),
    ("query p99 under paced churn (us)", |m| m.p99_paced, "<= 0.50"),
    ("paced churn (pairs/s)", |m| m.paced_churn, "-"),
    ("bytes per active request", |m| m.bytes_per_request, "<= 1.00"),
];

/// One shape's runs: prints each run and the table; returns the runs.
fn run_shape(name: &str, shape: &LoadShape, runs: u64) -> Vec<(Measured, Measured)> {
    println!("== shape {name}: {}, {runs} runs", shape.describe());
    check_agreement(shape);
    let mut all: Vec<(Measured, Measured)> = Vec::new();
    for run in 0..runs {
        let (mut dynamo, mut ours) = measure(shape, run);
        dynamo.bytes_per_request = memory_of("dynamo", name);
        ours.bytes_per_request = memory_of("kvroute", name);
        println!(
            "run {run}: churn {:.0} vs {:.0} pairs/s; p50/p99 {:.2}/{:.2} vs {:.2}/{:.2} us; \
             under churn {:.2}/{:.2} vs {:.2}/{:.2} us; paced {:.2}/{:.2} vs {:.2}/{:.2} us; \
             {:.0} vs {:.0} B/request (dynamo vs kvroute)",
            dynamo.churn_pairs_per_s,
            ours.churn_pairs_per_s,
            dynamo.p50,
            dynamo.p99,
            ours.p50,
            ours.p99,
            dynamo.p50_churn,
            dynamo.p99_churn,
            ours.p50_churn,
            ours.p99_churn,
            dynamo.p50_paced,
            dynamo.p99_paced,
            ours.p50_paced,
            ours.p99_paced,
            dynamo.bytes_per_request,
            ours.bytes_per_request,
        );
        all.push((dynamo, ours));
    }
    println!();
    println!("medians over {runs} runs");
    println!(
        "{:<32} {:>12} {:>12} {:>9} {:>13} {:>8}",
        "metric", "dynamo", "kvroute", "ratio", "range", "target"
    );
    for (label, field, target) in ROWS {
        let theirs = median(all.iter().map(|(d, _)| field(d)).collect());
        let mine = median(all.iter().map(|(_, o)| field(o)).collect());
        // The ratio is taken within each run (same machine state), then the median of those.
        let ratios: Vec<f64> = all.iter().map(|(d, o)| field(o) / field(d)).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        let ratio = median(ratios);
        let range = format!("{lo:.2}-{hi:.2}");
        println!("{label:<32} {theirs:>12.2} {mine:>12.2} {ratio:>9.2} {range:>13} {target:>8}");
    }
    println!(
        "ratio = median over runs of (kvroute / dynamo within the run); under churn, each \
         subject's own churner runs as fast as it can; * in every run (the range's top)"
    );
    println!();
    all
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let shards = flag(&args, "--worker-shards").and_then(|n| n.parse().ok());
    WORKER_SHARDS.get_or_init(|| shards);
    if let Some(subject) = flag(&args, "--subject") {
        let shape = flag(&args, "--shape").and_then(LoadShape::named).unwrap_or_default();
        match subject {
            "dynamo" => memory_child::<Dynamo>(shape),
            "kvroute" => memory_child::<Ours>(shape),
            other => eprintln!("unknown subject {other:?}"),
        }
        return;
    }
    let runs: u64 = flag(&args, "--runs").and_then(|r| r.parse().ok()).unwrap_or(3);
    let names: Vec<String> = match flag(&args, "--shapes") {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => LoadShape::NAMES.iter().map(|n| n.to_string()).collect(),
    };
    let mut summary = Vec::new();
    for name in &names {
        let Some(shape) = LoadShape::named(name) else {
            eprintln!("unknown shape {name} (one of {})", LoadShape::NAMES.join(", "));
            std::process::exit(2);
        };
        summary.push((name.clone(), run_shape(name, &shape, runs)));
    }
    println!(
        "summary: kvroute / dynamo per shape, median of per-run ratios (targets: <= 0.50; \
         full-speed churn p50 <= 0.70, p99 <= 0.50 in every run: the worst run's is last)"
    );
    println!(
        "{:<14} {:>10} {:>10} {:>11} {:>11} {:>12} {:>12} {:>14}",
        "shape",
        "p50 quiet",
        "p99 quiet",
        "p50 paced",
        "p99 paced",
        "p50 full",
        "p99 full",
        "p99 full, max"
    );
    for (name, all) in &summary {
        let ratios =
            |field: Field| all.iter().map(|(d, o)| field(o) / field(d)).collect::<Vec<_>>();
        let ratio = |field: Field| median(ratios(field));
        let worst = ratios(|m| m.p99_churn).into_iter().fold(0.0, f64::max);
        println!(
            "{name:<14} {:>10.2} {:>10.2} {:>11.2} {:>11.2} {:>12.2} {:>12.2} {worst:>14.2}",
            ratio(|m| m.p50),
            ratio(|m| m.p99),
            ratio(|m| m.p50_paced),
            ratio(|m| m.p99_paced),
            ratio(|m| m.p50_churn),
            ratio(|m| m.p99_churn),
        );
    }
}
