//! Quiescent `find_matches` of kvroute and Dynamo's CRTC taking turns in one process: a
//! yardstick for changes to the walk, steadier than separate processes.
//!
//! `cargo run --release -p kvroute-compare --bin paired -- [--shapes a,b] [--rounds R] [--queries Q] [--fresh] [--ahead]`
//!
//! Each round times one pass of the comparison's query sample on each subject, after the same
//! 2,000-query warm-up `index` gives it, the order swapped every round. A round's ratio compares
//! two passes a few milliseconds apart, so the host's speed, which drifts over seconds on this
//! shared VM (the same code has measured anywhere from 381 to 852 ns from one process to the
//! next), moves both sides alike, and Dynamo serves as the yardstick a change of ours is read
//! against. The subjects' answers are checked to agree first.
//!
//! What runs before a timed pass changes the ratio (a just-ingested subject's caches and pages
//! differ from a resident one's), so there are two procedures, and their ratios compare only
//! with their own:
//! - by default both subjects ingest the stream once and stay resident, and a pass follows the
//!   other subject's pass;
//! - `--fresh` runs `index`'s own procedure in turns: each turn builds its subject afresh,
//!   times its ingest (memory handed back to the kernel before and after, as `index` does),
//!   then the warm-up and the pass, and drops it. It also prints the ingest ratio.
//!
//! As in `index`, each query is built in the subject's form just before its call; `--ahead`
//! builds them all before the pass instead (cold queries, as `index`'s "ahead" figure).

use std::process::ExitCode;

use kvroute::LocalBlockHash;
use kvroute::sim::shapes::Shape;
use kvroute_compare::dynamo_crtc::DynamoCrtc;
use kvroute_compare::kvroute_pool::KvroutePool;
use kvroute_compare::latency::{percentile, time_just_built, time_prepared};
use kvroute_compare::measure;
use kvroute_compare::memory::trim;
use kvroute_compare::subject::{Scores, Subject};
use kvroute_compare::workload::{self, EngineHashes, Workload};

/// Lanes of each subject, as in `index`.
const LANES: usize = 2;
/// Queries whose answers fresh turns compare (resident subjects compare the whole sample).
const CHECKED: usize = 2_000;

/// What one subject's turn measured: its ingest (fresh turns only) and its timed pass.
#[derive(Clone, Copy)]
struct Turn {
    ingest_ns: Option<u64>,
    p50_ns: u64,
    p99_ns: u64,
}

impl Turn {
    /// This turn's (p50, p99) ÷ `their`'s.
    fn ratios(self, their: Turn) -> (f64, f64) {
        (self.p50_ns as f64 / their.p50_ns as f64, self.p99_ns as f64 / their.p99_ns as f64)
    }
}

/// One warm-up and one timed pass of `sample` on `subject`, each query built just before its
/// call (or, with `--ahead`, all before the pass).
fn pass<S: Subject>(
    subject: &S,
    sample: &[&[LocalBlockHash]],
    plan: Plan,
    ingest_ns: Option<u64>,
) -> Turn {
    let warmup = &sample[..sample.len().min(measure::WARMUP_QUERIES)];
    let mut ns = if plan.ahead {
        let prepared: Vec<_> = sample.iter().map(|q| subject.prepare(q)).collect();
        drop(time_prepared(subject, &prepared[..warmup.len()]));
        time_prepared(subject, &prepared)
    } else {
        drop(time_just_built(subject, warmup));
        time_just_built(subject, sample)
    };
    let (p50_ns, p99_ns) = (percentile(&mut ns, 50.0), percentile(&mut ns, 99.0));
    Turn { ingest_ns, p50_ns: p50_ns.unwrap_or(0), p99_ns: p99_ns.unwrap_or(0) }
}

/// `index`'s procedure for one subject: built fresh, it ingests the stream (timed, memory
/// handed back to the kernel before and after as `index` does), then one warm-up and one
/// timed pass; dropped after. Also returns its answers to the first `checked` queries.
fn fresh<S: Subject>(
    subject: S,
    workload: &Workload,
    sample: &[&[LocalBlockHash]],
    checked: usize,
    plan: Plan,
) -> (Turn, Vec<Scores>) {
    trim();
    let ingest_ns = measure::ingest(&subject, &workload.events);
    trim();
    let turn = pass(&subject, sample, plan, Some(ingest_ns));
    (turn, sample.iter().take(checked).map(|q| subject.scores(q)).collect())
}

/// `median [low–high]` of `values`.
fn median_range(mut values: Vec<f64>, decimals: usize) -> String {
    values.sort_by(f64::total_cmp);
    let (low, high) = (values[0], values[values.len() - 1]);
    format!("{:.decimals$} [{low:.decimals$}–{high:.decimals$}]", values[values.len() / 2])
}

/// Every round of one shape, printed as it goes, then the shape's summary line.
fn shape_rounds(shape: Shape, plan: Plan) -> Result<(), String> {
    let workload = workload::build(shape, 1, EngineHashes::Shared)?;
    let sample = measure::sample(&workload.queries, plan.queries, 0);
    println!("{shape}: {}", workload.description);
    let mut rounds: Vec<(Turn, Turn)> = Vec::new();
    if plan.fresh {
        for round in 1..=plan.rounds {
            // Answers are compared in the first round only: building is what costs.
            let checked = if round == 1 { CHECKED } else { 0 };
            let (their, our) = in_turn(
                round,
                || fresh(DynamoCrtc::new(LANES), &workload, &sample, checked, plan),
                || fresh(KvroutePool::new(LANES), &workload, &sample, checked, plan),
            );
            agree(shape, &their.1, &our.1)?;
            rounds.push(report(round, their.0, our.0));
        }
    } else {
        let dynamo = DynamoCrtc::new(LANES);
        measure::ingest(&dynamo, &workload.events);
        let ours = KvroutePool::new(LANES);
        measure::ingest(&ours, &workload.events);
        let theirs: Vec<Scores> = sample.iter().map(|q| dynamo.scores(q)).collect();
        agree(shape, &theirs, &sample.iter().map(|q| ours.scores(q)).collect::<Vec<_>>())?;
        for round in 1..=plan.rounds {
            let (their, our) = in_turn(
                round,
                || pass(&dynamo, &sample, plan, None),
                || pass(&ours, &sample, plan, None),
            );
            rounds.push(report(round, their, our));
        }
    }
    summarize(shape, plan, &rounds);
    Ok(())
}

