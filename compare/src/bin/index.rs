//! Side-by-side prefix-index comparison with Dynamo's `dynamo-kv-router` 1.6.1.
//!
//! `cargo run --release -p kvroute-compare --bin index -- [--dup N] [--runs R] [--shapes a,b]`
//!
//! For every workload shape (`kvroute::sim::shapes`: the conversation trace, documents, a shared
//! fleet), the parent re-runs this binary once per (subject, run) with `--subject NAME --shape S`
//! (runs interleaved across subjects), so every subject gets a fresh process and its own RSS.
//! Each child builds the workload (the fleet replay's events and queries), then:
//!
//! 1. **ingest**: applies every event and flushes; ingest rate = stream / that time. RSS (after
//!    `malloc_trim`) before and after, over live (worker, block) entries = bytes per entry.
//! 2. **quiescent queries**: times `find_matches` one call at a time over an evenly spaced
//!    sample of the replay's requests (after a warm-up pass), each query built (in the
//!    subject's own form) just before its call, as a router hashes a request right before it
//!    asks; also split by how deep each query matched (its deepest worker's score, from the
//!    subject's own untimed answer). Then the same sample again with every query built before
//!    the pass ("built ahead": each call then finds its query out of the core's caches), the
//!    cold-query figure, shown beside the main one.
//! 3. **forced maintenance**: runs the subject's deferred cleanup (Dynamo CRTC's stale-child
//!    sweep) and measures bytes per entry again ("swept").
//! 4. **cross-check**: compares sorted scores with `kvroute::index::ReferenceIndex` on other
//!    sampled requests; any disagreement is counted and the first few printed to stderr.
//! 5. **while ingesting** (concurrent subjects only): one thread applies a second fleet's stream
//!    (the same events under worker ids + 1,000: the same tree paths stored and evicted again)
//!    and flushes, while this thread times queries until that flush returns.
//!
//! and prints one `RESULT key=value …` line that the parent parses into the tables: one set per
//! shape, then a summary of kvroute / Dynamo CRTC per shape against kvroute's targets (ingest at
//! least 2× Dynamo's rate, `find_matches` p50 and p99 at most half Dynamo's).

use std::process::{Command, ExitCode, Stdio};

use kvroute::sim::shapes::Shape;
use kvroute_compare::dynamo_crtc::DynamoCrtc;
use kvroute_compare::dynamo_radix::DynamoRadix;
use kvroute_compare::kvroute_pool::KvroutePool;
use kvroute_compare::measure::{self, Plan};
use kvroute_compare::outcome::Outcome;
use kvroute_compare::reference::KvrouteReference;
use kvroute_compare::report::{self, Runs, grouped};
use kvroute_compare::subject::SUBJECTS;
use kvroute_compare::workload::{self, EngineHashes, Workload};

/// Lanes (event threads) of the pooled subjects.
const LANES: usize = 2;

struct Args {
    dup: u32,
    hashes: EngineHashes,
    runs: usize,
    shapes: Vec<Shape>,
    subject: Option<String>,
    subjects: Vec<String>,
    plan: Plan,
}

