//! [`EngineModel`]: how long a mock worker takes, and [`Engine`]: one worker's queue and cache.
//!
//! The model is deliberately small — enough for routing to matter, not a GPU simulator:
//!
//! - **prefill** runs one request at a time per worker at `prefill_tokens_per_s`, over the
//!   prompt tokens the worker's cache does not hold (plus a fixed `prefill_overhead`);
//! - **decode** takes `decode_time_per_token` per output token, for every running request at
//!   once (continuous batching, the batch size does not slow a step);
//! - at most `max_batch` requests run at once, and their prompt and output blocks must fit in
//!   the KV cache's `capacity`: others wait in a FIFO queue (a request larger than the whole
//!   cache runs alone rather than never). Nothing is preempted and nothing panics.
//!
//! A request's time to first token is its queueing plus its prefill; its end-to-end latency
//! adds the decode.

use std::collections::VecDeque;
use std::time::Duration;

use crate::event::{RouterEvent, Worker};
use crate::hash::RequestHashes;
use crate::sim::kv_manager::{MockKvManager, StoreOutcome};

/// One worker's speed and limits. [`Default`] is a mid-size model on one modern GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineModel {
    /// Prompt tokens computed per second. Default 40,000 (an 8B model on one H100-class GPU).
    pub prefill_tokens_per_s: f64,
    /// Fixed cost of every prefill (scheduling, the first decode step). Default 10 ms.
    pub prefill_overhead: Duration,
    /// Time per output token of a running request. Default 20 ms.
    pub decode_time_per_token: Duration,
    /// Requests running at once. Default 64.
    pub max_batch: usize,
    /// KV blocks the worker holds (its cache, and the bound on running requests' blocks).
    /// Default 16,384.
    pub capacity: usize,
}

impl Default for EngineModel {
    fn default() -> Self {
        Self {
            prefill_tokens_per_s: 40_000.0,
            prefill_overhead: Duration::from_millis(10),
            decode_time_per_token: Duration::from_millis(20),
            max_batch: 64,
            capacity: 16_384,
        }
    }
}

impl EngineModel {
    /// Seconds to prefill `tokens` uncached prompt tokens.
    pub fn prefill_seconds(&self, tokens: usize) -> f64 {
        self.prefill_overhead.as_secs_f64() + tokens as f64 / self.prefill_tokens_per_s
    }

    /// Seconds to decode `tokens` output tokens.
    pub fn decode_seconds(&self, tokens: usize) -> f64 {
        self.decode_time_per_token.as_secs_f64() * tokens as f64
    }
}

/// A request an [`Engine`] has admitted: when its prefill ends and what its cache did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admitted {
    /// The request's index in the simulation.
    pub request: usize,
    /// When its prefill starts and ends (simulated seconds).
    pub prefill_start: f64,
    /// When its prefill ends (the first token).
    pub prefill_end: f64,
    /// What its worker's KV cache did when the request was admitted (`cached` is the hit).
    pub outcome: StoreOutcome,
}

/// A waiting request: its index, its hashes' index and sizes.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    request: usize,
    /// Blocks it pins while running: prompt plus output.
    blocks: usize,
    isl: usize,
}

/// One mock worker: its KV cache, its queue and what runs on it.
#[derive(Debug)]
pub struct Engine {
    kv: MockKvManager,
    model: EngineModel,
    block_size: u32,
    queue: VecDeque<Waiting>,
    running: usize,
    pinned: usize,
    /// When the prefill stage is next free.
    prefill_free_at: f64,
}

impl Engine {
    /// An idle worker with an empty cache of `model.capacity` blocks of `block_size` tokens.
    pub fn new(worker: Worker, model: EngineModel, block_size: u32) -> Self {
        let kv = MockKvManager::new(worker, model.capacity);
        Self::with_kv_manager(kv, model, block_size)
    }

    /// An idle worker around the cache `kv` (for one that publishes given hashes, say); its
    /// capacity bounds the running requests' blocks, in place of `model.capacity`.
    pub fn with_kv_manager(kv: MockKvManager, mut model: EngineModel, block_size: u32) -> Self {
        model.capacity = kv.capacity();
        Self {
            kv,
            model,
            block_size,
            queue: VecDeque::new(),
            running: 0,
            pinned: 0,
            prefill_free_at: 0.0,
        }
    }

    /// Its KV cache.
    pub fn kv(&self) -> &MockKvManager {
        &self.kv
    }

    /// Requests waiting to start.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Requests running (prefilling or decoding).
    pub fn running(&self) -> usize {
        self.running
    }

    /// Blocks pinned by the running requests.
    pub fn pinned_blocks(&self) -> usize {
        self.pinned
    }

    /// Queues request `request` (`isl` prompt tokens, `output` tokens to generate).
    pub fn enqueue(&mut self, request: usize, isl: usize, output: usize) {
        let block_size = self.block_size as usize;
        let blocks = isl.div_ceil(block_size) + output.div_ceil(block_size);
        self.queue.push_back(Waiting { request, blocks, isl });
    }

