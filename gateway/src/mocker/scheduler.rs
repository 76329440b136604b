//! The mock engine's scheduler: `kvroute::sim::Engine` (queue, batch limit, KV cache, serial
//! prefill) driven by the wall clock instead of a simulation's.
//!
//! Simulated time is wall time since start × `speedup`. A request is queued with its tokens;
//! whenever one arrives or one ends, every queued request that fits is admitted, its cache
//! events go to the publisher, and its handler learns when its first token is due. A handler
//! holds a [`Running`] for as long as its request runs; dropping it (the end, or the client
//! gone) frees the request's room and admits the next ones.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvroute::hash::{BlockHasher, RequestHashes};
use kvroute::sim::{Admitted, Engine, EngineModel, MockKvManager};
use kvroute::{KvEventData, SequenceHash, Worker};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::kv_events::{EventPublisher, VllmEvent};
use super::metrics::EngineMetrics;
use crate::vllm_hash;

/// When an admitted request's first token is due, and what the cache held of it.
#[derive(Clone, Copy, Debug)]
pub struct Started {
    /// The wall-clock instant prefill ends.
    pub first_token_at: Instant,
    /// Leading prompt blocks found in the cache.
    pub cached_blocks: usize,
}

/// A request waiting for admission.
struct Queued {
    hashes: RequestHashes,
    tokens: Arc<Vec<u32>>,
    started: oneshot::Sender<Started>,
}

/// A request admitted and not yet finished: what `Engine::finish` needs.
#[derive(Clone, Copy)]
struct Live {
    isl: usize,
    output: usize,
}

struct State {
    engine: Engine,
    queued: HashMap<usize, Queued>,
    live: HashMap<usize, Live>,
    next_id: usize,
}

/// One mock engine's scheduler, shared by its HTTP handlers.
pub struct Scheduler {
    state: Mutex<State>,
    hasher: BlockHasher,
    block_size: usize,
    speedup: f64,
    epoch: Instant,
    decode_step: Duration,
    publisher: Option<EventPublisher>,
    metrics: Arc<EngineMetrics>,
}

impl Scheduler {
    /// A scheduler over an engine of `model` with `block_size`-token blocks, publishing on
    /// `publisher` (none: no events).
    pub fn new(
        model: EngineModel,
        block_size: u32,
        speedup: f64,
        publisher: Option<EventPublisher>,
        metrics: Arc<EngineMetrics>,
    ) -> Result<Self, kvroute::hash::HashError> {
        let hasher = BlockHasher::new(block_size)?;
        let kv = MockKvManager::new(Worker::new(0, 0), model.capacity).publishing_given_hashes();
        let decode_step = model.decode_time_per_token.div_f64(speedup);
        Ok(Self {
            state: Mutex::new(State {
                engine: Engine::with_kv_manager(kv, model, block_size),
                queued: HashMap::new(),
                live: HashMap::new(),
                next_id: 0,
            }),
            hasher,
            block_size: block_size as usize,
            speedup,
            epoch: Instant::now(),
            decode_step,
            publisher,
            metrics,
        })
    }

    /// The wall time between two output tokens.
    pub fn decode_step(&self) -> Duration {
        self.decode_step
    }

    /// Queues a request of `tokens` generating `output` tokens. The receiver answers once it is
    /// admitted; the returned id must be handed to [`Scheduler::running`] then.
    pub fn submit(&self, tokens: Vec<u32>, output: usize) -> (usize, oneshot::Receiver<Started>) {
        let (started, receiver) = oneshot::channel();
        // vLLM names blocks by its own hashes; the index side of the mock (local hashes) is
        // kvroute's, as the router computes them from the published tokens.
        let local = self.hasher.local_hashes(&tokens);
        let sequence = vllm_hash::block_digests(&tokens, self.block_size)
            .iter()
            .map(|d| SequenceHash(vllm_hash::block_id(d)))
            .collect();
        let hashes = RequestHashes { local, sequence };
        let isl = tokens.len();
        let mut state = self.state.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.engine.enqueue(id, isl, output);
        state.queued.insert(id, Queued { hashes, tokens: Arc::new(tokens), started });
        state.live.insert(id, Live { isl, output });
        self.metrics.prompt_tokens.inc_by(isl as u64);
        self.admit(&mut state);
        (id, receiver)
    }