fn usage() -> &'static str {
    "usage: index [--dup N] [--runs R] [--shapes a,b,…] [--engine-hashes H] [--subjects a,b,…] [--timed Q] [--checked C]\n\
     \x20 --shapes      comma-separated subset of: conversation, documents, shared-fleet (default all)\n\
     \x20 --dup N       replay the trace N times with distinct salts (default 1)\n\
     \x20 --engine-hashes shared | per-worker: one engine hash per prefix on every worker (default),\n\
     \x20               or the fleet's per-worker salted hashes (Dynamo's trees reject many events)\n\
     \x20 --runs R      fresh processes per subject; the table shows medians (default 5)\n\
     \x20 --subjects    comma-separated subset of: dynamo-crtc, dynamo-radix, kvroute-reference, kvroute\n\
     \x20 --timed Q     queries timed in the quiescent pass (default 20000)\n\
     \x20 --checked C   queries cross-checked against the reference (default 2000)"
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        dup: 1,
        hashes: EngineHashes::Shared,
        runs: 5,
        shapes: Shape::ALL.to_vec(),
        subject: None,
        subjects: SUBJECTS.iter().map(|s| s.to_string()).collect(),
        plan: Plan { timed_queries: 20_000, checked_queries: 2_000 },
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--dup" => {
                args.dup = u32::try_from(number(value()?)?.max(1)).map_err(|e| e.to_string())?
            }
            "--engine-hashes" => {
                let name = value()?;
                args.hashes = EngineHashes::parse(&name)
                    .ok_or_else(|| format!("--engine-hashes: {name}? (shared | per-worker)"))?;
            }
            "--runs" => args.runs = number(value()?)?.max(1),
            "--shapes" | "--shape" => {
                args.shapes = value()?
                    .split(',')
                    .map(|name| Shape::parse(name).ok_or_else(|| format!("unknown shape {name}")))
                    .collect::<Result<_, _>>()?;
            }
            "--timed" => args.plan.timed_queries = number(value()?)?.max(1),
            "--checked" => args.plan.checked_queries = number(value()?)?,
            "--subject" => args.subject = Some(value()?),
            "--subjects" => args.subjects = value()?.split(',').map(str::to_string).collect(),
            "-h" | "--help" => return Err(usage().to_string()),
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    if let Some(bad) = args.subjects.iter().find(|s| !SUBJECTS.contains(&s.as_str())) {
        return Err(format!("unknown subject {bad}\n{}", usage()));
    }
    Ok(args)
}

/// Child: measures one subject in this process. `None` if the subject is not available.
fn measure_subject(name: &str, workload: &Workload, plan: Plan) -> Option<Outcome> {
    Some(match name {
        "dynamo-crtc" => {
            measure::run(name, DynamoCrtc::new(LANES), workload, plan, measure::while_ingesting)
        }
        "dynamo-radix" => {
            measure::run(name, DynamoRadix::new(), workload, plan, measure::single_threaded)
        }
        "kvroute-reference" => {
            measure::run(name, KvrouteReference::new(), workload, plan, measure::single_threaded)
        }
        "kvroute" => {
            measure::run(name, KvroutePool::new(LANES), workload, plan, measure::while_ingesting)
        }
        _ => return None,
    })
}

fn child(name: &str, args: &Args) -> ExitCode {
    let Some(&shape) = args.shapes.first() else {
        eprintln!("no shape given");
        return ExitCode::FAILURE;
    };
    let workload = match workload::build(shape, args.dup, args.hashes) {
        Ok(workload) => workload,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    println!("WORKLOAD {}", workload.description);
    match measure_subject(name, &workload, args.plan) {
        Some(outcome) => {
            println!("{outcome}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("subject {name} is not available in this build");
            ExitCode::from(3)
        }
    }
}

/// Parent, for one shape: one fresh process per (subject, run); returns the outcomes and the
/// workload line.
fn parent(args: &Args, shape: Shape) -> Result<(Vec<Runs>, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut all: Vec<Runs> =
        args.subjects.iter().map(|s| Runs { subject: s.clone(), outcomes: Vec::new() }).collect();
    let mut description = String::new();
    let mut unavailable = Vec::new();
    for run in 1..=args.runs {
        for runs in all.iter_mut() {
            if unavailable.contains(&runs.subject) {
                continue;
            }
            let output = Command::new(&exe)
                .args(["--subject", &runs.subject, "--dup", &args.dup.to_string()])
                .args(["--shape", shape.name()])
                .args(["--engine-hashes", args.hashes.name()])
                .args(["--timed", &args.plan.timed_queries.to_string()])
                .args(["--checked", &args.plan.checked_queries.to_string()])
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("running {}: {e}", exe.display()))?;
            if output.status.code() == Some(3) {
                unavailable.push(runs.subject.clone());
                continue;
            }
            let stdout = String::from_utf8_lossy(&output.stdout);
            if let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("WORKLOAD ")) {
                description = line.to_string();
            }
            let outcome = stdout.lines().find_map(Outcome::parse).ok_or_else(|| {
                format!("{} run {run}: no result ({}):\n{stdout}", runs.subject, output.status)
            })?;
            eprintln!(
                "{shape} run {run}/{}  {:<18} ingest {:6.2} Mops/s  find p50 {:5.2} µs  p99 {:6.2} µs  {:4.0} B/entry  disagree {}",
                args.runs,
                runs.subject,
                outcome.block_ops_per_sec() / 1e6,
                outcome.quiet_p50_ns as f64 / 1e3,
                outcome.quiet_p99_ns as f64 / 1e3,
                outcome.bytes_per_entry(),
                outcome.disagreements,
            );
            runs.outcomes.push(outcome);
        }
    }
    all.retain(|r| !r.outcomes.is_empty());
    for name in &unavailable {
        eprintln!("note: subject {name} is not available in this build; left out");
    }
    Ok((all, description))
}