    /// Starts every queued request that fits at `now`, in order, with `hashes(request)` its
    /// blocks; their cache events go to `events`. Returns what started.
    pub fn admit<'h>(
        &mut self,
        now: f64,
        hashes: impl Fn(usize) -> &'h RequestHashes,
        events: &mut Vec<RouterEvent>,
        admitted: &mut Vec<Admitted>,
    ) {
        while let Some(&next) = self.queue.front() {
            let alone = self.running == 0;
            let fits = self.pinned + next.blocks <= self.model.capacity;
            if self.running >= self.model.max_batch || !(fits || alone) {
                break;
            }
            self.queue.pop_front();
            let outcome = self.kv.store(hashes(next.request), events);
            let cached_tokens = (outcome.cached * self.block_size as usize).min(next.isl);
            let prefill_start = now.max(self.prefill_free_at);
            let prefill_end = prefill_start + self.model.prefill_seconds(next.isl - cached_tokens);
            self.prefill_free_at = prefill_end;
            self.running += 1;
            self.pinned += next.blocks;
            admitted.push(Admitted { request: next.request, prefill_start, prefill_end, outcome });
        }
    }

    /// A running request of `isl` prompt and `output` tokens finished.
    pub fn finish(&mut self, isl: usize, output: usize) {
        let block_size = self.block_size as usize;
        self.running = self.running.saturating_sub(1);
        self.pinned =
            self.pinned.saturating_sub(isl.div_ceil(block_size) + output.div_ceil(block_size));
    }

    /// The model.
    pub fn model(&self) -> &EngineModel {
        &self.model
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::BlockHasher;

    fn hashes(tokens: u32, offset: u32) -> RequestHashes {
        let tokens: Vec<u32> = (offset..offset + tokens).collect();
        BlockHasher::new(4).unwrap().hash_request(&tokens)
    }

    #[test]
    fn prefill_is_serial_and_cached_blocks_are_not_recomputed() {
        let model = EngineModel {
            prefill_tokens_per_s: 100.0,
            prefill_overhead: Duration::ZERO,
            ..EngineModel::default()
        };
        let mut engine = Engine::new(Worker::new(0, 0), model, 4);
        let requests = [hashes(40, 0), hashes(40, 0)];
        engine.enqueue(0, 40, 0);
        engine.enqueue(1, 40, 0);
        let (mut events, mut admitted) = (Vec::new(), Vec::new());
        engine.admit(1.0, |i| &requests[i], &mut events, &mut admitted);
        // The first computes 40 tokens (0.4 s); the second finds all 10 blocks cached and
        // waits only for the prefill stage.
        assert_eq!(admitted.len(), 2);
        assert_eq!((admitted[0].prefill_start, admitted[0].prefill_end), (1.0, 1.4));
        assert_eq!(admitted[1].outcome.cached, 10);
        assert_eq!((admitted[1].prefill_start, admitted[1].prefill_end), (1.4, 1.4));
        assert!(!events.is_empty());
    }

    #[test]
    fn an_engine_around_a_given_cache_takes_its_capacity_and_its_names() {
        let kv = MockKvManager::new(Worker::new(4, 0), 3).publishing_given_hashes();
        let mut engine = Engine::with_kv_manager(kv, EngineModel::default(), 4);
        assert_eq!(engine.model().capacity, 3);
        let requests = [hashes(8, 0)];
        engine.enqueue(0, 8, 0);
        let (mut events, mut admitted) = (Vec::new(), Vec::new());
        engine.admit(0.0, |i| &requests[i], &mut events, &mut admitted);
        assert!(engine.kv().contains(requests[0].sequence[1]));
        assert_eq!(engine.kv().engine_hash(requests[0].sequence[1]), requests[0].sequence[1]);
    }

    #[test]
    fn requests_wait_for_batch_room_and_kv_room_and_a_huge_one_runs_alone() {
        let model = EngineModel { max_batch: 1, capacity: 8, ..EngineModel::default() };
        let mut engine = Engine::new(Worker::new(0, 0), model, 4);
        let requests = [hashes(16, 0), hashes(16, 100), hashes(400, 1000)];
        let (mut events, mut admitted) = (Vec::new(), Vec::new());
        engine.enqueue(0, 16, 0);
        engine.enqueue(1, 16, 0);
        engine.admit(0.0, |i| &requests[i], &mut events, &mut admitted);
        assert_eq!((admitted.len(), engine.waiting(), engine.running()), (1, 1, 1));
        engine.finish(16, 0);
        engine.enqueue(2, 400, 8);
        engine.admit(1.0, |i| &requests[i], &mut events, &mut admitted);
        assert_eq!((admitted.len(), engine.waiting()), (2, 1));
        engine.finish(16, 0);
        // 100 + 2 blocks never fit in 8: it runs once the worker is idle, without a panic.
        engine.admit(2.0, |i| &requests[i], &mut events, &mut admitted);
        assert_eq!((admitted.len(), engine.waiting(), engine.pinned_blocks()), (3, 0, 102));
    }
}
