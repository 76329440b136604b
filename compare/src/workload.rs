//! The event stream and queries every subject is fed: a workload shape's trace
//! (`kvroute::sim::shapes`: the bundled Mooncake conversation trace, or a synthetic one) replayed
//! through `kvroute::sim`'s mock fleet of that shape (for the conversation trace: 16 workers with
//! LRU caches of 16,384 blocks, each trace `hash_id` expanded into 8 KV blocks of 64 tokens,
//! bounded-share longest-prefix routing, tails evicted before their prefixes).

use std::collections::HashMap;
use std::time::Instant;

use kvroute::hash::next_sequence_hash;
use kvroute::sim::shapes::Shape;
use kvroute::sim::{FleetConfig, replay_fleet};
use kvroute::{KvEventData, LocalBlockHash, RouterEvent, SequenceHash, Worker};

/// One replay: the events the fleet published and the requests' block hashes, in order.
pub struct Workload {
    /// The KV events, in publication order.
    pub events: Vec<RouterEvent>,
    /// Each request's local block hashes, in arrival order.
    pub queries: Vec<Vec<LocalBlockHash>>,
    /// One line saying what was replayed.
    pub description: String,
}

/// The fleet the conversation trace is replayed through: [`FleetConfig`]'s defaults (16 workers
/// × 16,384 blocks, 8 sub-blocks), the trace replayed `dup` times with distinct salts.
pub fn config(dup: u32) -> FleetConfig {
    FleetConfig { workers: 16, cache_blocks: 16_384, sub_blocks: 8, dup, ..FleetConfig::default() }
}

/// How the engines name their blocks in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineHashes {
    /// One name per prefix, the same on every worker (engines with a fixed hash seed, e.g.
    /// vLLM with `PYTHONHASHSEED` set, as Dynamo's KV routing setup asks for).
    Shared,
    /// The fleet's own per-worker salted names: the same prefix has a different engine hash on
    /// each worker.
    PerWorker,
}

impl EngineHashes {
    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Shared => "shared",
            Self::PerWorker => "per-worker",
        }
    }

    /// Parses [`Self::name`].
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Shared, Self::PerWorker].into_iter().find(|h| h.name() == name)
    }
}

/// The replay of `shape`'s trace with `dup` salted copies through its fleet, engine hashes as
/// `hashes` says.
pub fn build(shape: Shape, dup: u32, hashes: EngineHashes) -> Result<Workload, String> {
    let (trace, config) = shape.build().map_err(|e| format!("building {shape}: {e}"))?;
    let config = FleetConfig { dup, ..config };
    let start = Instant::now();
    let replay = replay_fleet(&trace, &config);
    let stats = &replay.stats;
    let events = match hashes {
        EngineHashes::PerWorker => replay.events,
        EngineHashes::Shared => shared_engine_hashes(&replay.events),
    };
    let description = format!(
        "{shape} ×{dup}: {} requests of {:.1} blocks on average, {} workers × {} blocks of {} tokens, \
         {} engine hashes; fleet hit {:.1}% of requested blocks (unlimited-cache oracle {:.1}%), \
         {} blocks evicted; replayed in {:.1} s",
        stats.requests,
        stats.requested_blocks as f64 / stats.requests.max(1) as f64,
        config.workers,
        config.cache_blocks,
        config.block_size(),
        hashes.name(),
        100.0 * stats.hit_rate(),
        100.0 * stats.oracle_hit_rate(),
        stats.removed_blocks,
        start.elapsed().as_secs_f64(),
    );
    Ok(Workload { events, queries: replay.queries, description })
}

/// `events` again under other worker ids (`id + offset`): the same blocks, so the same tree
/// paths, stored and evicted by a second fleet. Used as the stream ingested while querying.
pub fn shifted(events: &[RouterEvent], offset: u64) -> Vec<RouterEvent> {
    events
        .iter()
        .map(|event| {
            let mut event = event.clone();
            event.worker_id.0 += offset;
            event
        })
        .collect()
}

/// `events` with every engine hash replaced by a name that depends only on the block's prefix
/// (a fixed bijection of our sequence hash), so the same prefix has the same engine hash on
/// every worker. Exact: each worker's engine hash → prefix map is replayed alongside.
pub fn shared_engine_hashes(events: &[RouterEvent]) -> Vec<RouterEvent> {
    let name = |seq: SequenceHash| SequenceHash(seq.0.rotate_left(17) ^ 0x5ea1_ed5e_ed00_0000);
    let mut prefixes: HashMap<Worker, HashMap<SequenceHash, SequenceHash>> = HashMap::new();
    events
        .iter()
        .map(|event| {
            let held = prefixes.entry(event.worker()).or_default();
            let mut event = event.clone();
            match &mut event.event.data {
                KvEventData::Stored { parent, blocks } => {
                    let mut seq = parent.and_then(|p| held.get(&p).copied());
                    *parent = seq.map(name);
                    for block in blocks {
                        let next = next_sequence_hash(seq, block.local);
                        held.insert(block.hash, next);
                        block.hash = name(next);
                        seq = Some(next);
                    }
                }
                KvEventData::Removed { blocks } => {
                    for hash in blocks {
                        if let Some(seq) = held.remove(hash) {
                            *hash = name(seq);
                        }
                    }
                }
                KvEventData::Cleared => held.clear(),
            }
            event
        })
        .collect()
}
