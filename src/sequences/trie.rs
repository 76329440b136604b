//! [`BlockTrie`]: the blocks pinned by the requests in flight on a group of workers, as one
//! compressed prefix tree with per-worker request counts on each node.
//!
//! A [`SequenceHash`] commits to its whole prefix, so the block sequences of requests are paths
//! from a common root, and a shared prefix (a system prompt, an earlier turn) is one path stored
//! once. Each node holds an edge of consecutive blocks and, per worker, how many of its requests
//! cover the whole edge (requests end at node boundaries: a node is split where one ends).
//!
//! - A worker pins a block iff its count on the block's node is above zero; its pinned blocks
//!   are the sum of the edge lengths of those nodes, kept up to date by the caller from what
//!   [`BlockTrie::insert`] and [`BlockTrie::remove`] return.
//! - The candidate blocks a worker already pins are a prefix of the candidate (a pinned block's
//!   whole prefix is pinned), so one walk down the candidate's path gives every worker's depth.
//! - Hashes are stored once per group of workers, not once per worker or per request.
//! - The parent → child links are one flat table per trie ([`ChildTable`]), keyed by (parent,
//!   first block of the child's edge): a walk finds each next node in one cache line, whose
//!   address it knows before reading the parent.
//!
//! Nodes with no request are removed at once, and a node whose only child has the same owners is
//! merged into it, so the trie stays compressed however requests come and go.

use super::children::{ChildTable, EdgeHint, NodeId};
use super::owners::{Owners, Slot};
use crate::event::SequenceHash;
use crate::prefetch::prefetch_line;

/// The root: an empty edge above every path. Requests without blocks end here.
pub(crate) const ROOT: NodeId = 0;

#[derive(Debug, Default)]
struct Node {
    /// Consecutive blocks; empty only for the root (and for free arena slots).
    edge: Box<[SequenceHash]>,
    /// How many blocks precede the edge on its path.
    start: usize,
    parent: NodeId,
    /// How many children (they are found in the trie's [`ChildTable`]).
    children: u32,
    /// The XOR of the children's ids: the only child's id when there is one.
    children_xor: NodeId,
    owners: Owners,
}

/// Tries walked in step by [`BlockTrie::visit_depths_together`] (at most; more go in groups).
const TOGETHER: usize = 8;

/// Where one walk of [`BlockTrie::visit_depths_together`] stands: at `node`, `pos` candidate
/// blocks matched; `next` is the child being loaded.
#[derive(Clone, Copy)]
struct Cursor {
    node: NodeId,
    next: NodeId,
    pos: usize,
}

/// Starts loading the fields of `node` a walk reads (a node may straddle two cache lines).
fn prefetch_node(node: &Node) {
    prefetch_line(&node.edge);
    prefetch_line(&node.owners);
}

/// A new leaf's edge, copied before the writer's exclusive lock: the blocks of a request from
/// `at`, where [`BlockTrie::warm_insert`] found its path leave the trie. [`BlockTrie::insert`]
/// takes it if the path still leaves there (nothing else could differ: the edge is `blocks[at..]`
/// either way), and copies the blocks itself otherwise.
///
/// Why: under churn, the copy's allocation took malloc's slow path about once in a hundred
/// inserts (5–20 µs, against ~1 µs for the whole insert), and every query that wanted the shard
/// waited that long.
#[derive(Debug)]
pub(crate) struct LeafEdge {
    at: usize,
    edge: Box<[SequenceHash]>,
}

impl LeafEdge {
    /// `blocks[at..]`, if `at` is inside `blocks`.
    pub(crate) fn copy(blocks: &[SequenceHash], at: usize) -> Option<Self> {
        let edge = blocks.get(at..).filter(|rest| !rest.is_empty())?.into();
        Some(Self { at, edge })
    }
}