    /// The guard of admitted request `id`: its room is freed when it drops.
    pub fn running(self: &Arc<Self>, id: usize) -> Running {
        Running { scheduler: Arc::clone(self), id }
    }

    fn finish(&self, id: usize) {
        let mut state = self.state.lock();
        if state.queued.contains_key(&id) {
            // Still waiting: its handler is gone with its receiver, so admission finishes it.
            return;
        }
        if let Some(live) = state.live.remove(&id) {
            state.engine.finish(live.isl, live.output);
            self.admit(&mut state);
        }
    }

    /// Admits what fits now, publishes its events and tells its handlers when to start.
    fn admit(&self, state: &mut State) {
        let now = self.epoch.elapsed().as_secs_f64() * self.speedup;
        let (mut events, mut admitted) = (Vec::new(), Vec::new());
        let State { engine, queued, .. } = state;
        engine.admit(now, |id| &queued[&id].hashes, &mut events, &mut admitted);
        // Each admission published its evictions (one `Removed`), then its new blocks (one
        // `Stored`), each only when there were some.
        let mut events = events.into_iter();
        let mut wire = Vec::new();
        let mut abandoned = Vec::new();
        for Admitted { request, prefill_end, outcome, .. } in admitted {
            if outcome.evicted > 0
                && let Some(KvEventData::Removed { blocks }) = events.next().map(|e| e.event.data)
            {
                wire.push(VllmEvent::BlockRemoved {
                    block_hashes: blocks.iter().map(|h| h.0).collect(),
                });
            }
            let Some(queued) = state.queued.remove(&request) else { continue };
            if outcome.stored > 0 {
                events.next();
                wire.push(self.stored(&queued, outcome.cached, outcome.stored));
            }
            self.metrics.prefix_cache_queries.inc_by(queued.tokens.len() as u64);
            let hit = (outcome.cached * self.block_size).min(queued.tokens.len());
            self.metrics.prefix_cache_hits.inc_by(hit as u64);
            let first_token_at = self.epoch + Duration::from_secs_f64(prefill_end / self.speedup);
            let started = Started { first_token_at, cached_blocks: outcome.cached };
            if queued.started.send(started).is_err() {
                abandoned.push(request);
            }
        }
        if let Some(publisher) = &self.publisher {
            publisher.publish(wire);
        }
        for id in abandoned {
            // Its client left while it waited: it ends as soon as it starts.
            if let Some(live) = state.live.remove(&id) {
                state.engine.finish(live.isl, live.output);
            }
        }
        let engine = &state.engine;
        let usage = engine.pinned_blocks() as f64 / engine.kv().capacity().max(1) as f64;
        self.metrics.set_load(engine.running(), engine.waiting(), usage.min(1.0));
    }

    /// vLLM's `BlockStored` for `count` blocks of `request` from block `first` on.
    fn stored(&self, request: &Queued, first: usize, count: usize) -> VllmEvent {
        let (blocks, bs) = (first..first + count, self.block_size);
        let hashes = &request.hashes.sequence;
        VllmEvent::BlockStored {
            block_hashes: hashes[blocks.clone()].iter().map(|h| h.0).collect(),
            parent_block_hash: first.checked_sub(1).map(|i| hashes[i].0),
            token_ids: request.tokens[blocks.start * bs..blocks.end * bs].to_vec(),
            block_size: bs as u32,
        }
    }
}

/// An admitted request's hold on its engine; dropping it ends the request.
pub struct Running {
    scheduler: Arc<Scheduler>,
    id: usize,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.scheduler.finish(self.id);
    }
}
