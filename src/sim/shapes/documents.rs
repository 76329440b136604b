//! [`DocumentReuse`]: many roots, documents reused across many requests.
//!
//! Each request is one document (its own first block: no common system prompt, so thousands of
//! distinct roots) followed by a question of its own. Documents are drawn by a Zipf law, so the
//! popular ones are asked about again and again and end up on several workers; the questions
//! never repeat. With the default fleet ([`DocumentReuse::fleet`]: 512-token KV blocks, caches
//! large enough that little is evicted) requests are ~30 blocks and ~60% of requested blocks hit:
//! many short runs in the index, each held by a few workers.

use crate::sim::load::LoadRng;
use crate::sim::shapes::FreshIds;
use crate::sim::shapes::zipf::{Zipf, between};
use crate::sim::trace::{TRACE_BLOCK_TOKENS, TraceRequest};
use crate::sim::{FleetConfig, Routing};

/// The document-reuse workload's parameters. Lengths are in trace blocks (512 tokens each).
#[derive(Clone, Debug, PartialEq)]
pub struct DocumentReuse {
    /// Distinct documents (each its own root).
    pub documents: usize,
    /// Shortest and longest document.
    pub document_blocks: (usize, usize),
    /// Shortest and longest question after the document.
    pub question_blocks: (usize, usize),
    /// Requests generated.
    pub requests: usize,
    /// Zipf exponent of document popularity (0: uniform).
    pub popularity: f64,
    /// Milliseconds between arrivals.
    pub interval_ms: u64,
    /// Seed of every draw.
    pub seed: u64,
}

impl Default for DocumentReuse {
    /// 4,096 documents of 12–36 blocks, questions of 2–12 blocks, 32,000 requests, Zipf 1.
    fn default() -> Self {
        Self {
            documents: 4_096,
            document_blocks: (12, 36),
            question_blocks: (2, 12),
            requests: 32_000,
            popularity: 1.0,
            interval_ms: 50,
            seed: 0xD0C5,
        }
    }
}

impl DocumentReuse {
    /// The fleet this shape is meant for: 16 workers × 32,768 blocks of 512 tokens (one KV block
    /// per trace block), bounded-share longest-prefix routing with no slack (an even share), which
    /// spreads a popular document over several workers. With the defaults: 3,364 distinct first
    /// blocks, ~2.1 workers per document root, 60.6% of requested blocks hit, nothing evicted.
    pub fn fleet() -> FleetConfig {
        FleetConfig {
            workers: 16,
            cache_blocks: 32_768,
            sub_blocks: 1,
            share_slack: 0.0,
            routing: Routing::BoundedShare,
            ..FleetConfig::default()
        }
    }

    /// The requests, in arrival order. Deterministic for the parameters.
    pub fn trace(&self) -> Vec<TraceRequest> {
        let mut rng = LoadRng::new(self.seed);
        let mut fresh = FreshIds::default();
        let documents: Vec<Vec<u64>> = (0..self.documents.max(1))
            .map(|_| {
                let len = between(&mut rng, self.document_blocks).max(1);
                fresh.take(len)
            })
            .collect();
        let popularity = Zipf::new(documents.len(), self.popularity);
        // Rank k is a random document, so popularity does not follow creation order.
        let mut order: Vec<usize> = (0..documents.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        (0..self.requests)
            .map(|i| {
                let document = &documents[order[popularity.sample(&mut rng)]];
                let mut hash_ids = document.clone();
                hash_ids.extend(fresh.take(between(&mut rng, self.question_blocks)));
                request(i as u64 * self.interval_ms, hash_ids)
            })
            .collect()
    }
}

/// A request of whole trace blocks with 256 output tokens.
pub(crate) fn request(timestamp: u64, hash_ids: Vec<u64>) -> TraceRequest {
    // Saturated: a request longer than u32::MAX tokens is not one the generators are asked for.
    let input_length =
        u32::try_from(hash_ids.len()).unwrap_or(u32::MAX).saturating_mul(TRACE_BLOCK_TOKENS);
    TraceRequest { timestamp, input_length, output_length: 256, hash_ids }
}
