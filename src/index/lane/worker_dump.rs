//! The `Stored` events that rebuild a lane's workers, from their names and the lane's tree.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::event::{RouterEvent, SequenceHash, StoredBlock, Worker};
use crate::index::lane::held_blocks::HeldBlocks;
use crate::index::lane::lane_trie::LaneTrie;
use crate::index::lane::node_ids::NodeId;
use crate::sync::epoch::Guard;
use crate::u64_map::U64Map;

/// One dumped chain of a worker.
struct DumpedChain {
    /// The engine hash of the block it hangs from, if any.
    parent: Option<SequenceHash>,
    blocks: Vec<StoredBlock>,
    /// The engine hashes among `blocks` that are placeholders (to be removed right after).
    placeholders: Vec<SequenceHash>,
    /// The lane's id of its first block's node: the lane hands ids out in the order it makes
    /// nodes (reusing freed ones), so chains dumped in the order of this id are stored again
    /// about in the order the lane first stored them.
    first_node: NodeId,
}

/// Events that rebuild `workers` (each worker's blocks, by the lane's tree `trie`): every
/// worker's chains ([`dump_worker`]), merged across workers in the order of their first
/// nodes, each worker's own order kept.
///
/// Rebuilt in this order, a lane stores a chain that several workers hold for the first of
/// them and then adds the others, at about the point where the dumped lane first made it, so
/// its runs are made whole and laid out in memory about as they first were. The soak's rebuilt
/// pools answer as fast as the pools they were dumped from, or faster. Chains cut in the order
/// of their engine hashes and dumped worker after worker took three to four times as many
/// events and twice as long to apply, made runs piecemeal for each later worker to split, and
/// answered up to 12% slower.
pub(crate) fn dump_lane<'a>(
    workers: impl Iterator<Item = (&'a Worker, &'a HeldBlocks)>,
    trie: &LaneTrie,
    guard: &Guard,
) -> Vec<RouterEvent> {
    let mut events = Vec::new();
    let mut sorted: Vec<_> = workers.collect();
    sorted.sort_unstable_by_key(|&(worker, _)| *worker);
    let mut chains: Vec<(Worker, VecDeque<DumpedChain>)> = Vec::with_capacity(sorted.len());
    for (&worker, held) in sorted {
        if held.len() == 0 {
            // A worker that holds nothing is still known to the lane.
            events.push(RouterEvent::stored(worker, 0, None, Vec::new()));
        }
        chains.push((worker, dump_worker(held, trie, guard).into()));
    }
    // The next chain of every worker that has one, smallest first node on top.
    let mut next: BinaryHeap<Reverse<(NodeId, usize)>> = chains
        .iter()
        .enumerate()
        .filter_map(|(at, (_, left))| Some(Reverse((left.front()?.first_node, at))))
        .collect();
    while let Some(Reverse((_, at))) = next.pop() {
        let (worker, left) = &mut chains[at];
        let Some(chain) = left.pop_front() else { continue };
        events.push(RouterEvent::stored(*worker, 0, chain.parent, chain.blocks));
        if !chain.placeholders.is_empty() {
            events.push(RouterEvent::removed(*worker, 0, chain.placeholders));
        }
        if let Some(following) = left.front() {
            next.push(Reverse((following.first_node, at)));
        }
    }
    events
}

/// The chains that rebuild `held`, in an order where every chain comes after the chain it hangs
/// from, and otherwise in the order of their first nodes.
///
/// One chain per leaf of what the worker holds (a block with nothing it holds below it), cut
/// from the leaf up to an ancestor an earlier chain has (or the root), leaves taken in the
/// order of their nodes' ids: each chain as long as it can be.
///
/// Ancestors the worker no longer holds (it removed them and kept descendants, as engines do)
/// are still nodes of the tree while those descendants live; they come back as placeholder
/// blocks with engine hashes the worker does not use.
fn dump_worker(held: &HeldBlocks, trie: &LaneTrie, guard: &Guard) -> Vec<DumpedChain> {
    let name: U64Map<u64> = held.iter(trie).map(|(hash, node)| (u64::from(node), hash)).collect();
    // The chain each block already cut is in.
    let mut cut: U64Map<usize> = U64Map::default();
    let mut chains = Vec::new();
    // Per chain, the chain it hangs from.
    let mut hangs_from: Vec<Option<usize>> = Vec::new();
    let mut next_placeholder = 0u64;
    // The nodes with a block the worker holds below them.
    let mut above: U64Map<()> = U64Map::default();
    for &node in name.keys() {
        let mut up = trie.parent(node as NodeId);
        while let Some(node) = up {
            if above.insert(u64::from(node), ()).is_some() {
                break;
            }
            up = trie.parent(node);
        }
    }
    let mut leaves: Vec<(u64, NodeId)> = name
        .iter()
        .filter(|&(node, _)| !above.contains_key(node))
        .map(|(&node, &hash)| (hash, node as NodeId))
        .collect();
    leaves.sort_unstable_by_key(|&(_, node)| node);
    for (hash, node) in leaves {
        // From the block up to an ancestor that is cut already (or the root).
        let mut chain = vec![(SequenceHash(hash), node, true)];
        let mut parent = trie.parent(node);
        let anchor = loop {
            let Some(up) = parent else { break None };
            if let Some(&from) = cut.get(&u64::from(up)) {
                break Some((SequenceHash(name[&u64::from(up)]), from));
            }
            match name.get(&u64::from(up)) {
                Some(&held_name) => chain.push((SequenceHash(held_name), up, true)),
                None => {
                    while held.get(next_placeholder, trie).is_some() {
                        next_placeholder += 1;
                    }
                    chain.push((SequenceHash(next_placeholder), up, false));
                    next_placeholder += 1;
                }
            }
            parent = trie.parent(up);
        };
        chain.reverse();
        let at = chains.len();
        let mut placeholders = Vec::new();
        let blocks = chain
            .iter()
            .map(|&(hash, node, named)| {
                if named {
                    cut.insert(u64::from(node), at);
                } else {
                    placeholders.push(hash);
                }
                StoredBlock { local: trie.local(node, guard), hash }
            })
            .collect();
        chains.push(DumpedChain {
            parent: anchor.map(|(hash, _)| hash),
            blocks,
            placeholders,
            first_node: chain[0].1,
        });
        hangs_from.push(anchor.map(|(_, from)| from));
    }
    // Each chain once the one it hangs from is out, the smallest first node first.
    let mut below: Vec<Vec<usize>> = vec![Vec::new(); chains.len()];
    let mut ready = BinaryHeap::new();
    for (at, from) in hangs_from.into_iter().enumerate() {
        match from {
            Some(from) => below[from].push(at),
            None => ready.push(Reverse((chains[at].first_node, at))),
        }
    }
    let mut order = Vec::with_capacity(chains.len());
    while let Some(Reverse((_, at))) = ready.pop() {
        ready.extend(below[at].iter().map(|&child| Reverse((chains[child].first_node, child))));
        order.push(at);
    }
    let mut chains: Vec<Option<DumpedChain>> = chains.into_iter().map(Some).collect();
    order.into_iter().filter_map(|at| chains[at].take()).collect()
}
