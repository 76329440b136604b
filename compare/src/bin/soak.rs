//! Soak: one index lives through many passes of a workload shape, and is measured after each
//! against an index freshly rebuilt from the same state, and beside Dynamo's CRTC run the same
//! way.
//!
//! `cargo run --release -p kvroute-compare --bin soak -- [--passes N] [--shapes a,b] [--checked C]`
//!
//! A pass replays the shape's fleet stream (`workload::build`, shared engine hashes). A quarter
//! of the fleet's workers (the anchors) keep the blocks of their first pass for good, as a
//! long-lived cache of shared prompts. The others are rotated: every pass after the first
//! begins with them evicting all they hold, tails first, in `Removed` events of up to 64 blocks,
//! except one per pass, which restarts (`Cleared`); then the stream is replayed with their
//! streams rotated by the pass number among them (the anchors' own events left out), so each
//! caches other prefixes than the pass before. The shared prefixes the anchors hold are thus
//! cached, evicted and cached again by other workers pass after pass (splitting and, once
//! joined back, rejoining the anchors' runs), and the state at the end of every pass is the same
//! size.
//!
//! The parent runs one child process per (shape, subject), so each has its own RSS:
//! - `kvroute`: the long-lived `EventPool` (2 lanes). After each pass it prints the pass's ingest
//!   rate, `find_matches` p50/p99 over an evenly spaced sample of the shape's queries (each
//!   built just before its call; medians of three timed passes), bytes per live entry (the
//!   pool's own accounting, and the process's RSS after `malloc_trim` over the same entries)
//!   and runs per live block.
//!   It runs a second time with glibc's trim threshold fixed (`MALLOC_TRIM_THRESHOLD_`), for
//!   an RSS line that shows what of the growth is glibc keeping the lanes' freed arena tops.
//! - `kvroute-rebuilt`: the same long-lived pool again, and after each pass a pool rebuilt from
//!   its `dump_events` (the rebuild path), with the same figures but RSS (the rebuilds' freed
//!   memory stays in this process), and a fresh pool fed every event of every pass so far, in
//!   order (the same history without the long life). The three are timed in turn, round by
//!   round, so that they can be compared at the same moments of the host.
//! - `kvroute-reference`: `ReferenceIndex` fed the same events; its answers to a second sample
//!   are compared with the long-lived pool's, query by query, pass by pass (disagreements).
//! - `dynamo-crtc`: Dynamo's `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` (2 lanes): ingest,
//!   p50/p99, RSS per live entry.
//!
//! The table has one row per pass; the verdict checks the soak targets: p50 and p99 of the last
//! five passes within 10% of the first five's (medians: one pass's latency moves by tens of
//! percent with the host), bytes per entry within 10% and runs at most 1.1× the rebuilt pool's
//! after the last pass, no disagreement, and the process's RSS per entry after the last pass
//! within 10% of what it was after the first (when the pool had just been built fresh, as a
//! rebuilt one would be in a process of its own; RSS also counts what the allocator keeps).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use kvroute::index::{EventPool, PoolStats};
use kvroute::sim::shapes::Shape;
use kvroute::{KvEventData, LocalBlockHash, RouterEvent, SequenceHash, Worker};
use kvroute_compare::dynamo_crtc::DynamoCrtc;
use kvroute_compare::kvroute_pool::KvroutePool;
use kvroute_compare::latency::{percentile, time_just_built};
use kvroute_compare::memory::{rss_bytes, trim};
use kvroute_compare::reference::KvrouteReference;
use kvroute_compare::subject::Subject;
use kvroute_compare::workload::{self, EngineHashes};

/// Lanes (event threads) of the pooled subjects.
const LANES: usize = 2;
/// Blocks per `Removed` event when the fleet evicts all it holds.
const EVICT_BATCH: usize = 64;
/// Queries timed after each pass.
const TIMED: usize = 20_000;

struct Args {
    passes: usize,
    shapes: Vec<Shape>,
    checked: usize,
    /// `Some` in a child: the subject to run.
    subject: Option<String>,
}

