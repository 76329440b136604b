//! The measurement one child process runs for one subject (see the binary's docs for the
//! phases). Generic over the subject so the timed calls are direct, not virtual.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use kvroute::{LocalBlockHash, RouterEvent};

use crate::latency::{by_depth, percentile, time_call, time_just_built, time_queries};
use crate::memory::{rss_bytes, trim};
use crate::outcome::Outcome;
use crate::reference::KvrouteReference;
use crate::subject::Subject;
use crate::workload::{self, Workload};

/// Worker ids of the second fleet ingested while querying are the first fleet's plus this.
pub const BUSY_WORKER_OFFSET: u64 = 1_000;
/// Latency samples kept while ingesting, at most.
const BUSY_SAMPLES_MAX: usize = 4_000_000;
/// Queries of the timed sample run untimed before the quiescent pass.
pub const WARMUP_QUERIES: usize = 2_000;
/// Disagreements printed in full (to stderr), at most.
const SHOWN_DISAGREEMENTS: usize = 5;

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Queries timed in the quiescent pass (cycled over the workload's queries).
    pub timed_queries: usize,
    /// Queries cross-checked against the reference.
    pub checked_queries: usize,
}

/// `count` queries of `workload`, evenly spaced over the whole replay (cycling if needed),
/// starting `phase` queries in.
pub fn sample(
    queries: &[Vec<LocalBlockHash>],
    count: usize,
    phase: usize,
) -> Vec<&[LocalBlockHash]> {
    if queries.is_empty() {
        return Vec::new();
    }
    let stride = (queries.len() / count.max(1)).max(1);
    (0..count).map(|i| queries[(phase + i * stride) % queries.len()].as_slice()).collect()
}

/// Applies every event to `subject` and waits for them all; returns how long that took, in
/// nanoseconds (the comparison's ingest time).
pub fn ingest<S: Subject>(subject: &S, events: &[RouterEvent]) -> u64 {
    let start = Instant::now();
    subject.apply_all(events);
    subject.flush();
    start.elapsed().as_nanos() as u64
}

/// Measures `subject`, freshly built and empty, on `workload`. `busy` times queries while the
/// subject ingests a second stream, for subjects that can (see [`while_ingesting`]).
pub fn run<S: Subject>(
    name: &str,
    subject: S,
    workload: &Workload,
    plan: Plan,
    busy: impl FnOnce(&S, &Workload, &[&[LocalBlockHash]]) -> Option<Vec<u64>>,
) -> Outcome {
    let events = &workload.events;
    trim();
    let rss_start = rss_bytes();

    let ingest_ns = ingest(&subject, events);
    let rss_growth_untrimmed = rss_bytes().saturating_sub(rss_start);
    trim();
    let rss_growth = rss_bytes().saturating_sub(rss_start);

    let timed = sample(&workload.queries, plan.timed_queries, 0);
    let warmup = timed.len().min(WARMUP_QUERIES);
    drop(time_just_built(&subject, &timed[..warmup]));
    let mut quiet = time_just_built(&subject, &timed);
    // The same queries again, all built before the clock starts, so each call finds its query
    // out of the core's caches: the cold-query figure, beside the main one.
    let mut ahead = time_queries(&subject, &timed);
    // Each query's deepest match, from the subject's own (untimed) answer.
    let depths: Vec<u32> = timed
        .iter()
        .map(|q| subject.scores(q).iter().map(|&(_, depth)| depth).max().unwrap_or(0))
        .collect();
    let quiet_by_depth = by_depth(&quiet, &depths);

    let rss_growth_compacted = subject.compact().then(|| {
        trim();
        rss_bytes().saturating_sub(rss_start)
    });

    let (checked, disagreements, live_entries) = cross_check(name, &subject, workload, plan);
    let rejected = subject.rejected();

    let mut busy = busy(&subject, workload, &timed).unwrap_or_default();
    Outcome {
        subject: name.to_string(),
        events: events.len() as u64,
        block_ops: events.iter().map(|e| e.block_ops() as u64).sum(),
        ingest_ns,
        live_entries: live_entries as u64,
        rss_growth,
        rss_growth_untrimmed,
        rss_growth_compacted,
        quiet_queries: quiet.len() as u64,
        quiet_p50_ns: percentile(&mut quiet, 50.0).unwrap_or(0),
        quiet_p99_ns: percentile(&mut quiet, 99.0).unwrap_or(0),
        quiet_by_depth,
        ahead_p50_ns: percentile(&mut ahead, 50.0).unwrap_or(0),
        ahead_p99_ns: percentile(&mut ahead, 99.0).unwrap_or(0),
        busy_queries: busy.len() as u64,
        busy_p50_ns: percentile(&mut busy, 50.0),
        busy_p99_ns: percentile(&mut busy, 99.0),
        checked: checked as u64,
        disagreements: disagreements as u64,
        rejected,
    }
}

/// Compares `subject`'s scores with the reference's on sampled queries. Returns (queries
/// checked, disagreements, live entries).
fn cross_check<S: Subject>(
    name: &str,
    subject: &S,
    workload: &Workload,
    plan: Plan,
) -> (usize, usize, usize) {
    let reference = KvrouteReference::new();
    reference.apply_all(&workload.events);
    // A different phase than the timed sample, so the check is not only on warm queries.
    let queries = sample(&workload.queries, plan.checked_queries, 1);
    let mut disagreements = 0;
    for query in &queries {
        let (ours, theirs) = (reference.scores(query), subject.scores(query));
        if ours != theirs {
            disagreements += 1;
            if disagreements <= SHOWN_DISAGREEMENTS {
                eprintln!(
                    "{name}: disagreement on a {}-block query: reference {ours:?}, {name} {theirs:?}",
                    query.len()
                );
            }
        }
    }
    (queries.len(), disagreements, reference.entry_count())
}

/// The `busy` phase of a single-threaded subject: there is none.
pub fn single_threaded<S: Subject>(
    _: &S,
    _: &Workload,
    _: &[&[LocalBlockHash]],
) -> Option<Vec<u64>> {
    None
}

/// Times `find_matches` on this thread, cycling over `queries`, while another thread applies a
/// second fleet's stream (the same events under worker ids shifted by [`BUSY_WORKER_OFFSET`]:
/// the same tree paths, stored and evicted again) and flushes. Stops when that flush returns.
pub fn while_ingesting<S: Subject + Sync>(
    subject: &S,
    workload: &Workload,
    queries: &[&[LocalBlockHash]],
) -> Option<Vec<u64>> {
    if queries.is_empty() {
        return None;
    }
    let second = workload::shifted(&workload.events, BUSY_WORKER_OFFSET);
    let done = AtomicBool::new(false);
    let mut samples = Vec::with_capacity(BUSY_SAMPLES_MAX.min(1 << 20));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            ingest(subject, &second);
            done.store(true, Ordering::Release);
        });
        let mut next = 0;
        while !done.load(Ordering::Acquire) && samples.len() < BUSY_SAMPLES_MAX {
            let query = subject.prepare(queries[next]);
            next = (next + 1) % queries.len();
            samples.push(time_call(subject, &query));
        }
    });
    Some(samples)
}
