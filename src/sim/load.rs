//! A synthetic in-flight load for the active-sequence tracker, the state the sequence benches and
//! the side-by-side with Dynamo measure on. Its shape ([`LoadShape`]) is parameterised; the
//! default ([`LoadShape::conversation`], what [`SequenceLoad::new`] builds) is 64 workers × 1,000
//! requests of 100–200 blocks with shared prefixes.
//!
//! Every request starts with a system prompt shared by all (32 blocks by default), then one of
//! its worker's contexts (a conversation of 0–48 blocks; in other shapes a document or shared
//! context held by several workers), then its own tail. A candidate is the system prompt, a
//! random context and a fresh tail (256 blocks by default); the prefix index would say every
//! worker holds the system prompt and the context's holders hold the context too.
//!
//! ```
//! use kvroute::sim::load::{LoadRng, LoadShape, SequenceLoad};
//!
//! let mut rng = LoadRng::new(7);
//! let load = SequenceLoad::new(&mut rng);
//! let (blocks, isl, overlap) = load.request(&mut rng, 3);
//! assert!((100..=200).contains(&blocks.len()));
//! assert_eq!(isl, blocks.len() * SequenceLoad::BLOCK_SIZE);
//! assert!(overlap as usize >= SequenceLoad::SYSTEM_BLOCKS);
//!
//! // Documents held by three workers each, no system prompt.
//! let docs = SequenceLoad::with_shape(LoadShape::documents(), &mut rng);
//! let candidate = docs.candidate(&mut rng);
//! assert_eq!(candidate.holders.len(), 3);
//! assert_eq!(candidate.overlaps().len(), 3);
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

/// The shape of a [`SequenceLoad`]: how many workers and requests, and which prefixes they share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadShape {
    /// Workers (ids `0..workers`, rank 0).
    pub workers: usize,
    /// Active requests per worker in the full state.
    pub requests_per_worker: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks of the system prompt every request shares (0: none).
    pub system_blocks: usize,
    /// Contexts per worker that the worker is the first holder of (the total is this × workers).
    pub contexts_per_worker: usize,
    /// Shortest and longest context, in blocks.
    pub context_blocks: (usize, usize),
    /// Workers holding each context: context `k` is held by workers `k % W .. k % W + holders`
    /// (mod `W`). 1: a worker's own conversations; `W`: every worker holds every context.
    pub holders: usize,
    /// Shortest and longest request, in blocks.
    pub request_blocks: (usize, usize),
    /// Blocks of a candidate.
    pub candidate_blocks: usize,
}

impl LoadShape {
    /// The conversation load: 64 workers × 1,000 requests of 100–200 blocks (16 tokens), a
    /// 32-block system prompt, 32 conversations of 0–48 blocks per worker (held by that worker
    /// only), 256-block candidates.
    pub fn conversation() -> Self {
        Self {
            workers: SequenceLoad::WORKERS,
            requests_per_worker: SequenceLoad::REQUESTS_PER_WORKER,
            block_size: SequenceLoad::BLOCK_SIZE,
            system_blocks: SequenceLoad::SYSTEM_BLOCKS,
            contexts_per_worker: SequenceLoad::CONVERSATIONS_PER_WORKER,
            context_blocks: (0, SequenceLoad::MAX_CONTEXT_BLOCKS),
            holders: 1,
            request_blocks: SequenceLoad::REQUEST_BLOCKS,
            candidate_blocks: SequenceLoad::CANDIDATE_BLOCKS,
        }
    }

    /// Many roots, documents reused: no system prompt, 4,096 documents of 12–36 blocks each
    /// held by 3 workers, requests of 20–40 blocks (document + question), 32-block candidates.
    pub fn documents() -> Self {
        Self {
            system_blocks: 0,
            contexts_per_worker: 64,
            context_blocks: (12, 36),
            holders: 3,
            request_blocks: (20, 40),
            candidate_blocks: 32,
            ..Self::conversation()
        }
    }

    /// Heavy cross-worker sharing: an 8-block system prompt, 256 shared contexts of 8–32 blocks
    /// held by every worker, requests of 40–60 blocks, 64-block candidates.
    pub fn shared_fleet() -> Self {
        Self {
            system_blocks: 8,
            contexts_per_worker: 4,
            context_blocks: (8, 32),
            holders: SequenceLoad::WORKERS,
            request_blocks: (40, 60),
            candidate_blocks: 64,
            ..Self::conversation()
        }
    }

    /// The shape named like `kvroute::sim::shapes::Shape`: `conversation`, `documents`,
    /// `shared-fleet`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "conversation" => Some(Self::conversation()),
            "documents" => Some(Self::documents()),
            "shared-fleet" => Some(Self::shared_fleet()),
            _ => None,
        }
    }

    /// Every shape's name, in report order.
    pub const NAMES: [&'static str; 3] = ["conversation", "documents", "shared-fleet"];

    /// One line saying what the shape is.
    pub fn describe(&self) -> String {
        format!(
            "{} workers x {} requests of {}-{} blocks ({}-block system prompt, {} contexts of {}-{} \
             blocks each held by {} worker(s)), {}-block candidates",
            self.workers,
            self.requests_per_worker,
            self.request_blocks.0,
            self.request_blocks.1,
            self.system_blocks,
            self.contexts(),
            self.context_blocks.0,
            self.context_blocks.1,
            self.holders.clamp(1, self.workers.max(1)),
            self.candidate_blocks,
        )
    }

    fn contexts(&self) -> usize {
        self.workers.max(1) * self.contexts_per_worker.max(1)
    }
}

