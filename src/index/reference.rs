//! The reference radix tree: single-threaded, short and obviously correct.
//!
//! It is the oracle the concurrent index is checked against, so it favours plain structure over
//! speed: one node per block, children by content hash, a set of holders per node, and per worker
//! a map from the engine's hash to the node.

use std::collections::{BTreeMap, BTreeSet};

/// The reference's hash maps: std's, with a faster (still seeded) hasher than SipHash, so
/// checks that ask it many questions (the fuzz targets) run more inputs a second.
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
type HashSet<K> = std::collections::HashSet<K, ahash::RandomState>;

use crate::event::{ApplyError, KvEventData, RouterEvent, SequenceHash, StoredBlock, Worker};
use crate::event::{LocalBlockHash, WorkerId};
use crate::hash::next_sequence_hash;
use crate::index::{IndexSnapshot, OverlapScores};

type NodeId = usize;
const ROOT: NodeId = 0;

#[derive(Debug)]
struct Node {
    local: LocalBlockHash,
    /// Our sequence hash of the path to this node (the root's is unused).
    seq: SequenceHash,
    parent: NodeId,
    children: HashMap<LocalBlockHash, NodeId>,
    holders: BTreeSet<Worker>,
}

/// The single-threaded reference prefix index: one node per block, children by content hash,
/// holders per node, and per worker a map from the engine's hash to the node.
#[derive(Debug)]
pub struct ReferenceIndex {
    nodes: HashMap<NodeId, Node>,
    next_id: NodeId,
    /// Per known worker: engine hash → node.
    workers: BTreeMap<Worker, HashMap<SequenceHash, NodeId>>,
}

impl Default for ReferenceIndex {
    fn default() -> Self {
        let root = Node {
            local: LocalBlockHash(0),
            seq: SequenceHash(0),
            parent: ROOT,
            children: HashMap::default(),
            holders: BTreeSet::new(),
        };
        Self {
            nodes: HashMap::from_iter([(ROOT, root)]),
            next_id: ROOT + 1,
            workers: BTreeMap::new(),
        }
    }
}

