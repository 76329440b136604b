//! Recovery against an adversary, shared by the proptest (`tests/recovery_props.rs`) and the
//! fuzz target (`recovery`): the events of several workers are dropped, duplicated and
//! reordered within a window, `Cleared` is injected, workers restart and recovery calls fail;
//! once the streams go quiet (each worker publishes one last event, delivered) and the pending
//! fetches have run, the index must equal the truth: every worker's own record.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kvroute::index::{IndexSnapshot, ReferenceIndex};
use kvroute::recovery::{
    Dump, EventRecovery, LocalIndexer, Recovered, RecoveryConfig, RecoveryError, RecoverySource,
};
use kvroute::{KvEventData, RouterEvent, SequenceHash, StorageTier, StoredBlock, Worker};

/// Workers in the fleet.
pub const WORKERS: u64 = 3;

/// One step of the adversary.
#[derive(Clone, Debug)]
pub enum Op {
    /// Worker `w` stores a chain of `len` blocks under one of its blocks (or a root).
    Store { w: u64, parent: usize, len: usize, salt: u64 },
    /// Worker `w` evicts one of its blocks.
    Remove { w: u64, pick: usize },
    /// Worker `w` drops its cache.
    Clear { w: u64 },
    /// Worker `w` restarts: a fresh engine, numbering from 1, cache empty.
    Restart { w: u64 },
    /// The network delivers one pending event, drops it, or delivers it twice.
    Deliver { pick: usize, fate: u8 },
    /// The recovery thread runs the due fetches.
    Recover,
}

/// Ops, window and failure rate from fuzz bytes.
pub fn decode(data: &[u8]) -> (Vec<Op>, usize, u64) {
    let (head, body) = data.split_at(data.len().min(2));
    let window = head.first().map_or(0, |b| (*b % 6) as usize);
    let fail_every = head.get(1).map_or(2, |b| 2 + u64::from(*b % 5));
    let ops = body
        .chunks(4)
        .map(|c| {
            let b = |i: usize| c.get(i).copied().unwrap_or(0);
            let w = u64::from(b(1)) % WORKERS;
            match b(0) % 20 {
                0..=5 => Op::Store {
                    w,
                    parent: b(2) as usize,
                    len: 1 + (b(3) % 3) as usize,
                    salt: u64::from(b(2)) << 8 | u64::from(b(3)),
                },
                6 | 7 => Op::Remove { w, pick: b(2) as usize },
                8 => Op::Clear { w },
                9 => Op::Restart { w },
                10..=17 => Op::Deliver { pick: b(2) as usize, fate: b(3) },
                _ => Op::Recover,
            }
        })
        .collect();
    (ops, window, fail_every)
}

/// The engines: each worker's current record, and which of its blocks it holds (for choosing
/// parents and evictions).
struct Fleet {
    engines: HashMap<u64, LocalIndexer>,
    held: HashMap<u64, Vec<SequenceHash>>,
    next_hash: u64,
    /// Every `fail_every`-th recovery call fails.
    fail_every: u64,
    calls: Cell<u64>,
}

impl Fleet {
    fn new(fail_every: u64) -> Self {
        let engines = (0..WORKERS).map(|w| (w, engine(w))).collect();
        let held = (0..WORKERS).map(|w| (w, Vec::new())).collect();
        Self { engines, held, next_hash: 1, fail_every, calls: Cell::new(0) }
    }

    fn fail_now(&self) -> bool {
        let calls = self.calls.get() + 1;
        self.calls.set(calls);
        calls.is_multiple_of(self.fail_every)
    }

    fn truth(&self) -> IndexSnapshot {
        let mut truth = ReferenceIndex::new();
        for engine in self.engines.values() {
            for event in engine.dump().events {
                truth.apply(&event).expect("a dump applies cleanly");
            }
        }
        non_empty(truth.snapshot())
    }
}

fn engine(w: u64) -> LocalIndexer {
    LocalIndexer::new(Worker::new(w, 0), StorageTier::Device, 16).expect("capacity")
}

fn non_empty(mut snapshot: IndexSnapshot) -> IndexSnapshot {
    snapshot.retain(|_, blocks| !blocks.is_empty());
    snapshot
}

/// A source that fails now and then; `Mutex` so the test can keep mutating the fleet.
struct FlakySource<'a>(&'a Mutex<Fleet>);

impl RecoverySource for FlakySource<'_> {
    fn events_since(
        &self,
        worker: Worker,
        tier: StorageTier,
        from_id: u64,
    ) -> Result<Recovered, RecoveryError> {
        let fleet = self.0.lock().expect("fleet lock");
        if fleet.fail_now() {
            return Err(RecoveryError::Unavailable("injected".into()));
        }
        fleet.engines[&worker.id.0].events_since(worker, tier, from_id)
    }

    fn full_dump(&self, worker: Worker, tier: StorageTier) -> Result<Dump, RecoveryError> {
        let fleet = self.0.lock().expect("fleet lock");
        if fleet.fail_now() {
            return Err(RecoveryError::Unavailable("injected".into()));
        }
        fleet.engines[&worker.id.0].full_dump(worker, tier)
    }
}