/// The compressed prefix tree of the blocks pinned by one group of workers. See the module docs.
#[derive(Debug)]
pub(crate) struct BlockTrie {
    nodes: Vec<Node>,
    free: Vec<NodeId>,
    /// Every node's children, by (node, first block of the child's edge).
    children: ChildTable,
    /// Edges no longer in use, for the writer to free after its exclusive lock (see
    /// [`Self::take_retired`]).
    retired: Vec<Box<[SequenceHash]>>,
}

/// Retired edges kept at most; beyond, they are freed at once (a caller that never takes them
/// holds no more than this).
const MAX_RETIRED: usize = 64;

impl Default for BlockTrie {
    fn default() -> Self {
        Self {
            nodes: vec![Node::default()],
            free: Vec::new(),
            children: ChildTable::default(),
            retired: Vec::new(),
        }
    }
}

/// How many leading elements two slices share.
fn common_prefix(a: &[SequenceHash], b: &[SequenceHash]) -> usize {
    const CHUNK: usize = 4;
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let mut at = 0;
    // Branch-free over each chunk (vectorised, no call into `memcmp`).
    for (x, y) in a.chunks_exact(CHUNK).zip(b.chunks_exact(CHUNK)) {
        let differ = x.iter().zip(y).fold(0, |acc, (p, q)| acc | (p.0 ^ q.0));
        if differ != 0 {
            break;
        }
        at += CHUNK;
    }
    while at < len && a[at] == b[at] {
        at += 1;
    }
    at
}

