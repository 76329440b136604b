//! The `Stored` events that rebuild one worker's blocks, from its names and the lane's tree.

use crate::event::{SequenceHash, StoredBlock};
use crate::index::lane::held_blocks::HeldBlocks;
use crate::index::lane::lane_trie::LaneTrie;
use crate::index::lane::node_ids::NodeId;
use crate::sync::epoch::Guard;
use crate::u64_map::U64Map;

/// One dumped chain: the parent's engine hash, the blocks, and the engine hashes among them that
/// are placeholders (to be removed right after).
pub(crate) type DumpedChain = (Option<SequenceHash>, Vec<StoredBlock>, Vec<SequenceHash>);

/// The chains that rebuild `held` in an order where every parent comes before its children.
///
/// Ancestors the worker no longer holds (it removed them and kept descendants, as engines do)
/// are still nodes of the tree while those descendants live; they come back as placeholder
/// blocks with engine hashes the worker does not use.
pub(crate) fn dump_worker(held: &HeldBlocks, trie: &LaneTrie, guard: &Guard) -> Vec<DumpedChain> {
    let name: U64Map<u64> = held.iter(trie).map(|(hash, node)| (u64::from(node), hash)).collect();
    let mut done: U64Map<()> = U64Map::default();
    let mut out = Vec::new();
    let mut next_placeholder = 0u64;
    let mut sorted: Vec<(u64, NodeId)> = held.iter(trie).collect();
    sorted.sort_unstable_by_key(|&(hash, _)| hash);
    for (hash, node) in sorted {
        if done.contains_key(&u64::from(node)) {
            continue;
        }
        // From the block up to an ancestor that is dumped already (or the root).
        let mut chain = vec![(SequenceHash(hash), node, true)];
        let mut parent = trie.parent(node);
        let anchor = loop {
            let Some(up) = parent else { break None };
            if done.contains_key(&u64::from(up)) {
                break Some(SequenceHash(name[&u64::from(up)]));
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
        let mut placeholders = Vec::new();
        let blocks = chain
            .iter()
            .map(|&(hash, node, named)| {
                if named {
                    done.insert(u64::from(node), ());
                } else {
                    placeholders.push(hash);
                }
                StoredBlock { local: trie.local(node, guard), hash }
            })
            .collect();
        out.push((anchor, blocks, placeholders));
    }
    out
}