fn usage() -> &'static str {
    "usage: soak [--passes N] [--shapes a,b,…] [--checked C]\n\
     \x20 --passes N    passes per shape (default 20)\n\
     \x20 --shapes      comma-separated subset of: conversation, documents, shared-fleet (default all)\n\
     \x20 --checked C   queries compared with the reference after each pass (default 500)"
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { passes: 20, shapes: Shape::ALL.to_vec(), checked: 500, subject: None };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--passes" => args.passes = value()?.parse().map_err(|e| format!("--passes: {e}"))?,
            "--checked" => {
                args.checked = value()?.parse().map_err(|e| format!("--checked: {e}"))?
            }
            "--shapes" => {
                args.shapes = value()?
                    .split(',')
                    .map(|name| Shape::parse(name).ok_or_else(|| format!("unknown shape {name}")))
                    .collect::<Result<_, _>>()?;
            }
            "--subject" => args.subject = Some(value()?),
            "--help" | "-h" => return Err(usage().to_string()),
            other => return Err(format!("unknown flag {other}\n{}", usage())),
        }
    }
    if args.passes == 0 || args.shapes.is_empty() {
        return Err(format!("nothing to run\n{}", usage()));
    }
    Ok(args)
}

/// The fleet's stream pass after pass: what each worker holds, to evict it at the next pass.
struct Fleet {
    stream: Vec<RouterEvent>,
    workers: Vec<Worker>,
    /// Per worker: the blocks it stored, in order, and those it still holds.
    held: HashMap<Worker, (Vec<SequenceHash>, HashSet<SequenceHash>)>,
}

impl Fleet {
    fn new(stream: Vec<RouterEvent>) -> Self {
        let mut workers: Vec<Worker> = stream.iter().map(RouterEvent::worker).collect();
        workers.sort_unstable();
        workers.dedup();
        Self { stream, workers, held: HashMap::new() }
    }

    /// Live (worker, block) entries at the end of the last pass made.
    fn live(&self) -> u64 {
        self.held.values().map(|(_, live)| live.len() as u64).sum()
    }

    /// The workers that keep what they cached pass after pass (the first quarter).
    fn anchors(&self) -> usize {
        (self.workers.len() / 4).max(1)
    }

    /// Pass `pass`'s events (see the [module docs](self)).
    fn pass(&mut self, pass: usize) -> Vec<RouterEvent> {
        let (anchors, rotated) = (self.anchors(), self.workers.len() - self.anchors());
        let mut out = Vec::new();
        if pass > 0 && rotated > 0 {
            let restarting = self.workers[anchors + pass % rotated];
            for &worker in &self.workers[anchors..] {
                let Some((order, live)) = self.held.remove(&worker) else { continue };
                if worker == restarting {
                    out.push(RouterEvent::cleared(worker, 0));
                    continue;
                }
                let tails_first: Vec<SequenceHash> =
                    order.iter().rev().filter(|hash| live.contains(hash)).copied().collect();
                for batch in tails_first.chunks(EVICT_BATCH) {
                    out.push(RouterEvent::removed(worker, 0, batch.to_vec()));
                }
            }
        }
        let index: HashMap<Worker, usize> =
            self.workers.iter().enumerate().map(|(at, &w)| (w, at)).collect();
        for event in &self.stream {
            let at = index[&event.worker()];
            let worker = match at < anchors {
                // The anchors keep their first pass's blocks.
                true if pass > 0 => continue,
                true => self.workers[at],
                false => self.workers[anchors + (at - anchors + pass) % rotated],
            };
            let mut event = event.clone();
            (event.worker_id, event.event.dp_rank) = (worker.id, worker.dp_rank);
            let (order, live) = self.held.entry(worker).or_default();
            match &event.event.data {
                KvEventData::Stored { blocks, .. } => {
                    for block in blocks {
                        if live.insert(block.hash) {
                            order.push(block.hash);
                        }
                    }
                }
                KvEventData::Removed { blocks } => blocks.iter().for_each(|hash| {
                    live.remove(hash);
                }),
                KvEventData::Cleared => live.clear(),
            }
            out.push(event);
        }
        out
    }
}

/// `count` queries spaced evenly over `queries`, starting at `offset`.
fn sample(queries: &[Vec<LocalBlockHash>], count: usize, offset: usize) -> Vec<&[LocalBlockHash]> {
    let step = (queries.len() / count.max(1)).max(1);
    queries.iter().skip(offset % step).step_by(step).take(count).map(Vec::as_slice).collect()
}