/// Plays `ops`; the error says how the index and the truth differ.
pub fn run(ops: &[Op], window: usize, fail_every: u64) -> Result<(), String> {
    let fleet = Mutex::new(Fleet::new(fail_every));
    let index = Mutex::new(ReferenceIndex::new());
    // No backoff: failed fetches are retried at once (the unit tests cover the waits).
    let config = RecoveryConfig {
        backoff: Duration::ZERO,
        max_backoff: Duration::ZERO,
        ..RecoveryConfig::default()
    };
    let recovery = EventRecovery::new(&index, config).expect("config");
    let source = FlakySource(&fleet);
    let mut in_flight: Vec<RouterEvent> = Vec::new();

    let publish = |fleet: &mut Fleet, w: u64, data: KvEventData, in_flight: &mut Vec<_>| {
        let event = fleet.engines[&w].publish(data);
        in_flight.push(event);
    };
    for op in ops {
        match *op {
            Op::Store { w, parent, len, salt } => {
                let mut f = fleet.lock().expect("fleet lock");
                let held = &f.held[&w];
                let parent =
                    (!held.is_empty() && parent % 3 != 0).then(|| held[parent % held.len()]);
                let first = f.next_hash;
                f.next_hash += len as u64;
                let blocks: Vec<StoredBlock> = (0..len as u64)
                    .map(|i| StoredBlock::new(salt.wrapping_add(i), first + i))
                    .collect();
                f.held.get_mut(&w).expect("worker").extend(blocks.iter().map(|b| b.hash));
                publish(&mut f, w, KvEventData::Stored { parent, blocks }, &mut in_flight);
            }
            Op::Remove { w, pick } => {
                let mut f = fleet.lock().expect("fleet lock");
                let held = f.held.get_mut(&w).expect("worker");
                if held.is_empty() {
                    continue;
                }
                let block = held.swap_remove(pick % held.len());
                publish(&mut f, w, KvEventData::Removed { blocks: vec![block] }, &mut in_flight);
            }
            Op::Clear { w } => {
                let mut f = fleet.lock().expect("fleet lock");
                f.held.get_mut(&w).expect("worker").clear();
                publish(&mut f, w, KvEventData::Cleared, &mut in_flight);
            }
            Op::Restart { w } => {
                let mut f = fleet.lock().expect("fleet lock");
                f.engines.insert(w, engine(w));
                f.held.get_mut(&w).expect("worker").clear();
                // What a discovery layer says when a worker comes back under a new instance id;
                // the transport drops what it still held from the old instance (ids alone cannot
                // tell the two runs apart).
                recovery.invalidate(Worker::new(w, 0), StorageTier::Device);
                in_flight.retain(|e| e.worker_id.0 != w);
            }
            Op::Deliver { pick, fate } => {
                if in_flight.len() <= window && !in_flight.is_empty() && fate % 4 != 0 {
                    continue; // the window is not full yet: let events pile up (reordering)
                }
                if in_flight.is_empty() {
                    continue;
                }
                let event = in_flight.swap_remove(pick % in_flight.len());
                match fate % 8 {
                    0 => {} // lost
                    1 => {
                        recovery.ingest(event.clone()).expect("index up");
                        recovery.ingest(event).expect("index up");
                    }
                    _ => recovery.ingest(event).expect("index up"),
                }
            }
            Op::Recover => {
                recovery.run_pending(&source).expect("index up");
            }
        }
    }
    // Quiescence: the rest arrives in order, each worker publishes one more event (so a lost
    // tail shows up as a gap), and recovery runs until nothing is pending.
    in_flight.sort_by_key(|e| e.event.event_id);
    for event in in_flight.drain(..) {
        recovery.ingest(event).expect("index up");
    }
    for w in 0..WORKERS {
        let mut f = fleet.lock().expect("fleet lock");
        let root = f.next_hash;
        f.next_hash += 1;
        let data = KvEventData::Stored { parent: None, blocks: vec![StoredBlock::new(root, root)] };
        let event = f.engines[&w].publish(data);
        f.held.get_mut(&w).expect("worker").push(SequenceHash(root));
        drop(f);
        recovery.ingest(event).expect("index up");
    }
    for _ in 0..10_000 {
        if recovery.stats().settled() {
            break;
        }
        recovery.run_pending(&source).expect("index up");
    }
    if !recovery.stats().settled() {
        return Err(format!("recovery did not settle: {:?}", recovery.stats()));
    }
    let ours = non_empty(index.lock().expect("index lock").snapshot());
    let truth = fleet.lock().expect("fleet lock").truth();
    if ours != truth {
        return Err(format!("the index diverged:\n ours  {ours:?}\n truth {truth:?}"));
    }
    Ok(())
}
