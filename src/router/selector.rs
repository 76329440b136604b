//! [`WorkerSelector`]: the policy that picks one candidate, and the ones kvroute ships.
//!
//! The router computes every candidate's cost terms ([`Candidate`]) and hands them to a
//! selector. [`CostSelector`] is the default: the cheapest logit at temperature 0, softmax
//! sampling over min–max-normalised logits above it. [`RoundRobin`], [`Random`] and
//! [`LeastLoaded`] ignore the cache and are there to compare against (and for fleets where the
//! cache does not matter).

use crate::router::RouterRng;
use crate::router::request::Candidate;
use crate::sync::{AtomicUsize, Ordering};

/// What a selector may use besides the candidates.
#[derive(Debug)]
pub struct SelectContext<'a> {
    /// The request's temperature (its override, else the router's).
    pub temperature: f64,
    /// The router's seedable generator, for ties and sampling.
    pub rng: &'a RouterRng,
}

/// A routing policy: picks one of `candidates` (never empty) by its index.
///
/// ```
/// use kvroute::router::{Candidate, SelectContext, WorkerSelector};
///
/// /// Always the candidate holding the most blocks, whatever the load.
/// struct GreedyCache;
///
/// impl WorkerSelector for GreedyCache {
///     fn select(&self, candidates: &[Candidate], _: &SelectContext<'_>) -> usize {
///         let best = candidates.iter().enumerate().max_by_key(|(_, c)| c.overlap_blocks);
///         best.map_or(0, |(at, _)| at)
///     }
/// }
/// ```
pub trait WorkerSelector: Send + Sync + 'static {
    /// The index in `candidates` of the worker to route to. An index out of range is treated
    /// as 0.
    fn select(&self, candidates: &[Candidate], context: &SelectContext<'_>) -> usize;
}

/// The cost model's selector: lowest logit wins at temperature 0 (ties broken at random);
/// above 0, worker `i` is drawn with probability ∝ `exp(-norm_i / T)`, where `norm` is the
/// logit min–max-normalised over the candidates.
#[derive(Clone, Copy, Debug, Default)]
pub struct CostSelector;

impl WorkerSelector for CostSelector {
    fn select(&self, candidates: &[Candidate], context: &SelectContext<'_>) -> usize {
        if context.temperature > 0.0 {
            softmax_sample(candidates, context.temperature, context.rng)
        } else {
            argmin_by(candidates, context.rng, |c| c.logit)
        }
    }
}

/// The index of a candidate with the smallest `key`, uniformly among ties (reservoir sampling,
/// so ties cost no allocation).
pub fn argmin_by<K: PartialOrd>(
    candidates: &[Candidate],
    rng: &RouterRng,
    key: impl Fn(&Candidate) -> K,
) -> usize {
    let (mut best, mut best_key, mut ties) = (0, None::<K>, 0usize);
    for (at, candidate) in candidates.iter().enumerate() {
        let k = key(candidate);
        let order = best_key.as_ref().map_or(Some(std::cmp::Ordering::Less), |b| k.partial_cmp(b));
        if order == Some(std::cmp::Ordering::Less) {
            (best, best_key, ties) = (at, Some(k), 1);
        } else if order == Some(std::cmp::Ordering::Equal) {
            ties += 1;
            if rng.below(ties) == 0 {
                best = at;
            }
        }
    }
    best
}

/// Draws a candidate with probability ∝ `exp(-norm / temperature)` over min–max-normalised
/// logits (all equal: uniform).
fn softmax_sample(candidates: &[Candidate], temperature: f64, rng: &RouterRng) -> usize {
    let (min, max) = candidates
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), c| (lo.min(c.logit), hi.max(c.logit)));
    let range = max - min;
    if range.is_nan() || range <= 0.0 {
        return rng.below(candidates.len());
    }
    let weight = |c: &Candidate| (-((c.logit - min) / range) / temperature).exp();
    let total: f64 = candidates.iter().map(weight).sum();
    let mut target = rng.next_f64() * total;
    for (at, candidate) in candidates.iter().enumerate() {
        target -= weight(candidate);
        if target < 0.0 {
            return at;
        }
    }
    // Rounding left a sliver: the cheapest candidate has the largest weight.
    argmin_by(candidates, rng, |c| c.logit)
}

/// Each candidate in turn, ignoring costs.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl WorkerSelector for RoundRobin {
    fn select(&self, candidates: &[Candidate], _: &SelectContext<'_>) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % candidates.len()
    }
}

/// A uniformly random candidate, ignoring costs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Random;

impl WorkerSelector for Random {
    fn select(&self, candidates: &[Candidate], context: &SelectContext<'_>) -> usize {
        context.rng.below(candidates.len())
    }
}

/// The candidate with the fewest requests in flight, then the fewest queued prefill tokens,
/// then the fewest blocks pinned, ignoring its cache (ties at random).
#[derive(Clone, Copy, Debug, Default)]
pub struct LeastLoaded;

impl WorkerSelector for LeastLoaded {
    fn select(&self, candidates: &[Candidate], context: &SelectContext<'_>) -> usize {
        argmin_by(candidates, context.rng, |c| {
            (c.active_requests, c.queued_prefill_tokens, c.decode_blocks)
        })
    }
}