/// Runs Dynamo's side and ours of `round`, Dynamo first in odd rounds and second in even ones;
/// returns (Dynamo's, ours).
fn in_turn<T>(round: usize, theirs: impl FnOnce() -> T, ours: impl FnOnce() -> T) -> (T, T) {
    if round % 2 == 1 {
        let their = theirs();
        (their, ours())
    } else {
        let our = ours();
        (theirs(), our)
    }
}

/// An error if the subjects' answers differ.
fn agree(shape: Shape, theirs: &[Scores], ours: &[Scores]) -> Result<(), String> {
    let differ = theirs.iter().zip(ours).filter(|(t, o)| t != o).count();
    if differ > 0 {
        return Err(format!("{shape}: the subjects' answers differ on {differ} queries"));
    }
    Ok(())
}

/// Prints one round and hands it back.
fn report(round: usize, their: Turn, our: Turn) -> (Turn, Turn) {
    let ingest = match (their.ingest_ns, our.ingest_ns) {
        (Some(t), Some(o)) => format!(
            "   ingest {:.1} / {:.1} ms = {:.2}×",
            t as f64 / 1e6,
            o as f64 / 1e6,
            t as f64 / o as f64
        ),
        _ => String::new(),
    };
    let (ratio50, ratio99) = our.ratios(their);
    println!(
        "  round {round:>2}: dynamo-crtc p50 {:>5} ns  p99 {:>5} ns   kvroute p50 {:>5} ns  p99 {:>5} ns   ratio p50 {ratio50:.3}  p99 {ratio99:.3}{ingest}",
        their.p50_ns, their.p99_ns, our.p50_ns, our.p99_ns,
    );
    (their, our)
}

/// The shape's summary line: medians and ranges over the rounds.
fn summarize(shape: Shape, plan: Plan, rounds: &[(Turn, Turn)]) {
    let figure = |f: &dyn Fn(&(Turn, Turn)) -> f64| rounds.iter().map(f).collect::<Vec<_>>();
    let ratio50 = figure(&|(t, o)| o.ratios(*t).0);
    let ratio99 = figure(&|(t, o)| o.ratios(*t).1);
    let ingest = if plan.fresh {
        let speedup = figure(&|(t, o)| {
            t.ingest_ns.unwrap_or(0) as f64 / o.ingest_ns.unwrap_or(1).max(1) as f64
        });
        format!("  ingest × {}", median_range(speedup, 2))
    } else {
        String::new()
    };
    println!(
        "{shape}: kvroute / dynamo-crtc over {} {} rounds{}, median [range]: p50 {}  p99 {}{ingest}  \
         (dynamo-crtc p50 {} p99 {} ns; kvroute p50 {} p99 {} ns)",
        rounds.len(),
        if plan.fresh { "fresh" } else { "resident" },
        if plan.ahead { " (queries built ahead)" } else { "" },
        median_range(ratio50, 3),
        median_range(ratio99, 3),
        median_range(figure(&|(t, _)| t.p50_ns as f64), 0),
        median_range(figure(&|(t, _)| t.p99_ns as f64), 0),
        median_range(figure(&|(_, o)| o.p50_ns as f64), 0),
        median_range(figure(&|(_, o)| o.p99_ns as f64), 0),
    );
}

/// What to run.
#[derive(Clone, Copy)]
struct Plan {
    rounds: usize,
    queries: usize,
    /// `index`'s procedure (a fresh subject per turn) rather than resident subjects.
    fresh: bool,
    /// Queries all built before each pass (out of the core's caches when called), as `index`
    /// times its "ahead" figure.
    ahead: bool,
}

fn main() -> ExitCode {
    let mut shapes = Shape::ALL.to_vec();
    let mut plan = Plan { rounds: 8, queries: 20_000, fresh: false, ahead: false };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--fresh" || flag == "--ahead" {
            plan.fresh |= flag == "--fresh";
            plan.ahead |= flag == "--ahead";
            continue;
        }
        let value = args.next().unwrap_or_default();
        let parsed = match flag.as_str() {
            "--shapes" | "--shape" => {
                value.split(',').map(Shape::parse).collect::<Option<_>>().map(|s| shapes = s)
            }
            "--rounds" => value.parse().ok().map(|v: usize| plan.rounds = v.max(1)),
            "--queries" => value.parse().ok().map(|v: usize| plan.queries = v.max(1)),
            _ => None,
        };
        if parsed.is_none() {
            eprintln!(
                "usage: paired [--shapes conversation,documents,shared-fleet] [--rounds R] [--queries Q] [--fresh] [--ahead]\n\
                 \x20 --fresh  each turn builds its subject afresh and times its ingest first, as `index` does\n\
                 \x20 --ahead  queries built before the pass (cold queries) rather than each just before its call"
            );
            return ExitCode::from(2);
        }
    }
    for shape in shapes {
        if let Err(message) = shape_rounds(shape, plan) {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