/// Applies `events`, flushes; million block operations per second.
fn ingest<S: Subject>(subject: &S, events: &[RouterEvent]) -> f64 {
    let ops: usize = events.iter().map(RouterEvent::block_ops).sum();
    let start = Instant::now();
    subject.apply_all(events);
    subject.flush();
    ops as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// p50 and p99 of `find_matches` over `queries`, microseconds: the medians of three timed
/// passes, after a warm-up pass.
fn latency<S: Subject>(subject: &S, queries: &[&[LocalBlockHash]]) -> (f64, f64) {
    time_just_built(subject, queries);
    medians((0..3).map(|_| time_just_built(subject, queries)).collect())
}

/// [`latency`] of several subjects timed in turn (three rounds, the order rotating), so that
/// all see the same moments of the host. In each round a subject is timed over `queries` right
/// after an untimed pass over them, so that, as in [`latency`], its memory is as warm as it
/// would be alone.
fn latency_in_turn<S: Subject, const N: usize>(
    subjects: [&S; N],
    queries: &[&[LocalBlockHash]],
) -> [(f64, f64); N] {
    let mut rounds: [Vec<Vec<u64>>; N] = std::array::from_fn(|_| Vec::new());
    for round in 0..3 {
        for turn in 0..N {
            let at = (round + turn) % N;
            time_just_built(subjects[at], queries);
            rounds[at].push(time_just_built(subjects[at], queries));
        }
    }
    rounds.map(medians)
}

/// The medians over timed passes (nanoseconds per call) of their p50 and p99, microseconds.
fn medians(rounds: Vec<Vec<u64>>) -> (f64, f64) {
    let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
    for mut samples in rounds {
        p50s.push(percentile(&mut samples, 50.0).unwrap_or(0));
        p99s.push(percentile(&mut samples, 99.0).unwrap_or(0));
    }
    let median = |values: &mut Vec<u64>| percentile(values, 50.0).unwrap_or(0) as f64 / 1e3;
    (median(&mut p50s), median(&mut p99s))
}

/// One hash per query of `subject`'s sorted scores, comma-separated.
fn score_digests<S: Subject>(subject: &S, queries: &[&[LocalBlockHash]]) -> String {
    let digest = |query: &[LocalBlockHash]| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        subject.scores(query).hash(&mut hasher);
        format!("{:x}", hasher.finish())
    };
    queries.iter().map(|query| digest(query)).collect::<Vec<_>>().join(",")
}

