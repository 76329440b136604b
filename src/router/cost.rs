//! The cost model: every candidate's terms from its cache match and its load.
//!
//! Per candidate (worker, dp_rank):
//!
//! ```text
//! effective_overlap = device blocks + Σ lower-tier continuation blocks × tier weight
//!                     + shared-cache blocks beyond the worker's own match × shared weight
//! cached_tokens     = round(effective_overlap × block_size), at most isl
//! prefill_blocks    = (isl − cached_tokens + the worker's queued prefill tokens) / block_size
//! decode_blocks     = blocks the worker's requests in flight would pin with this one added
//! logit             = overlap_score_weight × prefill_blocks + decode_blocks     (lower is better)
//!
//! With `queued_prefill_weight` set, the queued tokens' share of `prefill_blocks` is weighed by
//! it instead of by `overlap_score_weight`:
//! logit = overlap_score_weight × (isl − cached_tokens) / block_size
//!         + queued_prefill_weight × queued tokens / block_size + decode_blocks
//! ```

use crate::event::Worker;
use crate::hash::RequestHashes;
use crate::index::TierScratch;
use crate::router::request::Candidate;
use crate::sequences::PotentialLoad;

/// The weights the model applies to one request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Weights {
    pub block_size: u32,
    pub overlap_score_weight: f64,
    /// The weight of the worker's queued prefill tokens (Dynamo's formula: the overlap weight).
    pub queued_prefill_weight: f64,
    /// Host-pinned, disk, external, as in [`crate::index::LOWER_TIERS`].
    pub tiers: [f64; 3],
    pub shared: f64,
}

/// Reused buffers of one routing call (kept per thread, so a warm call allocates nothing).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    pub hashes: RequestHashes,
    pub bytes: Vec<u8>,
    pub tiers: TierScratch,
    pub loads: Vec<PotentialLoad>,
    pub more_loads: Vec<PotentialLoad>,
    pub candidates: Vec<Candidate>,
}

/// One candidate's terms, from its load (which carries its device match), its tiers'
/// continuations and the shared cache's prefix hits.
pub(crate) fn candidate(
    load: &PotentialLoad,
    lower: [u32; 3],
    shared_hits: usize,
    isl: usize,
    weights: &Weights,
) -> Candidate {
    let device = load.overlap_blocks;
    let own = device as usize + lower.iter().map(|&c| c as usize).sum::<usize>();
    let mut effective = f64::from(device);
    for (blocks, weight) in lower.iter().zip(weights.tiers) {
        effective += f64::from(*blocks) * weight;
    }
    effective += shared_hits.saturating_sub(own) as f64 * weights.shared;
    let block_size = f64::from(weights.block_size);
    // Rounded half up by truncation (every term is non-negative): `f64::round` and `floor`
    // are library calls on baseline x86_64.
    let cached_tokens = ((effective * block_size + 0.5) as u64).min(isl as u64) as f64;
    let prefill_tokens = isl as f64 - cached_tokens + load.active_tokens as f64;
    let prefill_blocks = prefill_tokens / block_size;
    let queued = load.active_tokens as f64 / block_size;
    let own = prefill_blocks - queued;
    Candidate {
        worker: load.worker,
        overlap_blocks: device,
        effective_overlap: effective,
        prefill_tokens,
        prefill_blocks,
        queued_prefill_tokens: load.active_tokens,
        decode_blocks: load.potential_blocks,
        active_requests: load.active_requests,
        logit: weights.overlap_score_weight * own
            + weights.queued_prefill_weight * queued
            + load.potential_blocks as f64,
    }
}

/// A worker's continuation in each lower tier (0 where it has none). Lower tiers are empty in
/// most fleets, which makes this free.
pub(crate) fn lower_tiers(tiers: &TierScratch, worker: Worker) -> [u32; 3] {
    tiers
        .lower
        .each_ref()
        .map(|pairs| pairs.iter().find(|(w, _)| *w == worker).map_or(0, |&(_, blocks)| blocks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(active_tokens: usize, potential_blocks: usize, overlap_blocks: u32) -> PotentialLoad {
        PotentialLoad {
            worker: Worker::new(1, 0),
            potential_blocks,
            potential_tokens: 0,
            active_tokens,
            overlap_blocks,
            active_requests: 1,
        }
    }

    const WEIGHTS: Weights = Weights {
        block_size: 16,
        overlap_score_weight: 1.0,
        queued_prefill_weight: 1.0,
        tiers: [0.75, 0.25, 0.1],
        shared: 0.5,
    };

    #[test]
    fn device_overlap_and_queued_prefill_make_the_logit() {
        // 100 tokens, 4 of 6 blocks on device: 64 cached, 36 + 20 queued = 56 tokens = 3.5 blocks.
        let c = candidate(&load(20, 10, 4), [0; 3], 0, 100, &WEIGHTS);
        assert_eq!(c.effective_overlap, 4.0);
        assert_eq!(c.prefill_tokens, 56.0);
        assert_eq!(c.prefill_blocks, 3.5);
        assert_eq!(c.decode_blocks, 10);
        assert_eq!(c.logit, 13.5);
    }

    #[test]
    fn lower_tiers_count_at_their_weights_and_shared_hits_only_beyond_the_own_match() {
        // 2 device + 2 host (1.5) + 1 disk (0.25) = 3.75 blocks; the shared cache holds 6, of
        // which 1 lies beyond the worker's own 5: 0.5 more. 4.25 × 16 = 68 tokens cached.
        let c = candidate(&load(0, 7, 2), [2, 1, 0], 6, 160, &WEIGHTS);
        assert_eq!(c.effective_overlap, 4.25);
        assert_eq!(c.prefill_tokens, 92.0);
        assert_eq!(c.logit, 92.0 / 16.0 + 7.0);
        // A shared cache holding less than the worker's own match adds nothing.
        let c = candidate(&load(0, 7, 2), [2, 1, 0], 3, 160, &WEIGHTS);
        assert_eq!(c.effective_overlap, 3.75);
    }

    #[test]
    fn cached_tokens_never_exceed_the_prompt_and_weight_scales_prefill() {
        let weights = Weights { overlap_score_weight: 2.0, queued_prefill_weight: 2.0, ..WEIGHTS };
        // 40 tokens, 3 full-credit blocks = 48 tokens > 40: nothing left to prefill.
        let c = candidate(&load(8, 5, 3), [0; 3], 0, 40, &weights);
        assert_eq!(c.prefill_tokens, 8.0);
        assert_eq!(c.logit, 2.0 * 0.5 + 5.0);
    }

    #[test]
    fn a_queued_prefill_weight_of_its_own_weighs_only_the_queue() {
        // 100 tokens, 4 blocks cached (64 tokens): 36 own + 20 queued tokens, 10 decode blocks.
        let weights = Weights { overlap_score_weight: 16.0, queued_prefill_weight: 1.0, ..WEIGHTS };
        let c = candidate(&load(20, 10, 4), [0; 3], 0, 100, &weights);
        assert_eq!(c.prefill_blocks, 3.5, "the breakdown still reports the whole prefill");
        assert_eq!(c.logit, 16.0 * 36.0 / 16.0 + 20.0 / 16.0 + 10.0);
    }
}