impl BlockTrie {
    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id as usize]
    }

    fn allocate(&mut self, node: Node) -> NodeId {
        if let Some(id) = self.free.pop() {
            self.nodes[id as usize] = node;
            id
        } else {
            let id = NodeId::try_from(self.nodes.len()).expect("more than u32::MAX trie nodes");
            self.nodes.push(node);
            id
        }
    }

    fn release(&mut self, id: NodeId) {
        let node = std::mem::take(&mut self.nodes[id as usize]);
        self.retire(node.edge);
        self.free.push(id);
    }

    /// Keeps an edge no longer in use for [`Self::take_retired`], instead of freeing it under the
    /// writer's exclusive lock: like the copy a [`LeafEdge`] moves out, a free sometimes takes
    /// malloc's slow path, and readers wait for the writer.
    fn retire(&mut self, edge: Box<[SequenceHash]>) {
        if edge.is_empty() {
            return;
        }
        if self.retired.len() >= MAX_RETIRED {
            self.retired.clear();
        }
        self.retired.push(edge);
    }

    /// Hands the retired edges to the caller, to be freed once its exclusive lock is released.
    pub(crate) fn take_retired(&mut self) -> Vec<Box<[SequenceHash]>> {
        std::mem::take(&mut self.retired)
    }

    /// The child of `node` whose edge starts with `first`.
    #[inline]
    fn child(&self, node: NodeId, first: SequenceHash) -> Option<NodeId> {
        self.children.get(node, first)
    }

    /// Where `id`'s edge lies, for its link. Every change to a node's edge is followed by a
    /// link or relink of the node, which refreshes the hint.
    fn edge_hint(&self, id: NodeId) -> EdgeHint {
        EdgeHint::of(&self.node(id).edge)
    }

    /// Links a new child under `parent`.
    fn link(&mut self, parent: NodeId, first: SequenceHash, child: NodeId) {
        let replaced = self.children.insert(parent, first, child, self.edge_hint(child));
        debug_assert_eq!(replaced, None);
        let node = self.node_mut(parent);
        node.children += 1;
        node.children_xor ^= child;
    }

    /// Puts `new` in the place of `old`, the child of `parent` by `first`.
    fn relink(&mut self, parent: NodeId, first: SequenceHash, old: NodeId, new: NodeId) {
        let replaced = self.children.insert(parent, first, new, self.edge_hint(new));
        debug_assert_eq!(replaced, Some(old));
        self.node_mut(parent).children_xor ^= old ^ new;
    }

    /// Unlinks the child of `parent` by `first`.
    fn unlink(&mut self, parent: NodeId, first: SequenceHash) {
        if let Some(child) = self.children.remove(parent, first) {
            let node = self.node_mut(parent);
            node.children -= 1;
            node.children_xor ^= child;
        }
    }

    /// Records one request of `slot` covering `blocks`. Returns the node it ends at (the root
    /// when `blocks` is empty) and how many of its blocks `slot` did not pin before. A new leaf
    /// takes `leaf`'s edge if it starts where `leaf` does; otherwise `leaf` is left to the caller.
    pub(crate) fn insert(
        &mut self,
        slot: Slot,
        blocks: &[SequenceHash],
        leaf: &mut Option<LeafEdge>,
    ) -> (NodeId, usize) {
        let mut node = ROOT;
        let mut pos = 0;
        let mut newly_pinned = 0;
        while pos < blocks.len() {
            let Some(child) = self.child(node, blocks[pos]) else {
                let edge = match leaf.take() {
                    Some(prepared) if prepared.at == pos => {
                        debug_assert_eq!(*prepared.edge, blocks[pos..], "copied from `blocks`");
                        prepared.edge
                    }
                    stale => {
                        *leaf = stale;
                        blocks[pos..].into()
                    }
                };
                newly_pinned += edge.len();
                let leaf = self.allocate(Node {
                    edge,
                    start: pos,
                    parent: node,
                    children: 0,
                    children_xor: ROOT,
                    owners: Owners::single(slot),
                });
                self.link(node, blocks[pos], leaf);
                return (leaf, newly_pinned);
            };
            let matched = common_prefix(&self.node(child).edge, &blocks[pos..]);
            let child = if matched < self.node(child).edge.len() {
                self.split(child, matched)
            } else {
                child
            };
            if self.node_mut(child).owners.increment(slot) {
                newly_pinned += matched;
            }
            pos += matched;
            node = child;
        }
        (node, newly_pinned)
    }

    /// Cuts `id`'s edge after `at` blocks (`0 < at < len`): a new node takes the first `at`
    /// blocks and the same owners, and becomes `id`'s parent. `id` keeps its identity (requests
    /// ending at it still do). Returns the new node.
    fn split(&mut self, id: NodeId, at: usize) -> NodeId {
        debug_assert!(at > 0 && at < self.node(id).edge.len());
        let node = self.node(id);
        let prefix = Node {
            edge: node.edge[..at].into(),
            start: node.start,
            parent: node.parent,
            children: 0,
            children_xor: ROOT,
            owners: node.owners.clone(),
        };
        let (parent, first, suffix_first) = (node.parent, node.edge[0], node.edge[at]);
        let prefix_id = self.allocate(prefix);
        let node = self.node_mut(id);
        let suffix = node.edge[at..].into();
        let whole = std::mem::replace(&mut node.edge, suffix);
        node.start += at;
        node.parent = prefix_id;
        self.link(prefix_id, suffix_first, id);
        self.relink(parent, first, id, prefix_id);
        self.retire(whole);
        prefix_id
    }

    /// Forgets one request of `slot` that ended at `tail`. Returns how many blocks `slot` no
    /// longer pins. A `tail` that `slot` does not cover is left alone.
    pub(crate) fn remove(&mut self, slot: Slot, tail: NodeId) -> usize {
        let covered = self.nodes.get(tail as usize).is_some_and(|n| n.owners.contains(slot));
        if tail == ROOT || !covered {
            return 0;
        }
        let mut node = tail;
        let mut unpinned = 0;
        while node != ROOT {
            let parent = self.node(node).parent;
            if self.node_mut(node).owners.decrement(slot) {
                unpinned += self.node(node).edge.len();
            }
            if self.node(node).owners.is_empty() {
                debug_assert_eq!(self.node(node).children, 0);
                let first = self.node(node).edge[0];
                self.unlink(parent, first);
                self.release(node);
            } else {
                self.merge_into_only_child(node);
            }
            node = parent;
        }
        unpinned
    }

    /// If `id` has exactly one child with the same owners (no request ends at `id`), moves
    /// `id`'s edge into the child and drops `id`.
    fn merge_into_only_child(&mut self, id: NodeId) {
        let node = self.node(id);
        if node.children != 1 {
            return;
        }
        let child = node.children_xor;
        if self.node(child).owners != node.owners {
            return;
        }
        let (parent, first, start) = (node.parent, node.edge[0], node.start);
        let mut edge = Vec::with_capacity(node.edge.len() + self.node(child).edge.len());
        edge.extend_from_slice(&node.edge);
        edge.extend_from_slice(&self.node(child).edge);
        let child_first = self.node(child).edge[0];
        self.unlink(id, child_first);
        let merged = self.node_mut(child);
        let tail = std::mem::replace(&mut merged.edge, edge.into_boxed_slice());
        merged.start = start;
        merged.parent = parent;
        self.relink(parent, first, id, child);
        self.release(id);
        self.retire(tail);
    }

    /// Walks `candidate` down the trie and calls `visit(slot, depth)` for each worker covering a
    /// node on the way, deeper nodes last: the last depth given for a slot is the number of
    /// leading candidate blocks that worker pins.
    pub(crate) fn visit_depths(
        &self,
        candidate: &[SequenceHash],
        mut visit: impl FnMut(Slot, usize),
    ) {
        let mut node = ROOT;
        let mut pos = 0;
        while pos < candidate.len() {
            let Some(child) = self.child(node, candidate[pos]) else { break };
            let child_node = self.node(child);
            let matched = common_prefix(&child_node.edge, &candidate[pos..]);
            for (slot, _) in child_node.owners.iter() {
                visit(slot, pos + matched);
            }
            if matched < child_node.edge.len() {
                break;
            }
            pos += matched;
            node = child;
        }
    }

    /// [`Self::visit_depths`] over several tries at once (`None`s are skipped), calling
    /// `visit(trie, slot, depth)`. The walks advance one node per round, each round in three
    /// passes: find every walk's next node and start loading it, its edge (where its link
    /// says) and the link after it; start loading the next nodes' owners; match. One walk's
    /// cache misses are a chain (a link, then the node and its edge together), but the walks'
    /// chains are independent, so issued together they overlap. A query that finds the tries
    /// out of cache waits for the longest chain instead of their sum.
    pub(crate) fn visit_depths_together(
        tries: &[Option<&BlockTrie>],
        candidate: &[SequenceHash],
        mut visit: impl FnMut(usize, Slot, usize),
    ) {
        for (first, group) in tries.chunks(TOGETHER).enumerate() {
            let mut cursors = [Cursor { node: ROOT, next: ROOT, pos: 0 }; TOGETHER];
            // Walks still going, by bit.
            let mut live: u32 = 0;
            for (at, trie) in group.iter().enumerate() {
                if let (Some(trie), false) = (trie, candidate.is_empty()) {
                    live |= 1 << at;
                    trie.children.prefetch(ROOT, candidate[0]);
                }
            }
            // The walks going at the start of a pass (a pass ends only its own walks).
            let walks = |going: u32| {
                group
                    .iter()
                    .enumerate()
                    .filter(move |&(at, _)| going & 1 << at != 0)
                    .filter_map(|(at, trie)| Some((at, (*trie)?)))
            };
            while live != 0 {
                for (at, trie) in walks(live) {
                    let cursor = &mut cursors[at];
                    match trie.children.get_with_edge(cursor.node, candidate[cursor.pos]) {
                        Some((child, edge)) => {
                            cursor.next = child;
                            prefetch_node(trie.node(child));
                            edge.prefetch(candidate.len() - cursor.pos);
                            // Where the next round looks if the whole edge matches.
                            if let Some(&next) = candidate.get(cursor.pos + edge.len()) {
                                trie.children.prefetch(child, next);
                            }
                        }
                        None => live &= !(1 << at),
                    }
                }
                for (at, trie) in walks(live) {
                    trie.node(cursors[at].next).owners.prefetch();
                }
                for (at, trie) in walks(live) {
                    let cursor = &mut cursors[at];
                    let node = trie.node(cursor.next);
                    let matched = common_prefix(&node.edge, &candidate[cursor.pos..]);
                    for (slot, _) in node.owners.iter() {
                        visit(first * TOGETHER + at, slot, cursor.pos + matched);
                    }
                    cursor.pos += matched;
                    cursor.node = cursor.next;
                    if matched < node.edge.len() || cursor.pos >= candidate.len() {
                        live &= !(1 << at);
                    }
                }
            }
        }
    }

    /// Reads what [`Self::insert`] of `blocks` will touch (the nodes on its path, the arena slot
    /// it may reuse), so a writer can pull them into cache before taking its exclusive lock.
    /// Returns a value derived from every read, for the caller to `black_box`, and where the
    /// insert would start a new leaf now (for a [`LeafEdge`]).
    pub(crate) fn warm_insert(&self, blocks: &[SequenceHash]) -> (usize, usize) {
        let mut node = ROOT;
        let mut pos = 0;
        let mut sum = self.free.last().map_or(0, |&id| self.node(id).start);
        while pos < blocks.len() {
            let Some(child) = self.child(node, blocks[pos]) else { break };
            let child_node = self.node(child);
            let matched = common_prefix(&child_node.edge, &blocks[pos..]);
            sum += child_node.owners.iter().count();
            pos += matched;
            if matched < child_node.edge.len() {
                // The insert splits `child` here; the rest of `blocks`, if any, is a new leaf.
                break;
            }
            node = child;
        }
        (sum, pos)
    }

    /// Reads what [`Self::remove`] from `tail` will touch (the path up to the root), like
    /// [`Self::warm_insert`].
    pub(crate) fn warm_remove(&self, tail: NodeId) -> usize {
        let mut sum = 0;
        let mut node = tail;
        while node != ROOT {
            let Some(at) = self.nodes.get(node as usize) else { break };
            let parent = at.parent;
            let first = at.edge.first().copied().unwrap_or_default();
            sum += at.owners.iter().count();
            sum += self.child(parent, first).map_or(0, |c| c as usize);
            node = parent;
        }
        sum
    }

    /// How many leading blocks of `candidate` `slot` pins.
    pub(crate) fn depth_of(&self, slot: Slot, candidate: &[SequenceHash]) -> usize {
        let mut depth = 0;
        self.visit_depths(candidate, |s, d| {
            if s == slot {
                depth = d;
            }
        });
        depth
    }

    /// Live nodes, root excluded.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len() - self.free.len() - 1
    }

    /// Every block `slot` pins, in path order (for tests and consistency checks).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn pinned_blocks(&self, slot: Slot) -> Vec<SequenceHash> {
        let mut out = Vec::new();
        let mut stack = vec![ROOT];
        let children = self.children_of();
        while let Some(id) = stack.pop() {
            let node = self.node(id);
            if id != ROOT && node.owners.count(slot) > 0 {
                out.extend_from_slice(&node.edge);
            }
            stack.extend(children.get(&id).into_iter().flatten().map(|&(_, child)| child));
        }
        out
    }

    /// Every node's children, `(first, child)` (for tests and consistency checks).
    #[cfg(all(test, not(loom)))]
    fn children_of(&self) -> HashMap<NodeId, Vec<(SequenceHash, NodeId)>> {
        let mut children: HashMap<NodeId, Vec<(SequenceHash, NodeId)>> = HashMap::new();
        for (parent, first, child, edge) in self.children.iter() {
            assert_eq!(edge, self.edge_hint(child), "link's edge hint is stale");
            children.entry(parent).or_default().push((first, child));
        }
        children
    }

    /// Checks the structural invariants (for tests): parents and children agree, starts add up,
    /// every node has an owner, a child's owners are covered by its parent's, and no node could
    /// be merged into its only child.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn assert_consistent(&self) {
        let mut seen = 0;
        let mut stack = vec![ROOT];
        let children = self.children_of();
        assert_eq!(self.children.len(), self.node_count(), "one link per node");
        while let Some(id) = stack.pop() {
            let node = self.node(id);
            let links = children.get(&id).map_or(&[][..], Vec::as_slice);
            assert_eq!(node.children as usize, links.len(), "child count");
            let xor = links.iter().fold(ROOT, |acc, &(_, child)| acc ^ child);
            assert_eq!(node.children_xor, xor, "children's ids");
            for &(first, child) in links {
                let child_node = self.node(child);
                assert_eq!(child_node.parent, id);
                assert_eq!(child_node.edge.first(), Some(&first));
                assert_eq!(child_node.start, node.start + node.edge.len());
                assert!(!child_node.owners.is_empty());
                for (slot, count) in child_node.owners.iter() {
                    assert!(count > 0);
                    if id != ROOT {
                        assert!(node.owners.count(slot) >= count, "child owners exceed parent's");
                    }
                }
                stack.push(child);
                seen += 1;
            }
            if id != ROOT && links.len() == 1 {
                let only = links[0].1;
                assert_ne!(self.node(only).owners, node.owners, "mergeable node left behind");
            }
        }
        assert_eq!(seen, self.node_count());
    }
}

