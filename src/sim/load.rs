//! A synthetic in-flight load for the active-sequence tracker: 64 workers × 1,000 requests of
//! 100–200 blocks with shared prefixes, the state the sequence benches and the side-by-side with
//! Dynamo measure on.
//!
//! Every request starts with a 32-block system prompt shared by all, then the context of one of
//! its worker's 32 conversations (0–48 blocks), then its own tail. A candidate is 256 blocks:
//! the system prompt, a random conversation's context and a fresh tail; the prefix index would
//! say every worker holds the system prompt and the conversation's worker holds its context too.
//!
//! ```
//! use kvroute::sim::load::{LoadRng, SequenceLoad};
//!
//! let mut rng = LoadRng::new(7);
//! let load = SequenceLoad::new(&mut rng);
//! let (blocks, isl, overlap) = load.request(&mut rng, 3);
//! assert!((100..=200).contains(&blocks.len()));
//! assert_eq!(isl, blocks.len() * SequenceLoad::BLOCK_SIZE);
//! assert!(overlap as usize >= SequenceLoad::SYSTEM_BLOCKS);
//! ```

use crate::event::{SequenceHash, Worker};
use crate::scores::OverlapScores;

/// splitmix64: small, fast and deterministic, so every run builds the same state.
#[derive(Clone, Debug)]
pub struct LoadRng(u64);

impl LoadRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn hash(&mut self) -> SequenceHash {
        SequenceHash(self.next_u64())
    }
}

/// The shared prefixes every request and candidate is built from; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct SequenceLoad {
    system: Vec<SequenceHash>,
    /// Conversation `k` belongs to worker `k % WORKERS`.
    conversations: Vec<Vec<SequenceHash>>,
}

/// One candidate request.
#[derive(Clone, Debug)]
pub struct LoadCandidate {
    /// Its blocks.
    pub blocks: Vec<SequenceHash>,
    /// Its prompt length in tokens.
    pub isl: usize,
    /// The worker holding its conversation context.
    pub home: usize,
    /// How many leading blocks that worker holds (system prompt + context).
    pub home_overlap: usize,
}

impl LoadCandidate {
    /// The overlaps a prefix index would report: the home worker its context, every other worker
    /// the system prompt.
    pub fn overlaps(&self) -> OverlapScores {
        let scores = (0..SequenceLoad::WORKERS)
            .map(|w| {
                let depth =
                    if w == self.home { self.home_overlap } else { SequenceLoad::SYSTEM_BLOCKS };
                (Worker::new(w as u64, 0), depth as u32)
            })
            .collect();
        OverlapScores::from_pairs(scores)
    }
}

impl SequenceLoad {
    /// Workers (ids `0..WORKERS`, rank 0).
    pub const WORKERS: usize = 64;
    /// Active requests per worker in the full state.
    pub const REQUESTS_PER_WORKER: usize = 1_000;
    /// Tokens per block.
    pub const BLOCK_SIZE: usize = 16;
    /// Blocks of the system prompt every request shares.
    pub const SYSTEM_BLOCKS: usize = 32;
    /// Conversations per worker.
    pub const CONVERSATIONS_PER_WORKER: usize = 32;
    /// The longest conversation context, in blocks.
    pub const MAX_CONTEXT_BLOCKS: usize = 48;
    /// Shortest and longest request, in blocks.
    pub const REQUEST_BLOCKS: (usize, usize) = (100, 200);
    /// Blocks of a candidate.
    pub const CANDIDATE_BLOCKS: usize = 256;

    /// Draws the system prompt and every conversation context.
    pub fn new(rng: &mut LoadRng) -> Self {
        let system = (0..Self::SYSTEM_BLOCKS).map(|_| rng.hash()).collect();
        let conversations = (0..Self::WORKERS * Self::CONVERSATIONS_PER_WORKER)
            .map(|_| {
                let len = rng.below(Self::MAX_CONTEXT_BLOCKS + 1);
                (0..len).map(|_| rng.hash()).collect()
            })
            .collect();
        Self { system, conversations }
    }

    /// A fresh request for `worker`: (blocks, isl in tokens, overlap in blocks).
    pub fn request(&self, rng: &mut LoadRng, worker: usize) -> (Vec<SequenceHash>, usize, u32) {
        let conversation =
            &self.conversations[worker + Self::WORKERS * rng.below(Self::CONVERSATIONS_PER_WORKER)];
        let (shortest, longest) = Self::REQUEST_BLOCKS;
        let len = shortest + rng.below(longest - shortest + 1);
        let mut blocks = Vec::with_capacity(len);
        blocks.extend_from_slice(&self.system);
        blocks.extend_from_slice(conversation);
        while blocks.len() < len {
            blocks.push(rng.hash());
        }
        (blocks, len * Self::BLOCK_SIZE, (Self::SYSTEM_BLOCKS + conversation.len()) as u32)
    }

    /// A candidate of [`Self::CANDIDATE_BLOCKS`] blocks.
    pub fn candidate(&self, rng: &mut LoadRng) -> LoadCandidate {
        let conversation = rng.below(self.conversations.len());
        let mut blocks = self.system.clone();
        blocks.extend_from_slice(&self.conversations[conversation]);
        let home_overlap = blocks.len();
        while blocks.len() < Self::CANDIDATE_BLOCKS {
            blocks.push(rng.hash());
        }
        LoadCandidate {
            blocks,
            isl: Self::CANDIDATE_BLOCKS * Self::BLOCK_SIZE,
            home: conversation % Self::WORKERS,
            home_overlap,
        }
    }
}
