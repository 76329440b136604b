//! [`IndexLane`]: applies the events of the workers assigned to one lane.
//!
//! The lane owns those workers' [`WorkerBlocks`] outright (no lock) and writes membership bits
//! into the shared table. Each event is all-or-nothing for `Stored` (the whole chain is validated
//! before anything changes) and best-effort for `Removed` (unknown blocks are skipped and
//! reported), exactly like the reference index. Membership changes of one event go to the table
//! as one batch.

use std::collections::HashMap;

use crossbeam_utils::CachePadded;

use crate::event::{ApplyError, ApplyErrorKind, KvEventData, RouterEvent, SequenceHash};
use crate::event::{StoredBlock, Worker, WorkerId};
use crate::index::shared::SharedIndex;
use crate::index::table::BitOp;
use crate::index::worker_blocks::{Placement, WorkerBlocks};
use crate::pool::Lane;
use crate::sync::{Arc, AtomicU64, Ordering, defer_until_unpinned, epoch};

/// Counters one lane publishes (only that lane writes them).
#[derive(Default)]
pub(crate) struct LaneCounters {
    pub(crate) events: AtomicU64,
    pub(crate) block_ops: AtomicU64,
    pub(crate) errors: [AtomicU64; ApplyErrorKind::ALL.len()],
    pub(crate) entries: AtomicU64,
    pub(crate) bytes: AtomicU64,
}

impl LaneCounters {
    fn bump(counter: &AtomicU64, by: u64) {
        // Single writer: a load and a store, no read-modify-write needed.
        counter.store(counter.load(Ordering::Relaxed) + by, Ordering::Relaxed);
    }
}

/// One lane's state; see the [module docs](self).
pub(crate) struct IndexLane {
    shared: Arc<SharedIndex>,
    workers: HashMap<Worker, WorkerBlocks, ahash::RandomState>,
    counters: Arc<CachePadded<LaneCounters>>,
    /// Reused buffers: blocks a `Stored` adds, nodes a `Removed` drops, and table changes.
    pending: Vec<(SequenceHash, Placement, SequenceHash)>,
    revived: Vec<bool>,
    removed: Vec<SequenceHash>,
    ops: Vec<BitOp>,
}

impl Lane for IndexLane {
    type Message = RouterEvent;

    fn handle(&mut self, event: RouterEvent) {
        let ops = event.block_ops() as u64;
        if let Err(error) = self.apply(&event) {
            LaneCounters::bump(&self.counters.errors[error.kind().index()], 1);
        }
        LaneCounters::bump(&self.counters.events, 1);
        LaneCounters::bump(&self.counters.block_ops, ops);
    }

    fn idle(&mut self) {
        self.publish_sizes();
    }
}

impl IndexLane {
    pub(crate) fn new(shared: Arc<SharedIndex>, counters: Arc<CachePadded<LaneCounters>>) -> Self {
        Self {
            shared,
            workers: HashMap::default(),
            counters,
            pending: Vec::new(),
            revived: Vec::new(),
            removed: Vec::new(),
            ops: Vec::new(),
        }
    }

    pub(crate) fn apply(&mut self, event: &RouterEvent) -> Result<(), ApplyError> {
        let worker = event.worker();
        match &event.event.data {
            KvEventData::Stored { parent, blocks } => self.store(worker, *parent, blocks),
            KvEventData::Removed { blocks } => self.remove(worker, blocks),
            KvEventData::Cleared => match self.workers.get_mut(&worker) {
                Some(held) => {
                    let nodes = held.drain_nodes();
                    self.shared.change_holders(held.slot, nodes.into_iter(), false, &mut self.ops);
                    Ok(())
                }
                None => Err(ApplyError::UnknownWorker { worker }),
            },
        }
    }