impl ReferenceIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one event. On error the index is unchanged, except that a `Removed` still removes
    /// the blocks of the event that the worker does hold.
    pub fn apply(&mut self, event: &RouterEvent) -> Result<(), ApplyError> {
        let worker = event.worker();
        match &event.event.data {
            KvEventData::Stored { parent, blocks } => self.store(worker, *parent, blocks),
            KvEventData::Removed { blocks } => self.remove(worker, blocks),
            KvEventData::Cleared => {
                if !self.workers.contains_key(&worker) {
                    return Err(ApplyError::UnknownWorker { worker });
                }
                self.clear(worker);
                Ok(())
            }
        }
    }

    fn store(
        &mut self,
        worker: Worker,
        parent: Option<SequenceHash>,
        blocks: &[StoredBlock],
    ) -> Result<(), ApplyError> {
        let empty = HashMap::default();
        let held = self.workers.get(&worker).unwrap_or(&empty);
        let start = match parent {
            None => ROOT,
            Some(parent) => {
                *held.get(&parent).ok_or(ApplyError::UnknownParent { worker, parent })?
            }
        };
        // Validate the whole chain before changing anything.
        let mut in_batch = HashSet::default();
        let mut at = Some(start);
        for block in blocks {
            let next = at.and_then(|node| self.nodes[&node].children.get(&block.local).copied());
            let ok = match held.get(&block.hash) {
                Some(&node) => Some(node) == next,
                None => {
                    in_batch.insert(block.hash)
                        && !next.is_some_and(|node| self.nodes[&node].holders.contains(&worker))
                }
            };
            if !ok {
                return Err(ApplyError::HashConflict { worker, block: block.hash });
            }
            at = next;
        }
        let mut at = start;
        for block in blocks {
            at = self.child_or_insert(at, block.local);
            self.nodes.get_mut(&at).expect("node exists").holders.insert(worker);
            self.workers.entry(worker).or_default().insert(block.hash, at);
        }
        self.workers.entry(worker).or_default();
        Ok(())
    }

    fn child_or_insert(&mut self, parent: NodeId, local: LocalBlockHash) -> NodeId {
        if let Some(&child) = self.nodes[&parent].children.get(&local) {
            return child;
        }
        let id = self.next_id;
        self.next_id += 1;
        let parent_seq = (parent != ROOT).then(|| self.nodes[&parent].seq);
        let seq = next_sequence_hash(parent_seq, local);
        let node =
            Node { local, seq, parent, children: HashMap::default(), holders: BTreeSet::new() };
        self.nodes.insert(id, node);
        self.nodes.get_mut(&parent).expect("parent exists").children.insert(local, id);
        id
    }

    fn remove(&mut self, worker: Worker, blocks: &[SequenceHash]) -> Result<(), ApplyError> {
        let Some(held) = self.workers.get_mut(&worker) else {
            return Err(ApplyError::UnknownWorker { worker });
        };
        let mut unknown = Vec::new();
        let mut released = Vec::new();
        for &hash in blocks {
            match held.remove(&hash) {
                Some(node) => released.push(node),
                None => unknown.push(hash),
            }
        }
        for node in released {
            self.release(node, worker);
        }
        match unknown.first() {
            None => Ok(()),
            Some(&first) => Err(ApplyError::UnknownBlocks { worker, first, count: unknown.len() }),
        }
    }

    /// Drops `worker` from `node` and prunes nodes left with neither holders nor children.
    fn release(&mut self, node: NodeId, worker: Worker) {
        self.nodes.get_mut(&node).expect("held node exists").holders.remove(&worker);
        let mut at = node;
        while at != ROOT
            && self.nodes[&at].holders.is_empty()
            && self.nodes[&at].children.is_empty()
        {
            let removed = self.nodes.remove(&at).expect("node exists");
            let parent = self.nodes.get_mut(&removed.parent).expect("parent exists");
            parent.children.remove(&removed.local);
            at = removed.parent;
        }
    }

    fn clear(&mut self, worker: Worker) {
        let held = std::mem::take(self.workers.get_mut(&worker).expect("worker is known"));
        for node in held.into_values() {
            self.release(node, worker);
        }
    }

    /// Forgets one (worker, dp_rank) and every block it holds. Returns whether it was known.
    pub fn remove_worker_dp_rank(&mut self, worker: Worker) -> bool {
        if !self.workers.contains_key(&worker) {
            return false;
        }
        self.clear(worker);
        self.workers.remove(&worker);
        true
    }

    /// Forgets every dp_rank of `id`. Returns how many (worker, dp_rank) pairs were removed.
    pub fn remove_worker(&mut self, id: WorkerId) -> usize {
        let ranks: Vec<Worker> = self.workers.keys().filter(|w| w.id == id).copied().collect();
        ranks.iter().filter(|&&w| self.remove_worker_dp_rank(w)).count()
    }

    /// Per worker, how many leading blocks of `query` it holds.
    pub fn find_matches(&self, query: &[LocalBlockHash]) -> OverlapScores {
        self.walk(query, false)
    }

    /// Like [`Self::find_matches`], but stops walking as soon as a single worker still matches:
    /// that worker's depth is then where it became the only one (a lower bound).
    pub fn find_matches_early_exit(&self, query: &[LocalBlockHash]) -> OverlapScores {
        self.walk(query, true)
    }

    fn walk(&self, query: &[LocalBlockHash], early_exit: bool) -> OverlapScores {
        let mut scores = Vec::new();
        let mut active: Option<BTreeSet<Worker>> = None;
        let mut depth = 0u32;
        let mut at = ROOT;
        for local in query {
            let Some(&child) = self.nodes[&at].children.get(local) else { break };
            let holders = &self.nodes[&child].holders;
            let next: BTreeSet<Worker> = match &active {
                None => holders.clone(),
                Some(active) => {
                    for worker in active.difference(holders) {
                        scores.push((*worker, depth));
                    }
                    active.intersection(holders).copied().collect()
                }
            };
            depth += 1;
            at = child;
            let stop = next.is_empty() || (early_exit && next.len() == 1);
            active = Some(next);
            if stop {
                break;
            }
        }
        scores.extend(active.unwrap_or_default().into_iter().map(|worker| (worker, depth)));
        OverlapScores::from_pairs(scores)
    }

    /// Every known (worker, dp_rank), in order.
    pub fn workers(&self) -> Vec<Worker> {
        self.workers.keys().copied().collect()
    }

    /// How many blocks `worker` holds.
    pub fn block_count(&self, worker: Worker) -> usize {
        self.workers.get(&worker).map_or(0, HashMap::len)
    }

    /// Live (worker, block) entries over all workers.
    pub fn entry_count(&self) -> usize {
        self.workers.values().map(HashMap::len).sum()
    }

    /// Tree nodes, the root excluded.
    pub fn node_count(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Per worker, each engine hash it holds with our sequence hash of that block's prefix.
    pub fn snapshot(&self) -> IndexSnapshot {
        self.workers
            .iter()
            .map(|(&worker, held)| {
                let blocks =
                    held.iter().map(|(&hash, node)| (hash, self.nodes[node].seq)).collect();
                (worker, blocks)
            })
            .collect()
    }

    /// Events that rebuild an equal index (same [`Self::snapshot`], same answers) when applied
    /// to an empty one.
    ///
    /// A block whose ancestors the worker no longer holds is stored with placeholder ancestors
    /// that are removed right after, so the rebuilt index matches exactly.
    pub fn dump_events(&self) -> Vec<RouterEvent> {
        let mut events = Vec::new();
        for (&worker, held) in &self.workers {
            if held.is_empty() {
                // An empty `Stored` registers a worker that holds nothing.
                events.push(RouterEvent::stored(worker, 0, None, Vec::new()));
            }
            let name: HashMap<NodeId, SequenceHash> = held.iter().map(|(&h, &n)| (n, h)).collect();
            let mut stack = vec![ROOT];
            while let Some(at) = stack.pop() {
                let node = &self.nodes[&at];
                stack.extend(node.children.values().copied());
                let Some(&hash) = name.get(&at) else { continue };
                events.extend(self.dump_block(worker, at, hash, held, &name));
            }
        }
        events
    }

    /// The events that store `node` (named `hash` by `worker`) once its held ancestors are stored.
    fn dump_block(
        &self,
        worker: Worker,
        node: NodeId,
        hash: SequenceHash,
        held: &HashMap<SequenceHash, NodeId>,
        name: &HashMap<NodeId, SequenceHash>,
    ) -> Vec<RouterEvent> {
        let mut gap = Vec::new();
        let mut at = self.nodes[&node].parent;
        while at != ROOT && !name.contains_key(&at) {
            gap.push(at);
            at = self.nodes[&at].parent;
        }
        let parent = name.get(&at).copied();
        let mut placeholders = Vec::new();
        let mut candidate = 0u64;
        let mut blocks = Vec::new();
        for &gap_node in gap.iter().rev() {
            // Any hash the worker does not use, distinct from the others of this event.
            while held.contains_key(&SequenceHash(candidate))
                || placeholders.contains(&SequenceHash(candidate))
            {
                candidate += 1;
            }
            placeholders.push(SequenceHash(candidate));
            blocks.push(StoredBlock {
                local: self.nodes[&gap_node].local,
                hash: SequenceHash(candidate),
            });
        }
        blocks.push(StoredBlock { local: self.nodes[&node].local, hash });
        let mut events = vec![RouterEvent::stored(worker, 0, parent, blocks)];
        if !placeholders.is_empty() {
            events.push(RouterEvent::removed(worker, 0, placeholders));
        }
        events
    }
}
