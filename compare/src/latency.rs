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
    prepared
        .iter()
        .map(|query| {
            let start = Instant::now();
            drop(black_box(subject.find_matches(black_box(query))));
            start.elapsed().as_nanos() as u64
        })
        .collect()
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
