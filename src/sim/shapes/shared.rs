//! [`SharedPrefixes`]: a fleet with heavy cross-worker sharing.
//!
//! A few system prompts (roots), each with a set of shared contexts (tool sets, few-shot
//! examples) under it, then a short tail of the request's own. Requests pick a root and a context
//! by Zipf popularity and are spread over the workers round-robin (as a load balancer blind to
//! caches would), so every worker ends up holding every popular prefix: the index's holder sets
//! are as wide as the fleet near the roots, and narrow to one worker in the tails.

use crate::sim::load::LoadRng;
use crate::sim::shapes::FreshIds;
use crate::sim::shapes::documents::request;
use crate::sim::shapes::zipf::{Zipf, between};
use crate::sim::trace::TraceRequest;
use crate::sim::{FleetConfig, Routing};

/// The shared-prefix workload's parameters. Lengths are in trace blocks (512 tokens each).
#[derive(Clone, Debug, PartialEq)]
pub struct SharedPrefixes {
    /// System prompts.
    pub roots: usize,
    /// Shortest and longest system prompt.
    pub root_blocks: (usize, usize),
    /// Shared contexts under each system prompt.
    pub contexts_per_root: usize,
    /// Shortest and longest shared context.
    pub context_blocks: (usize, usize),
    /// Shortest and longest tail of a request's own.
    pub tail_blocks: (usize, usize),
    /// Requests generated.
    pub requests: usize,
    /// Zipf exponent of root and context popularity (0: uniform).
    pub popularity: f64,
    /// Milliseconds between arrivals.
    pub interval_ms: u64,
    /// Seed of every draw.
    pub seed: u64,
}

impl Default for SharedPrefixes {
    /// 8 roots of 2–6 blocks × 32 contexts of 2–8 blocks, tails of 1–6, 16,000 requests, Zipf 1.
    fn default() -> Self {
        Self {
            roots: 8,
            root_blocks: (2, 6),
            contexts_per_root: 32,
            context_blocks: (2, 8),
            tail_blocks: (1, 6),
            requests: 16_000,
            popularity: 1.0,
            interval_ms: 50,
            seed: 0x5A4E,
        }
    }
}

impl SharedPrefixes {
    /// The fleet this shape is meant for: 32 workers × 16,384 blocks of 128 tokens (4 KV blocks
    /// per trace block), round-robin routing.
    pub fn fleet() -> FleetConfig {
        FleetConfig {
            workers: 32,
            cache_blocks: 8_192,
            sub_blocks: 4,
            routing: Routing::RoundRobin,
            ..FleetConfig::default()
        }
    }

    /// The requests, in arrival order. Deterministic for the parameters.
    pub fn trace(&self) -> Vec<TraceRequest> {
        let mut rng = LoadRng::new(self.seed);
        let mut fresh = FreshIds::default();
        let roots: Vec<Vec<u64>> = (0..self.roots.max(1))
            .map(|_| {
                let len = between(&mut rng, self.root_blocks).max(1);
                fresh.take(len)
            })
            .collect();
        let contexts: Vec<Vec<Vec<u64>>> = roots
            .iter()
            .map(|_| {
                (0..self.contexts_per_root.max(1))
                    .map(|_| {
                        let len = between(&mut rng, self.context_blocks);
                        fresh.take(len)
                    })
                    .collect()
            })
            .collect();
        let root_law = Zipf::new(roots.len(), self.popularity);
        let context_law = Zipf::new(self.contexts_per_root.max(1), self.popularity);
        (0..self.requests)
            .map(|i| {
                let root = root_law.sample(&mut rng);
                let context = context_law.sample(&mut rng);
                let mut hash_ids = roots[root].clone();
                hash_ids.extend_from_slice(&contexts[root][context]);
                hash_ids.extend(fresh.take(between(&mut rng, self.tail_blocks)));
                request(i as u64 * self.interval_ms, hash_ids)
            })
            .collect()
    }
}
