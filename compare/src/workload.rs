//! The event stream and queries every subject is fed.
//!
//! PLACEHOLDER until `kvroute::sim::replay_fleet` lands: a small synthetic fleet of the same
//! shape (16 workers with LRU caches of 16,384 blocks, sticky sessions growing a shared
//! system prompt, tails evicted before their prefixes).

use std::collections::{BTreeMap, HashMap};

use kvroute::hash::next_sequence_hash;
use kvroute::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker};

/// Workers in the fleet.
pub const WORKERS: u64 = 16;
/// Blocks each worker's cache holds.
pub const CACHE_BLOCKS: usize = 16_384;

/// One replay: the events the fleet published and the requests' block hashes, in order.
pub struct Workload {
    /// The KV events, in publication order.
    pub events: Vec<RouterEvent>,
    /// Each request's local block hashes, in arrival order.
    pub queries: Vec<Vec<LocalBlockHash>>,
    /// One line saying what was replayed.
    pub description: String,
}

/// The stream for `dup` salted copies of the workload.
pub fn build(dup: usize) -> Workload {
    let mut fleet: Vec<Cache> = (0..WORKERS).map(|id| Cache::new(Worker::new(id, 0))).collect();
    let mut events = Vec::new();
    let mut queries = Vec::new();
    let sessions = 4_000u64;
    for salt in 0..dup as u64 {
        for request in 0..24_000u64 {
            let session = mix(request.wrapping_mul(7) ^ salt) % sessions;
            let turn = request / sessions;
            let len = 8 + 12 * (turn + 1) + mix(session) % 24;
            let local: Vec<LocalBlockHash> = (0..len)
                .map(|i| {
                    let content = if i < 8 { i } else { (session << 20) | i };
                    LocalBlockHash(mix(content ^ (salt << 56)))
                })
                .collect();
            let worker = (session % WORKERS) as usize;
            fleet[worker].serve(&local, &mut events);
            queries.push(local);
        }
    }
    let description = format!(
        "PLACEHOLDER synthetic fleet ×{dup}: {WORKERS} workers × {CACHE_BLOCKS} blocks, sticky sessions"
    );
    Workload { events, queries, description }
}

/// One mock worker's LRU cache.
struct Cache {
    worker: Worker,
    next_event: u64,
    clock: u64,
    /// Engine hash → last-use stamp.
    stamp: HashMap<SequenceHash, u64>,
    /// Last-use stamp → engine hash; the smallest is evicted first.
    by_stamp: BTreeMap<u64, SequenceHash>,
}

impl Cache {
    fn new(worker: Worker) -> Self {
        Self {
            worker,
            next_event: 0,
            clock: 1 << 40,
            stamp: HashMap::new(),
            by_stamp: BTreeMap::new(),
        }
    }

    /// Serves one request: stores its missing blocks, touches all of them (prefixes newer than
    /// their tails, so a prefix is never evicted before its tail) and evicts down to capacity.
    fn serve(&mut self, local: &[LocalBlockHash], events: &mut Vec<RouterEvent>) {
        self.clock += local.len() as u64 + 1;
        let mut parent = None;
        let mut stored_parent = None;
        let mut stored = Vec::new();
        for (position, &block) in local.iter().enumerate() {
            // The engine's own hash: a salted chain, distinct from ours.
            let hash = SequenceHash(next_sequence_hash(parent, block).0 ^ 0x5eed);
            let stamp = self.clock - position as u64;
            match self.stamp.insert(hash, stamp) {
                Some(old) => {
                    self.by_stamp.remove(&old);
                }
                None => {
                    if stored.is_empty() {
                        stored_parent = parent.map(|p: SequenceHash| SequenceHash(p.0 ^ 0x5eed));
                    }
                    stored.push(StoredBlock { local: block, hash });
                }
            }
            self.by_stamp.insert(stamp, hash);
            parent = Some(SequenceHash(hash.0 ^ 0x5eed));
        }
        if !stored.is_empty() {
            events.push(RouterEvent::stored(self.worker, self.event_id(), stored_parent, stored));
        }
        let mut evicted = Vec::new();
        while self.stamp.len() > CACHE_BLOCKS {
            let (_, hash) = self.by_stamp.pop_first().expect("cache is not empty");
            self.stamp.remove(&hash);
            evicted.push(hash);
        }
        if !evicted.is_empty() {
            events.push(RouterEvent::removed(self.worker, self.event_id(), evicted));
        }
    }

    fn event_id(&mut self) -> u64 {
        self.next_event += 1;
        self.next_event
    }
}

/// splitmix64: a cheap, well-mixed 64-bit hash.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49eb_1133_111b);
    x ^ (x >> 31)
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

/// Live (worker, block) entries after `events`: stored minus removed, per worker.
pub fn live_entries(events: &[RouterEvent]) -> usize {
    let mut held: HashMap<Worker, std::collections::HashSet<SequenceHash>> = HashMap::new();
    for event in events {
        let set = held.entry(event.worker()).or_default();
        match &event.event.data {
            kvroute::KvEventData::Stored { blocks, .. } => {
                set.extend(blocks.iter().map(|b| b.hash))
            }
            kvroute::KvEventData::Removed { blocks } => {
                for hash in blocks {
                    set.remove(hash);
                }
            }
            kvroute::KvEventData::Cleared => set.clear(),
        }
    }
    held.values().map(|set| set.len()).sum()
}
