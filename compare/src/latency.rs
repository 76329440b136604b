//! Timing `find_matches` one call at a time, and percentiles of the samples.

use std::hint::black_box;
use std::time::Instant;

use kvroute::LocalBlockHash;

use crate::subject::Subject;

/// Nanoseconds of one `find_matches` call per query of `sample`, in order. Each query is
/// prepared in the subject's native form before the clock starts; the clock covers the call
/// and the drop of its answer.
pub fn time_queries<S: Subject + ?Sized>(subject: &S, sample: &[&[LocalBlockHash]]) -> Vec<u64> {
    let prepared: Vec<S::Query> = sample.iter().map(|q| subject.prepare(q)).collect();
    time_prepared(subject, &prepared)
}

/// Nanoseconds of one `find_matches` call per query already in the subject's native form; the
/// clock covers the call and the drop of its answer.
pub fn time_prepared<S: Subject + ?Sized>(subject: &S, prepared: &[S::Query]) -> Vec<u64> {
    prepared.iter().map(|query| time_call(subject, query)).collect()
}

/// Nanoseconds of one `find_matches` call per query of `sample`, in order, each query prepared
/// in the subject's native form just before its call, as a router builds a query (hashes a
/// request's tokens) right before asking the index: the query is then in the core's caches.
/// The clock covers the call and the drop of its answer, not the preparing.
pub fn time_just_built<S: Subject + ?Sized>(subject: &S, sample: &[&[LocalBlockHash]]) -> Vec<u64> {
    sample.iter().map(|raw| time_call(subject, &subject.prepare(raw))).collect()
}

/// Nanoseconds of one `find_matches` call on `query`, the drop of its answer included.
#[inline]
pub fn time_call<S: Subject + ?Sized>(subject: &S, query: &S::Query) -> u64 {
    let start = Instant::now();
    drop(black_box(subject.find_matches(black_box(query))));
    start.elapsed().as_nanos() as u64
}

/// The `p`-th percentile (0–100, nearest rank) of `samples`, in nanoseconds; `None` if empty.
pub fn percentile(samples: &mut [u64], p: f64) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    Some(samples[rank.clamp(1, samples.len()) - 1])
}

/// Matched-depth ranges (deepest worker's score, in blocks) the quiescent latencies are split by:
/// the shared system prompt only, then ever deeper matches.
pub const DEPTH_BUCKETS: [(u32, u32); 4] = [(0, 8), (9, 64), (65, 256), (257, u32::MAX)];

/// A bucket's label, e.g. `9–64`.
pub fn bucket_label((low, high): (u32, u32)) -> String {
    if high == u32::MAX { format!(">{}", low - 1) } else { format!("{low}–{high}") }
}

/// Latency of one bucket of queries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketLatency {
    /// Queries in the bucket.
    pub count: u64,
    /// Median, nanoseconds (0 when empty).
    pub p50_ns: u64,
    /// 99th percentile, nanoseconds (0 when empty).
    pub p99_ns: u64,
}

/// `samples` (nanoseconds) split by the matched depth of their query, per [`DEPTH_BUCKETS`].
pub fn by_depth(samples: &[u64], depths: &[u32]) -> Vec<BucketLatency> {
    DEPTH_BUCKETS
        .iter()
        .map(|&(low, high)| {
            let mut bucket: Vec<u64> = samples
                .iter()
                .zip(depths)
                .filter(|&(_, &depth)| (low..=high).contains(&depth))
                .map(|(&ns, _)| ns)
                .collect();
            BucketLatency {
                count: bucket.len() as u64,
                p50_ns: percentile(&mut bucket, 50.0).unwrap_or(0),
                p99_ns: percentile(&mut bucket, 99.0).unwrap_or(0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut samples: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut samples, 50.0), Some(50));
        assert_eq!(percentile(&mut samples, 99.0), Some(99));
        assert_eq!(percentile(&mut [], 50.0), None);
    }

    #[test]
    fn splits_by_depth() {
        let buckets = by_depth(&[10, 20, 30, 40], &[0, 8, 9, 1_000]);
        let counts: Vec<u64> = buckets.iter().map(|b| b.count).collect();
        assert_eq!(counts, [2, 1, 0, 1]);
        assert_eq!(buckets[0].p99_ns, 20);
        assert_eq!(bucket_label(DEPTH_BUCKETS[3]), ">256");
    }
}