#[cfg(all(test, not(loom)))]
use std::collections::HashMap;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn hashes(values: &[u64]) -> Vec<SequenceHash> {
        values.iter().copied().map(SequenceHash).collect()
    }

    #[test]
    fn shared_prefixes_are_pinned_once_per_worker() {
        let mut trie = BlockTrie::default();
        let (a, new_a) = trie.insert(0, &hashes(&[1, 2, 3, 4]), &mut None);
        assert_eq!(new_a, 4);
        let (b, new_b) = trie.insert(0, &hashes(&[1, 2, 5]), &mut None);
        assert_eq!(new_b, 1, "only the diverging block is new for the worker");
        let (c, new_c) = trie.insert(1, &hashes(&[1, 2, 5]), &mut None);
        assert_eq!(new_c, 3, "another worker pins its own copy");
        trie.assert_consistent();
        assert_eq!(trie.node_count(), 3, "[1,2] then [3,4] and [5]");

        assert_eq!(trie.depth_of(0, &hashes(&[1, 2, 3, 9])), 3);
        assert_eq!(trie.depth_of(1, &hashes(&[1, 2, 3, 9])), 2);
        assert_eq!(trie.depth_of(1, &hashes(&[7])), 0);

        assert_eq!(trie.remove(0, a), 2, "[3,4] is no longer pinned by worker 0");
        trie.assert_consistent();
        assert_eq!(trie.node_count(), 1, "[1,2] merged back with [5]");
        assert_eq!(trie.remove(1, c), 3);
        assert_eq!(trie.remove(0, b), 3);
        trie.assert_consistent();
        assert_eq!(trie.node_count(), 0);
    }

    #[test]
    fn a_request_ending_inside_an_edge_splits_it_and_the_long_one_keeps_its_node() {
        let mut trie = BlockTrie::default();
        let (long, _) = trie.insert(0, &hashes(&[1, 2, 3, 4, 5]), &mut None);
        let (short, new_short) = trie.insert(0, &hashes(&[1, 2]), &mut None);
        assert_eq!(new_short, 0);
        assert_ne!(long, short);
        trie.assert_consistent();
        assert_eq!(trie.remove(0, long), 3);
        assert_eq!(trie.pinned_blocks(0), hashes(&[1, 2]));
        assert_eq!(trie.remove(0, short), 2);
        assert_eq!(trie.node_count(), 0);
    }

    #[test]
    fn a_node_where_a_request_ends_is_not_merged_into_its_only_child() {
        let mut trie = BlockTrie::default();
        let (a, _) = trie.insert(0, &hashes(&[1, 2, 3]), &mut None);
        let (b, _) = trie.insert(0, &hashes(&[1, 2]), &mut None);
        let (d, _) = trie.insert(0, &hashes(&[1, 2, 4]), &mut None);
        assert_eq!(trie.remove(0, a), 1);
        trie.assert_consistent();
        assert_eq!(trie.remove(0, d), 1, "[1,2] is still pinned by the request ending there");
        assert_eq!(trie.pinned_blocks(0), hashes(&[1, 2]));
        assert_eq!(trie.remove(0, b), 2);
        assert_eq!(trie.node_count(), 0);
    }

    #[test]
    fn edges_no_longer_used_are_handed_over_and_a_bounded_few_are_kept() {
        let mut trie = BlockTrie::default();
        let (a, _) = trie.insert(0, &hashes(&[1, 2, 3]), &mut None);
        // The split retires [1,2,3] (now [1,2] and [3]); removing `b` retires [4], and merging
        // [1,2] into [3] retires both.
        let (b, _) = trie.insert(0, &hashes(&[1, 2, 4]), &mut None);
        assert_eq!(trie.remove(0, b), 1);
        let taken = trie.take_retired();
        let mut edges: Vec<Vec<u64>> =
            taken.iter().map(|e| e.iter().map(|h| h.0).collect()).collect();
        edges.sort();
        assert_eq!(edges, [vec![1, 2], vec![1, 2, 3], vec![3], vec![4]]);
        trie.assert_consistent();
        assert_eq!(trie.remove(0, a), 3);
        for round in 0..10 * MAX_RETIRED as u64 {
            let (tail, _) = trie.insert(1, &hashes(&[round + 10]), &mut None);
            trie.remove(1, tail);
            assert!(trie.retired.len() <= MAX_RETIRED, "never taken, still bounded");
        }
    }

    #[test]
    fn identical_requests_share_one_tail_and_empty_ones_end_at_the_root() {
        let mut trie = BlockTrie::default();
        let (a, _) = trie.insert(3, &hashes(&[8, 9]), &mut None);
        let (b, new_b) = trie.insert(3, &hashes(&[8, 9]), &mut None);
        assert_eq!((a, new_b), (b, 0));
        assert_eq!(trie.insert(3, &[], &mut None), (ROOT, 0));
        assert_eq!(trie.remove(3, ROOT), 0);
        assert_eq!(trie.remove(3, a), 0);
        assert_eq!(trie.remove(3, b), 2);
        assert_eq!(trie.remove(3, b), 0, "a stale tail changes nothing");
    }

    #[test]
    fn visit_reports_the_deepest_match_last_for_every_worker() {
        let mut trie = BlockTrie::default();
        trie.insert(0, &hashes(&[1, 2, 3]), &mut None);
        trie.insert(1, &hashes(&[1, 2, 3, 4, 5, 6]), &mut None);
        trie.insert(2, &hashes(&[1, 7]), &mut None);
        let mut depth = [0; 3];
        trie.visit_depths(&hashes(&[1, 2, 3, 4, 5, 8]), |slot, d| depth[slot as usize] = d);
        assert_eq!(depth, [3, 5, 1]);
    }

    #[test]
    fn walking_tries_in_step_reports_what_walking_each_alone_does() {
        // More tries than one group walks in step, some absent, of different shapes: shared
        // prefixes, splits, a path ending inside an edge, one trie empty.
        let tries: Vec<BlockTrie> = (0..TOGETHER as u64 + 3)
            .map(|t| {
                let mut trie = BlockTrie::default();
                for r in 0..t {
                    let len = 1 + (r * 7 + t) % 9;
                    let path: Vec<u64> =
                        (0..len).map(|i| if i < 3 { i } else { i + r % 3 }).collect();
                    trie.insert((r % 5) as Slot, &hashes(&path), &mut None);
                }
                trie
            })
            .collect();
        let present: Vec<Option<&BlockTrie>> =
            tries.iter().enumerate().map(|(t, trie)| (t % 4 != 2).then_some(trie)).collect();
        for candidate in
            [vec![], vec![0], vec![0, 1, 2, 3, 4, 5], vec![0, 1, 2, 4, 5, 6, 7, 9], vec![9]]
        {
            let candidate = hashes(&candidate);
            let mut together = vec![[0; 5]; tries.len()];
            BlockTrie::visit_depths_together(&present, &candidate, |t, slot, depth| {
                together[t][slot as usize] = depth;
            });
            for (t, trie) in present.iter().enumerate() {
                let mut alone = [0; 5];
                if let Some(trie) = trie {
                    trie.visit_depths(&candidate, |slot, depth| alone[slot as usize] = depth);
                }
                assert_eq!(together[t], alone, "trie {t}, candidate {candidate:?}");
            }
        }
    }

    #[test]
    fn random_requests_keep_the_trie_consistent_and_equal_to_a_model() {
        use std::collections::BTreeSet;
        // Paths over a tiny alphabet, so prefixes are shared, edges split and merge, and one
        // hash sits at several places (inputs need not be real hash chains).
        let mut state = 11u64;
        let mut next = move |bound: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % bound
        };
        let mut trie = BlockTrie::default();
        let mut live: Vec<(Slot, Vec<SequenceHash>, NodeId)> = Vec::new();
        let prefixes = |live: &[(Slot, Vec<SequenceHash>, NodeId)], slot: Slot| {
            let mut set = BTreeSet::new();
            for (_, path, _) in live.iter().filter(|r| r.0 == slot) {
                set.extend((1..=path.len()).map(|n| path[..n].to_vec()));
            }
            set
        };
        for _ in 0..3_000 {
            let slot = next(3) as Slot;
            let before = prefixes(&live, slot).len();
            if live.is_empty() || next(5) < 3 {
                let path = hashes(&(0..next(7)).map(|_| next(3)).collect::<Vec<_>>());
                // No leaf copied ahead, one copied where the path leaves the trie now (it must
                // be taken), or one copied from anywhere (taken only if that is where it leaves).
                let (_, leaves_at) = trie.warm_insert(&path);
                let (mut leaf, fresh) = match next(3) {
                    0 => (None, false),
                    1 => (LeafEdge::copy(&path, leaves_at), true),
                    _ => (LeafEdge::copy(&path, next(path.len() as u64 + 1) as usize), false),
                };
                let (tail, new) = trie.insert(slot, &path, &mut leaf);
                assert!(!fresh || leaf.is_none(), "a leaf copied where the path leaves is taken");
                live.push((slot, path, tail));
                assert_eq!(new, prefixes(&live, slot).len() - before);
            } else {
                let at = next(live.len() as u64) as usize;
                let slot = live[at].0;
                let before = prefixes(&live, slot).len();
                let (_, _, tail) = live.swap_remove(at);
                let unpinned = trie.remove(slot, tail);
                assert_eq!(unpinned, before - prefixes(&live, slot).len());
            }
            trie.assert_consistent();
            for slot in 0..3 {
                let mut expected: Vec<u64> =
                    prefixes(&live, slot).iter().map(|p| p[p.len() - 1].0).collect();
                let mut got: Vec<u64> = trie.pinned_blocks(slot).iter().map(|h| h.0).collect();
                expected.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, expected, "slot {slot}");
                let candidate = hashes(&(0..6).map(|_| next(3)).collect::<Vec<_>>());
                let depth = live
                    .iter()
                    .filter(|r| r.0 == slot)
                    .map(|r| common_prefix(&r.1, &candidate))
                    .max()
                    .unwrap_or(0);
                assert_eq!(trie.depth_of(slot, &candidate), depth);
            }
        }
    }

    #[test]
    fn common_prefix_handles_every_length() {
        let a = hashes(&(0..20).collect::<Vec<_>>());
        for cut in 0..20 {
            let mut b = a.clone();
            b[cut] = SequenceHash(999);
            assert_eq!(common_prefix(&a, &b), cut);
            assert_eq!(common_prefix(&a[..cut], &a), cut);
        }
        assert_eq!(common_prefix(&a, &a), 20);
    }
}
