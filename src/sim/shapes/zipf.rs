//! [`Zipf`]: a popularity law over `n` items (item `k` drawn with weight `1 / (k + 1)^s`), sampled
//! from a precomputed cumulative table with the simulator's seeded [`LoadRng`].

use crate::sim::load::LoadRng;

/// A Zipf distribution over `0..n`, sampled by binary search in its cumulative weights.
#[derive(Clone, Debug)]
pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    /// `n` items (at least one), exponent `s` (0 is uniform; negative or non-finite counts as 0).
    pub fn new(n: usize, s: f64) -> Self {
        let s = if s.is_finite() && s > 0.0 { s } else { 0.0 };
        let mut total = 0.0;
        let cumulative = (0..n.max(1))
            .map(|k| {
                total += ((k + 1) as f64).powf(-s);
                total
            })
            .collect();
        Self { cumulative }
    }

    /// How many items there are.
    pub fn len(&self) -> usize {
        self.cumulative.len()
    }

    /// Always false: there is at least one item.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// One item, the most popular being 0.
    pub fn sample(&self, rng: &mut LoadRng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        // 53 random bits as a fraction in [0, 1).
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
        self.cumulative.partition_point(|&c| c <= u).min(self.cumulative.len() - 1)
    }
}

/// A length drawn uniformly from `lo..=hi` (`hi` below `lo` counts as `lo`).
pub(crate) fn between(rng: &mut LoadRng, (lo, hi): (usize, usize)) -> usize {
    lo + rng.below(hi.saturating_sub(lo) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_drawn_more_often_than_the_tail() {
        let zipf = Zipf::new(100, 1.0);
        let mut rng = LoadRng::new(1);
        let mut counts = [0usize; 100];
        for _ in 0..20_000 {
            counts[zipf.sample(&mut rng)] += 1;
        }
        assert!(counts[0] > 5 * counts[50], "{counts:?}");
        assert!(counts.iter().all(|&c| c < 20_000));
    }

    #[test]
    fn exponent_zero_is_uniform_and_degenerate_sizes_do_not_panic() {
        let zipf = Zipf::new(4, 0.0);
        let mut rng = LoadRng::new(2);
        let mut counts = [0usize; 4];
        for _ in 0..40_000 {
            counts[zipf.sample(&mut rng)] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
        assert_eq!(Zipf::new(0, f64::NAN).sample(&mut rng), 0);
        assert_eq!(between(&mut rng, (5, 3)), 5);
    }
}
