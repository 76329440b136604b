//! Queries only, for working on kvroute's walk: the comparison's workload for one shape is
//! ingested once into a fresh `EventPool`, then the comparison's timed sample of queries is run
//! `--passes` times, printing each pass's p50 and p99 (one call at a time, as the comparison
//! times them) and the median of the passes. `--pause S` sleeps S seconds between the ingest and
//! the first pass, so a profiler started with a delay (`perf record -D`) sees only queries.
//! `--prefix N` cuts every query to its first N blocks, to see what the deeper runs add. The
//! last lines compare the slowest 1% of one more pass with all of it (query length, deepest
//! match, workers answered) and say how many of them are slow again in the pass after.
//! `--dup N` replays the shape's trace N times, as the comparison's `--dup` does. Each query is
//! built just before its call, as the comparison does; `--ahead` builds them all before a pass
//! instead (each call then finds its query out of the core's caches: the cold-query figure).
//!
//! ```sh
//! cargo run --release -p kvroute-compare --bin find -- --shape documents --passes 9
//! ```

use std::process::ExitCode;
use std::time::Duration;

use kvroute::LocalBlockHash;
use kvroute::sim::shapes::Shape;
use kvroute_compare::kvroute_pool::KvroutePool;
use kvroute_compare::latency::{percentile, time_just_built, time_prepared};
use kvroute_compare::subject::Subject;
use kvroute_compare::workload::{self, EngineHashes};

fn main() -> ExitCode {
    let (mut shape, mut passes, mut count, mut pause) = (Shape::Documents, 5usize, 20_000, 0u64);
    let (mut prefix, mut dup, mut ahead) = (usize::MAX, 1u32, false);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--ahead" {
            ahead = true;
            continue;
        }
        let value = args.next().unwrap_or_default();
        let parsed = match flag.as_str() {
            "--shape" => Shape::parse(&value).map(|s| shape = s).ok_or(()),
            "--passes" => value.parse().map(|v| passes = v).map_err(drop),
            "--queries" => value.parse().map(|v| count = v).map_err(drop),
            "--pause" => value.parse().map(|v| pause = v).map_err(drop),
            "--prefix" => value.parse().map(|v| prefix = v).map_err(drop),
            "--dup" => value.parse().map(|v| dup = v).map_err(drop),
            _ => Err(()),
        };
        if parsed.is_err() {
            eprintln!(
                "usage: find [--shape conversation|documents|shared-fleet] [--passes P] [--queries Q] [--pause S] [--prefix N] [--dup N] [--ahead]\n\
                 \x20 --ahead  queries built before the pass (cold queries) rather than each just before its call"
            );
            return ExitCode::from(2);
        }
    }
    let workload = match workload::build(shape, dup, EngineHashes::Shared) {
        Ok(workload) => workload,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let subject = KvroutePool::new(2);
    subject.apply_all(&workload.events);
    subject.flush();
    let stride = (workload.queries.len() / count.max(1)).max(1);
    let sample: Vec<&[_]> = (0..count)
        .map(|i| {
            let query = workload.queries[(i * stride) % workload.queries.len()].as_slice();
            &query[..query.len().min(prefix)]
        })
        .collect();
    // Built once, for `--ahead` only.
    let prepared: Vec<_> =
        if ahead { sample.iter().map(|q| subject.prepare(q)).collect() } else { Vec::new() };
    let time = || {
        if ahead { time_prepared(&subject, &prepared) } else { time_just_built(&subject, &sample) }
    };
    std::thread::sleep(Duration::from_secs(pause));
    let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
    for pass in 1..=passes {
        let mut ns = time();
        let (p50, p99) =
            (percentile(&mut ns, 50.0).unwrap_or(0), percentile(&mut ns, 99.0).unwrap_or(0));
        println!("pass {pass}: p50 {p50} ns  p99 {p99} ns");
        p50s.push(p50);
        p99s.push(p99);
    }
    describe_tail(&subject, &sample, time);
    let (p50, p99) =
        (percentile(&mut p50s, 50.0).unwrap_or(0), percentile(&mut p99s, 50.0).unwrap_or(0));
    println!("{}: median of {passes} passes: p50 {p50} ns  p99 {p99} ns", shape.name());
    ExitCode::SUCCESS
}

/// What the slowest 1% of one more pass's queries (timed by `time`) look like next to all of
/// them: query length, deepest match and workers answered, on average; then, from a second pass,
/// whether the same queries are slow again (a tail of chance would share about 1% of them).
fn describe_tail<S: Subject>(
    subject: &S,
    sample: &[&[LocalBlockHash]],
    time: impl Fn() -> Vec<u64>,
) {
    let ns = time();
    let slowest = |ns: &[u64]| {
        let mut order: Vec<usize> = (0..ns.len()).collect();
        order.sort_unstable_by_key(|&i| std::cmp::Reverse(ns[i]));
        order.truncate(ns.len() / 100);
        order
    };
    let shape = |picked: &mut dyn Iterator<Item = usize>| {
        let (mut n, mut len, mut depth, mut workers) = (0.0f64, 0.0, 0.0, 0.0);
        for i in picked {
            let pairs = subject.scores(sample[i]);
            n += 1.0;
            len += sample[i].len() as f64;
            depth += pairs.iter().map(|&(_, d)| d).max().unwrap_or(0) as f64;
            workers += pairs.len() as f64;
        }
        let n = n.max(1.0);
        format!("query {:.1} blocks, deepest {:.1}, {:.1} workers", len / n, depth / n, workers / n)
    };
    let tail = slowest(&ns);
    println!("all:         {}", shape(&mut (0..ns.len())));
    println!("slowest 1%:  {}", shape(&mut tail.iter().copied()));
    let again = time();
    let tail_again = slowest(&again);
    let both = tail.iter().filter(|i| tail_again.contains(i)).count();
    let mut their_times: Vec<u64> = tail.iter().map(|&i| again[i]).collect();
    let mut all_times = again.clone();
    let (theirs, all) = (percentile(&mut their_times, 50.0), percentile(&mut all_times, 50.0));
    println!(
        "again:       {both} of those {} queries in the next pass's slowest 1%; their p50 there {} ns, all {} ns",
        tail.len(),
        theirs.unwrap_or(0),
        all.unwrap_or(0),
    );
}
