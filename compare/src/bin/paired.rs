//! Quiescent `find_matches` of kvroute and Dynamo's CRTC taking turns in one process: a
//! yardstick for changes to the walk, steadier than separate processes.
//!
//! `cargo run --release -p kvroute-compare --bin paired -- [--shapes a,b] [--rounds R] [--queries Q]`
//!
//! Both subjects ingest the shape's stream into this one process, and their answers to the
//! comparison's query sample are checked to agree. Then each round times one pass of the sample
//! on each subject, after the same 2,000-query warm-up `index` gives it, the order swapped
//! every round. A round's ratio compares two passes a few milliseconds apart, so the host's
//! speed, which drifts over seconds on this shared VM (BENCHMARKS.md, session 25: 381–852 ns
//! for the same code from one process to the next), moves both sides alike, and Dynamo serves
//! as the yardstick a change of ours is read against.
//!
//! It is not `index`'s measure and does not stand in for it: there each subject's timed pass
//! follows its own ingest in a fresh process; here it follows the other subject's pass, which
//! leaves different lines in the caches. The ratios differ by that (BENCHMARKS.md, session 26),
//! so compare this tool's ratios only with its own.

use std::process::ExitCode;

use kvroute::sim::shapes::Shape;
use kvroute_compare::dynamo_crtc::DynamoCrtc;
use kvroute_compare::kvroute_pool::KvroutePool;
use kvroute_compare::latency::{percentile, time_prepared};
use kvroute_compare::measure;
use kvroute_compare::subject::Subject;
use kvroute_compare::workload::{self, EngineHashes};

/// Lanes of each subject, as in `index`.
const LANES: usize = 2;
/// Queries run untimed before each pass, as in `index`.
const WARMUP: usize = 2_000;

/// One warm-up and one timed pass of `prepared` on `subject`: (p50, p99) in nanoseconds.
fn pass<S: Subject>(subject: &S, prepared: &[S::Query]) -> (u64, u64) {
    drop(time_prepared(subject, &prepared[..prepared.len().min(WARMUP)]));
    let mut ns = time_prepared(subject, prepared);
    (percentile(&mut ns, 50.0).unwrap_or(0), percentile(&mut ns, 99.0).unwrap_or(0))
}

/// `median [low–high]` of `values`.
fn median_range(mut values: Vec<f64>, decimals: usize) -> String {
    values.sort_by(f64::total_cmp);
    let (low, high) = (values[0], values[values.len() - 1]);
    format!("{:.decimals$} [{low:.decimals$}–{high:.decimals$}]", values[values.len() / 2])
}

/// Every round of one shape, printed as it goes, then the shape's summary line.
fn shape_rounds(shape: Shape, rounds: usize, count: usize) -> Result<(), String> {
    let workload = workload::build(shape, 1, EngineHashes::Shared)?;
    let dynamo = DynamoCrtc::new(LANES);
    dynamo.apply_all(&workload.events);
    dynamo.flush();
    let ours = KvroutePool::new(LANES);
    ours.apply_all(&workload.events);
    ours.flush();
    let sample = measure::sample(&workload.queries, count, 0);
    let differ = sample.iter().filter(|q| dynamo.scores(q) != ours.scores(q)).count();
    if differ > 0 {
        return Err(format!("{shape}: the subjects' answers differ on {differ} queries"));
    }
    let theirs: Vec<_> = sample.iter().map(|q| dynamo.prepare(q)).collect();
    let mine: Vec<_> = sample.iter().map(|q| ours.prepare(q)).collect();
    println!("{shape}: {}", workload.description);
    let mut figures: [Vec<f64>; 6] = Default::default();
    for round in 1..=rounds {
        let (their, our) = if round % 2 == 1 {
            let their = pass(&dynamo, &theirs);
            (their, pass(&ours, &mine))
        } else {
            let our = pass(&ours, &mine);
            (pass(&dynamo, &theirs), our)
        };
        let (p50, p99) = (our.0 as f64 / their.0 as f64, our.1 as f64 / their.1 as f64);
        println!(
            "  round {round:>2}: dynamo-crtc p50 {:>5} ns  p99 {:>5} ns   kvroute p50 {:>5} ns  p99 {:>5} ns   ratio p50 {p50:.3}  p99 {p99:.3}",
            their.0, their.1, our.0, our.1
        );
        let values = [p50, p99, their.0 as f64, their.1 as f64, our.0 as f64, our.1 as f64];
        for (figure, value) in figures.iter_mut().zip(values) {
            figure.push(value);
        }
    }
    let [p50, p99, their50, their99, our50, our99] = figures;
    println!(
        "{shape}: kvroute / dynamo-crtc over {rounds} rounds, median [range]: p50 {}  p99 {}  \
         (dynamo-crtc p50 {} p99 {} ns; kvroute p50 {} p99 {} ns)",
        median_range(p50, 3),
        median_range(p99, 3),
        median_range(their50, 0),
        median_range(their99, 0),
        median_range(our50, 0),
        median_range(our99, 0),
    );
    Ok(())
}

fn main() -> ExitCode {
    let (mut shapes, mut rounds, mut count) = (Shape::ALL.to_vec(), 8usize, 20_000usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let parsed = match flag.as_str() {
            "--shapes" | "--shape" => {
                value.split(',').map(Shape::parse).collect::<Option<_>>().map(|s| shapes = s)
            }
            "--rounds" => value.parse().ok().map(|v: usize| rounds = v.max(1)),
            "--queries" => value.parse().ok().map(|v: usize| count = v.max(1)),
            _ => None,
        };
        if parsed.is_none() {
            eprintln!(
                "usage: paired [--shapes conversation,documents,shared-fleet] [--rounds R] [--queries Q]"
            );
            return ExitCode::from(2);
        }
    }
    for shape in shapes {
        if let Err(message) = shape_rounds(shape, rounds, count) {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