    fn store(
        &mut self,
        worker: Worker,
        parent: Option<SequenceHash>,
        blocks: &[StoredBlock],
    ) -> Result<(), ApplyError> {
        let mut at = match (parent, self.workers.get(&worker)) {
            (None, _) => None,
            (Some(parent), Some(held)) => match held.get(parent) {
                Some(placement) => Some(placement.node()),
                None => return Err(ApplyError::UnknownParent { worker, parent }),
            },
            (Some(parent), None) => return Err(ApplyError::UnknownParent { worker, parent }),
        };
        let created = !self.workers.contains_key(&worker);
        let held = match self.workers.entry(worker) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                let Some(slot) = self.shared.slots.allocate(worker) else {
                    let capacity = self.shared.slots.capacity();
                    return Err(ApplyError::TooManyWorkers { worker, capacity });
                };
                entry.insert(WorkerBlocks::new(slot))
            }
        };
        // Validate the whole chain before changing anything; the checks are independent reads,
        // so their cache misses overlap.
        self.pending.clear();
        let guard = epoch::pin();
        let mut rejected = None;
        for block in blocks {
            let placement = Placement::new(at, block.local);
            let node = placement.node();
            at = Some(node);
            let ok = match held.get(block.hash) {
                Some(existing) => existing == placement, // storing twice is a no-op
                // Not this block under a second name.
                None if self.shared.holds(node, held.slot, &guard) => false,
                None => {
                    self.pending.push((block.hash, placement, node));
                    true
                }
            };
            if !ok {
                rejected = Some(block.hash);
                break;
            }
        }
        drop(guard);
        // The same new engine hash twice in one event shows up as a failed insert: undo.
        if rejected.is_none() {
            self.revived.clear();
            for &(hash, placement, node) in &self.pending {
                match held.insert(hash, placement, node) {
                    Some(revived) => self.revived.push(revived),
                    None => {
                        for (&(hash, _, _), &revived) in
                            self.pending.iter().zip(&self.revived).rev()
                        {
                            held.undo_insert(hash, revived);
                        }
                        rejected = Some(hash);
                        break;
                    }
                }
            }
        }
        if let Some(block) = rejected {
            if created {
                // A rejected first event registers nobody (its slot was never published).
                let slot = held.slot;
                self.workers.remove(&worker);
                self.shared.slots.release(slot);
            }
            return Err(ApplyError::HashConflict { worker, block });
        }
        let nodes = self.pending.iter().map(|&(_, _, node)| node);
        self.shared.change_holders(held.slot, nodes, true, &mut self.ops);
        Ok(())
    }

    fn remove(&mut self, worker: Worker, blocks: &[SequenceHash]) -> Result<(), ApplyError> {
        let Some(held) = self.workers.get_mut(&worker) else {
            return Err(ApplyError::UnknownWorker { worker });
        };
        let mut unknown = 0;
        let mut first = None;
        self.removed.clear();
        for &hash in blocks {
            match held.remove(hash) {
                Some(node) => self.removed.push(node),
                None => {
                    unknown += 1;
                    first.get_or_insert(hash);
                }
            }
        }
        let slot = held.slot;
        self.shared.change_holders(slot, self.removed.iter().copied(), false, &mut self.ops);
        match first {
            None => Ok(()),
            Some(first) => Err(ApplyError::UnknownBlocks { worker, first, count: unknown }),
        }
    }

    /// Forgets the workers `matches` selects; returns them.
    pub(crate) fn remove_workers(&mut self, matches: impl Fn(Worker) -> bool) -> Vec<Worker> {
        let doomed: Vec<Worker> = self.workers.keys().copied().filter(|&w| matches(w)).collect();
        for worker in &doomed {
            let mut held = self.workers.remove(worker).expect("listed above");
            let nodes = held.drain_nodes();
            self.shared.change_holders(held.slot, nodes.into_iter(), false, &mut self.ops);
            let shared = self.shared.clone();
            let slot = held.slot;
            defer_until_unpinned(move || shared.slots.release(slot));
        }
        self.publish_sizes();
        doomed
    }

    /// Forgets every rank of `id`.
    pub(crate) fn remove_worker_id(&mut self, id: WorkerId) -> Vec<Worker> {
        self.remove_workers(|worker| worker.id == id)
    }

    pub(crate) fn workers(&self) -> impl Iterator<Item = (Worker, &WorkerBlocks)> {
        self.workers.iter().map(|(&worker, held)| (worker, held))
    }

    fn publish_sizes(&self) {
        let entries: usize = self.workers.values().map(WorkerBlocks::len).sum();
        let bytes: usize = self.workers.values().map(WorkerBlocks::bytes).sum();
        self.counters.entries.store(entries as u64, Ordering::Relaxed);
        self.counters.bytes.store(bytes as u64, Ordering::Relaxed);
    }
}