impl Default for LoadShape {
    fn default() -> Self {
        Self::conversation()
    }
}

/// The shared prefixes every request and candidate is built from; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct SequenceLoad {
    shape: LoadShape,
    system: Vec<SequenceHash>,
    /// Context `k` is first held by worker `k % workers`.
    contexts: Vec<Vec<SequenceHash>>,
}

/// One candidate request.
#[derive(Clone, Debug)]
pub struct LoadCandidate {
    /// Its blocks.
    pub blocks: Vec<SequenceHash>,
    /// Its prompt length in tokens.
    pub isl: usize,
    /// The first worker holding its context.
    pub home: usize,
    /// Every worker holding its context (`home` first).
    pub holders: Vec<usize>,
    /// How many leading blocks the holders hold (system prompt + context).
    pub home_overlap: usize,
    /// How many leading blocks every other worker holds (the system prompt).
    pub shared_overlap: usize,
    /// Workers in the fleet.
    pub workers: usize,
}

impl LoadCandidate {
    /// The overlaps a prefix index would report: the context's holders the context, every other
    /// worker the system prompt (workers holding nothing are left out).
    pub fn overlaps(&self) -> OverlapScores {
        let scores = (0..self.workers)
            .map(|w| {
                let depth =
                    if self.holders.contains(&w) { self.home_overlap } else { self.shared_overlap };
                (Worker::new(w as u64, 0), depth as u32)
            })
            .filter(|&(_, depth)| depth > 0)
            .collect();
        OverlapScores::from_pairs(scores)
    }
}

impl SequenceLoad {
    /// Workers of the default shape.
    pub const WORKERS: usize = 64;
    /// Active requests per worker in the default shape.
    pub const REQUESTS_PER_WORKER: usize = 1_000;
    /// Tokens per block.
    pub const BLOCK_SIZE: usize = 16;
    /// Blocks of the default shape's system prompt.
    pub const SYSTEM_BLOCKS: usize = 32;
    /// Conversations per worker in the default shape.
    pub const CONVERSATIONS_PER_WORKER: usize = 32;
    /// The default shape's longest conversation context, in blocks.
    pub const MAX_CONTEXT_BLOCKS: usize = 48;
    /// Shortest and longest request of the default shape, in blocks.
    pub const REQUEST_BLOCKS: (usize, usize) = (100, 200);
    /// Blocks of a default candidate.
    pub const CANDIDATE_BLOCKS: usize = 256;

    /// Draws the default shape's system prompt and every conversation context.
    pub fn new(rng: &mut LoadRng) -> Self {
        Self::with_shape(LoadShape::conversation(), rng)
    }

    /// Draws `shape`'s system prompt and every context.
    pub fn with_shape(shape: LoadShape, rng: &mut LoadRng) -> Self {
        let system = (0..shape.system_blocks).map(|_| rng.hash()).collect();
        let (shortest, longest) = shape.context_blocks;
        let contexts = (0..shape.contexts())
            .map(|_| {
                let len = shortest + rng.below(longest.saturating_sub(shortest) + 1);
                (0..len).map(|_| rng.hash()).collect()
            })
            .collect();
        Self { shape, system, contexts }
    }

    /// The shape it was drawn for.
    pub fn shape(&self) -> &LoadShape {
        &self.shape
    }

    fn workers(&self) -> usize {
        self.shape.workers.max(1)
    }

    fn holders(&self) -> usize {
        self.shape.holders.clamp(1, self.workers())
    }

    /// A fresh request for `worker`: (blocks, isl in tokens, overlap in blocks).
    pub fn request(&self, rng: &mut LoadRng, worker: usize) -> (Vec<SequenceHash>, usize, u32) {
        let workers = self.workers();
        // A context `worker` holds: first held by one of the `holders` workers before it.
        // (No draw when only the worker itself holds its contexts: the default shape's stream
        // stays what it always was.)
        let back = if self.holders() > 1 { rng.below(self.holders()) } else { 0 };
        let first = (worker % workers + workers - back) % workers;
        let index = first + workers * rng.below(self.shape.contexts_per_worker.max(1));
        let context = &self.contexts[index];
        let (shortest, longest) = self.shape.request_blocks;
        let len = shortest + rng.below(longest.saturating_sub(shortest) + 1);
        let mut blocks = Vec::with_capacity(len.max(self.system.len() + context.len()));
        blocks.extend_from_slice(&self.system);
        blocks.extend_from_slice(context);
        while blocks.len() < len {
            blocks.push(rng.hash());
        }
        let overlap = (self.system.len() + context.len()) as u32;
        (blocks, len.max(self.system.len() + context.len()) * self.shape.block_size, overlap)
    }

    /// A candidate of the shape's candidate length (longer if its prefix is).
    pub fn candidate(&self, rng: &mut LoadRng) -> LoadCandidate {
        let workers = self.workers();
        let context = rng.below(self.contexts.len());
        let mut blocks = self.system.clone();
        blocks.extend_from_slice(&self.contexts[context]);
        let home_overlap = blocks.len();
        while blocks.len() < self.shape.candidate_blocks {
            blocks.push(rng.hash());
        }
        let home = context % workers;
        LoadCandidate {
            isl: blocks.len() * self.shape.block_size,
            blocks,
            home,
            holders: (0..self.holders()).map(|j| (home + j) % workers).collect(),
            home_overlap,
            shared_overlap: self.system.len(),
            workers,
        }
    }
}