/// Runs one subject's passes in this process, printing a `PASS` line (and for the checking
/// subjects a `SCORES` line) after each.
fn child(args: &Args, subject: &str) -> Result<(), String> {
    let shape = args.shapes[0];
    let load = workload::build(shape, 1, EngineHashes::Shared)?;
    let mut fleet = Fleet::new(load.events);
    let timed = sample(&load.queries, TIMED, 0);
    let checked = sample(&load.queries, args.checked, 1);
    trim();
    let base_rss = rss_bytes();
    let rss_per_entry = |live: u64| {
        trim();
        rss_bytes().saturating_sub(base_rss) as f64 / live.max(1) as f64
    };
    match subject {
        "kvroute" => {
            let run = match std::env::var_os(FIXED_TRIM_THRESHOLD.0) {
                Some(_) => " (trim threshold fixed)",
                None => "",
            };
            let long_lived = KvroutePool::new(LANES);
            for pass in 0..args.passes {
                let rate = ingest(&long_lived, &fleet.pass(pass));
                let (p50, p99) = latency(&long_lived, &timed);
                let stats = long_lived.pool().stats();
                let rss = rss_per_entry(stats.live_entries);
                println!(
                    "PASS {pass} live={} ingest={rate:.2} p50={p50:.3} p99={p99:.3} bytes={:.1} \
                     rss={rss:.1} runs={:.4} rejected={}",
                    stats.live_entries,
                    bytes_per_entry(&stats),
                    runs_per_block(&stats),
                    long_lived.rejected().unwrap_or(0),
                );
                println!("SCORES {pass} {}", score_digests(&long_lived, &checked));
                eprintln!("  {shape} kvroute{run}: pass {} of {} done", pass + 1, args.passes);
            }
        }
        "kvroute-rebuilt" => {
            // The same long-lived pool, rebuilt from its dump after every pass (in a process
            // of its own: the rebuilds' freed memory would blur the long-lived pool's RSS).
            let long_lived = KvroutePool::new(LANES);
            let mut history = Vec::new();
            for pass in 0..args.passes {
                let events = fleet.pass(pass);
                ingest(&long_lived, &events);
                history.extend(events);
                let rebuilt = rebuild(long_lived.pool())?;
                let replayed = KvroutePool::new(LANES);
                ingest(&replayed, &history);
                let [(p50, p99), (long_lived_p50, long_lived_p99), (replayed_p50, replayed_p99)] =
                    latency_in_turn([&rebuilt, &long_lived, &replayed], &timed);
                let stats = rebuilt.pool().stats();
                println!(
                    "PASS {pass} live={} p50={p50:.3} p99={p99:.3} long_lived_p50={long_lived_p50:.3} \
                     long_lived_p99={long_lived_p99:.3} replayed_p50={replayed_p50:.3} \
                     replayed_p99={replayed_p99:.3} bytes={:.1} runs={:.4}",
                    stats.live_entries,
                    bytes_per_entry(&stats),
                    runs_per_block(&stats),
                );
                eprintln!("  {shape} kvroute-rebuilt: pass {} of {} done", pass + 1, args.passes);
            }
        }
        "kvroute-reference" => {
            let reference = KvrouteReference::new();
            for pass in 0..args.passes {
                reference.apply_all(&fleet.pass(pass));
                println!(
                    "PASS {pass} live={} rejected={}",
                    reference.entry_count(),
                    reference.rejected().unwrap_or(0)
                );
                println!("SCORES {pass} {}", score_digests(&reference, &checked));
            }
        }
        "dynamo-crtc" => {
            let crtc = DynamoCrtc::new(LANES);
            for pass in 0..args.passes {
                let events = fleet.pass(pass);
                let rate = ingest(&crtc, &events);
                let (p50, p99) = latency(&crtc, &timed);
                let rss = rss_per_entry(fleet.live());
                println!(
                    "PASS {pass} live={} ingest={rate:.2} p50={p50:.2} p99={p99:.2} rss={rss:.1}",
                    fleet.live()
                );
                eprintln!("  {shape} dynamo-crtc: pass {} of {} done", pass + 1, args.passes);
            }
        }
        other => return Err(format!("unknown subject {other}")),
    }
    Ok(())
}

/// Heap bytes per live entry, by the pool's own accounting.
fn bytes_per_entry(stats: &PoolStats) -> f64 {
    stats.bytes as f64 / stats.live_entries.max(1) as f64
}

/// Runs per live block (tree node).
fn runs_per_block(stats: &PoolStats) -> f64 {
    stats.runs as f64 / stats.nodes.max(1) as f64
}

/// A pool rebuilt from `pool`'s dump, flushed.
fn rebuild(pool: &EventPool) -> Result<KvroutePool, String> {
    let fresh = KvroutePool::new(pool.lanes());
    let events = pool.dump_events().map_err(|e| format!("dumping the pool: {e}"))?;
    fresh.apply_all(&events);
    fresh.flush();
    Ok(fresh)
}

/// One child's output: `key=value` fields per pass, and score digests per pass.
#[derive(Default)]
struct ChildOutput {
    passes: Vec<HashMap<String, f64>>,
    scores: Vec<Vec<String>>,
}

/// glibc's trim threshold, fixed for the `kvroute` child's second run. By default glibc raises
/// it (with its mmap threshold) each time a large mapping is freed, and a thread arena's top is
/// given back only when it exceeds the threshold (`malloc_trim` trims only the main arena's), so
/// the lanes' arenas keep their freed tops resident. Setting it also stops the sliding.
const FIXED_TRIM_THRESHOLD: (&str, &str) = ("MALLOC_TRIM_THRESHOLD_", "131072");

/// Runs `subject`'s passes for `shape` in a child process, with `env` added to its environment.
fn run_child(
    shape: Shape,
    subject: &str,
    args: &Args,
    env: &[(&str, &str)],
) -> Result<ChildOutput, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = Command::new(exe)
        .envs(env.iter().copied())
        .args(["--subject", subject, "--shapes", shape.name()])
        .args(["--passes", &args.passes.to_string(), "--checked", &args.checked.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("starting the {subject} child: {e}"))?;
    if !output.status.success() {
        return Err(format!("the {subject} child for {shape} failed: {}", output.status));
    }
    let mut parsed = ChildOutput::default();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("PASS"), Some(_)) => parsed.passes.push(
                words
                    .filter_map(|field| field.split_once('='))
                    .filter_map(|(key, value)| Some((key.to_string(), value.parse().ok()?)))
                    .collect(),
            ),
            (Some("SCORES"), Some(_)) => parsed
                .scores
                .push(words.next().unwrap_or("").split(',').map(str::to_string).collect()),
            _ => {}
        }
    }
    Ok(parsed)
}