/// `/proc/loadavg`'s first three fields: other work on the machine during the runs.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if let Some(name) = &args.subject {
        return child(name, &args);
    }
    let mut shapes = Vec::new();
    let mut worst = 0;
    for &shape in &args.shapes {
        let load_before = load_average();
        let (all, description) = match parent(&args, shape) {
            Ok(result) => result,
            Err(message) => {
                eprintln!("{message}");
                return ExitCode::FAILURE;
            }
        };
        if all.is_empty() {
            eprintln!("{shape}: no subject produced a result");
            return ExitCode::FAILURE;
        }
        print_shape(&args, &all, &description, &load_before);
        worst = worst
            .max(all.iter().flat_map(|r| &r.outcomes).map(|o| o.disagreements).max().unwrap_or(0));
        shapes.push((shape.name().to_string(), all));
    }
    if shapes.len() > 1 || args.shapes.len() > 1 {
        println!(
            "summary: kvroute / dynamo-crtc per shape, against kvroute's targets; median of per-run ratios [range]"
        );
        println!(
            "find = quiescent, each query built just before its call; ahead = the same queries \
             all built before the pass (cold queries, no target)"
        );
        print!("{}", report::summary(&shapes));
    }
    if worst > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// One shape's tables: per subject, by matched depth, and the ratios.
fn print_shape(args: &Args, all: &[Runs], description: &str, load_before: &str) {
    let Some(first) = all.first().and_then(|r| r.outcomes.first()) else { return };
    println!("index comparison: kvroute vs dynamo-kv-router 1.6.1, medians of {} runs", args.runs);
    println!("workload: {description}");
    println!("load average (1/5/15 min) before: {load_before}; after: {}", load_average());
    println!(
        "stream: {} events, {} block ops, {} live (worker, block) entries; {} timed / {} checked queries",
        grouped(first.events),
        grouped(first.block_ops),
        grouped(first.live_entries),
        grouped(first.quiet_queries),
        grouped(first.checked),
    );
    println!(
        "pooled subjects: {LANES} lanes; busy = while another thread ingests the stream again \
         as workers +{}; — = single-threaded subject",
        measure::BUSY_WORKER_OFFSET
    );
    println!();
    print!("{}", report::table(all));
    println!(
        "B/entry = RSS growth over the ingest (after malloc_trim) / live entries; untrimmed = \
         before malloc_trim; swept = after forcing the deferred stale-child sweep Dynamo's CRTC \
         runs at most every 5 min; disagree = worst run's mismatches vs kvroute-reference"
    );
    println!();
    println!("quiescent find_matches split by how deep the query matched (any worker):");
    print!("{}", report::depth_table(all));
    let ours =
        if all.iter().any(|r| r.subject == "kvroute") { "kvroute" } else { "kvroute-reference" };
    let ratios = report::ratios(all, ours);
    if !ratios.is_empty() {
        println!();
        print!("{ratios}");
    }
    println!();
}