/// Runs the children for `shape` and prints its table and verdict; whether every target held.
fn soak_shape(shape: Shape, args: &Args) -> Result<bool, String> {
    eprintln!("{shape}: {} passes", args.passes);
    let kvroute = run_child(shape, "kvroute", args, &[])?;
    let fixed_trim = run_child(shape, "kvroute", args, &[FIXED_TRIM_THRESHOLD])?;
    let rebuilt = run_child(shape, "kvroute-rebuilt", args, &[])?;
    let reference = run_child(shape, "kvroute-reference", args, &[])?;
    let dynamo = run_child(shape, "dynamo-crtc", args, &[])?;
    let get = |pass: &HashMap<String, f64>, key: &str| pass.get(key).copied().unwrap_or(f64::NAN);
    println!(
        "\n## {shape}: {} passes, {} lanes; latencies in µs, ingest in M block ops/s\n",
        args.passes, LANES
    );
    println!(
        "{:>4} {:>8} | {:>7} {:>6} {:>6} {:>6} {:>6} {:>7} | {:>6} {:>6} {:>6} {:>7} | {:>6} {:>6} | {:>5} | {:>7} {:>6} {:>6} {:>6}",
        "pass",
        "live",
        "ingest",
        "p50",
        "p99",
        "B/ent",
        "RSS/e",
        "runs/b",
        "p50",
        "p99",
        "B/ent",
        "runs/b",
        "p50",
        "p99",
        "diff",
        "ingest",
        "p50",
        "p99",
        "RSS/e"
    );
    println!(
        "{:>13} | {:^46} | {:^30} | {:^13} |       | {:^30}",
        "", "kvroute, long-lived", "kvroute, rebuilt", "same history", "dynamo CRTC"
    );
    let mut disagreements = 0;
    for (at, pass) in kvroute.passes.iter().enumerate() {
        let diff = match (kvroute.scores.get(at), reference.scores.get(at)) {
            (Some(ours), Some(theirs)) => ours.iter().zip(theirs).filter(|(a, b)| a != b).count(),
            _ => usize::MAX,
        };
        disagreements += diff.min(1_000_000);
        let crtc = dynamo.passes.get(at).cloned().unwrap_or_default();
        let fresh = rebuilt.passes.get(at).cloned().unwrap_or_default();
        println!(
            "{:>4} {:>8} | {:>7.2} {:>6.2} {:>6.2} {:>6.1} {:>6.1} {:>7.4} | {:>6.2} {:>6.2} {:>6.1} {:>7.4} | {:>6.2} {:>6.2} | {:>5} | {:>7.2} {:>6.2} {:>6.2} {:>6.1}",
            at + 1,
            get(pass, "live"),
            get(pass, "ingest"),
            get(pass, "p50"),
            get(pass, "p99"),
            get(pass, "bytes"),
            get(pass, "rss"),
            get(pass, "runs"),
            get(&fresh, "p50"),
            get(&fresh, "p99"),
            get(&fresh, "bytes"),
            get(&fresh, "runs"),
            get(&fresh, "replayed_p50"),
            get(&fresh, "replayed_p99"),
            diff,
            get(&crtc, "ingest"),
            get(&crtc, "p50"),
            get(&crtc, "p99"),
            get(&crtc, "rss"),
        );
    }
    let (Some(first), Some(last), Some(fresh)) =
        (kvroute.passes.first(), kvroute.passes.last(), rebuilt.passes.last())
    else {
        return Err(format!("no passes from the kvroute children for {shape}"));
    };
    let ratio = |a: f64, b: f64| a / b;
    // A pass's latency moves by tens of percent with the host; the medians of five passes
    // (the last five against the first five, or all there are) say whether it drifts.
    let window = kvroute.passes.len().min(5);
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let median_of = |passes: &[HashMap<String, f64>], key: &str| {
        median(passes.iter().map(|pass| get(pass, key)).collect())
    };
    let (early, late) =
        (&kvroute.passes[..window], &kvroute.passes[kvroute.passes.len() - window..]);
    let checks = [
        (
            "p50, last 5 passes / first 5 (medians)",
            ratio(median_of(late, "p50"), median_of(early, "p50")),
            1.10,
        ),
        (
            "p99, last 5 passes / first 5 (medians)",
            ratio(median_of(late, "p99"), median_of(early, "p99")),
            1.10,
        ),
        ("bytes per entry / rebuilt", ratio(get(last, "bytes"), get(fresh, "bytes")), 1.10),
        ("runs / rebuilt", ratio(get(last, "runs"), get(fresh, "runs")), 1.10),
        // The bytes target in the process's terms: after the first pass the pool was built
        // fresh in its process, as a rebuilt one would be in its own.
        ("RSS per entry, last pass / first", ratio(get(last, "rss"), get(first, "rss")), 1.10),
    ];
    let mut held = disagreements == 0;
    println!();
    for (what, value, limit) in checks {
        let ok = value <= limit;
        held &= ok;
        println!(
            "{shape} {what}: {value:.3} (target ≤ {limit:.2}) {}",
            if ok { "met" } else { "MISSED" }
        );
    }
    // The same latencies taken beside a rebuilt pool and a fresh replay of the whole history,
    // in turn in one process: what restoring the state from a dump would give, and what of the
    // drift is the long life rather than the host or the history.
    let per_pass = |passes: &[HashMap<String, f64>], of: &str, over: &str| {
        median(passes.iter().map(|pass| ratio(get(pass, of), get(pass, over))).collect())
    };
    let (rebuilt_early, rebuilt_late) = (
        &rebuilt.passes[..window.min(rebuilt.passes.len())],
        &rebuilt.passes[rebuilt.passes.len().saturating_sub(window)..],
    );
    println!(
        "{shape} p50 / p99 of the long-lived pool over a rebuilt one timed beside it (medians of per-pass ratios): first 5 {:.3} / {:.3}, last 5 {:.3} / {:.3} (not a target: what restoring from a dump would give)",
        per_pass(rebuilt_early, "long_lived_p50", "p50"),
        per_pass(rebuilt_early, "long_lived_p99", "p99"),
        per_pass(rebuilt_late, "long_lived_p50", "p50"),
        per_pass(rebuilt_late, "long_lived_p99", "p99"),
    );
    println!(
        "{shape} p50 / p99 of a fresh pool fed the same history, last 5 passes / first 5 (medians): {:.3} / {:.3}; the long-lived pool over it, first 5 {:.3} / {:.3}, last 5 {:.3} / {:.3} (not a target: the drift any pool with this history has)",
        ratio(median_of(rebuilt_late, "replayed_p50"), median_of(rebuilt_early, "replayed_p50")),
        ratio(median_of(rebuilt_late, "replayed_p99"), median_of(rebuilt_early, "replayed_p99")),
        per_pass(rebuilt_early, "long_lived_p50", "replayed_p50"),
        per_pass(rebuilt_early, "long_lived_p99", "replayed_p99"),
        per_pass(rebuilt_late, "long_lived_p50", "replayed_p50"),
        per_pass(rebuilt_late, "long_lived_p99", "replayed_p99"),
    );
    if let (Some(first), Some(last)) = (fixed_trim.passes.first(), fixed_trim.passes.last()) {
        println!(
            "{shape} RSS per entry, last pass / first, in a second run with {}={}: {:.3} (not a target: glibc's thresholds fixed)",
            FIXED_TRIM_THRESHOLD.0,
            FIXED_TRIM_THRESHOLD.1,
            ratio(get(last, "rss"), get(first, "rss")),
        );
    }
    println!(
        "{shape} disagreements with the reference over all passes: {disagreements} {}; ingest, last 5 passes / first 5 (medians): {:.3}",
        if disagreements == 0 { "met" } else { "MISSED" },
        ratio(median_of(late, "ingest"), median_of(early, "ingest")),
    );
    Ok(held)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if let Some(subject) = args.subject.clone() {
        return match child(&args, &subject) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("{message}");
                ExitCode::FAILURE
            }
        };
    }
    let mut all_held = true;
    for &shape in &args.shapes {
        match soak_shape(shape, &args) {
            Ok(held) => all_held &= held,
            Err(message) => {
                eprintln!("{message}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("\nevery target held on every shape: {}", if all_held { "yes" } else { "no" });
    ExitCode::SUCCESS
}
