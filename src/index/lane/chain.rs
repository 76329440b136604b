//! [`Chain`]: how a lane checks a `Stored` event's chain against its tree and the worker's
//! names before anything changes, and what it learns for the change.
//!
//! The check walks the chain down the tree from its parent ([`LaneTrie::step`]) while blocks
//! exist, reserves node ids for the rest, and enters every name new to the worker in its map as
//! it goes (which also catches one new name used twice). It either accepts the whole chain,
//! leaving what [`LaneTrie::add_holder`] and [`LaneTrie::append`] need, or rejects it and undoes
//! what it entered, so a rejected event changes nothing. The buffers are the lane's, reused
//! from event to event.

use crate::event::{SequenceHash, StoredBlock, Worker};
use crate::index::lane::held_blocks::HeldBlocks;
use crate::index::lane::lane_trie::{LaneTrie, shed};
use crate::index::lane::node_ids::NodeId;
use crate::sync::epoch::Guard;

/// How many blocks ahead of the one being checked the worker map's buckets are prefetched: the
/// lookups of an event are independent, and asking for their lines early overlaps the misses a
/// little more than the processor does on its own (about 5% at `--dup 4` on the ingest tool).
pub(crate) const PREFETCH_AHEAD: usize = 8;

/// What checking a chain found (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct Chain {
    /// Existing nodes the worker will newly hold.
    path: Vec<NodeId>,
    /// Node ids reserved for the blocks with no node yet, and their content hashes.
    reserved: Vec<NodeId>,
    appended: Vec<u64>,
    /// The last existing node of the chain (the root if `None`), where the new blocks hang.
    last_existing: Option<NodeId>,
    /// The engine hashes the chain gives existing nodes that are new to the worker.
    fresh: Vec<u64>,
}

impl Chain {
    /// Checks `blocks`, below `start` (the root if `None`), against `trie` and the names
    /// `worker` gave in `held`. On a conflict the names entered are taken out again, the
    /// reserved ids given back, and the first offending engine hash returned.
    #[inline]
    pub(crate) fn check(
        &mut self,
        (worker, held): (Worker, &mut HeldBlocks),
        trie: &mut LaneTrie,
        start: Option<NodeId>,
        blocks: &[StoredBlock],
        guard: &Guard,
    ) -> Result<(), SequenceHash> {
        self.path.clear();
        self.fresh.clear();
        self.appended.clear();
        self.reserved.clear();
        let mut at = trie.cursor(worker, start, guard);
        // Blocks from this index on have no node yet (once one has none, neither has its child).
        let mut new_from = blocks.len();
        let mut rejected = None;
        for (index, block) in blocks.iter().enumerate() {
            if let Some(ahead) = blocks.get(index + PREFETCH_AHEAD) {
                held.prefetch(ahead.hash.0);
            }
            let next = match index < new_from {
                true => trie.step(&mut at, block.local.0, guard),
                false => None,
            };
            let node = match next {
                Some(node) => node,
                None => {
                    new_from = new_from.min(index);
                    let node = trie.reserve_node(block.hash.0);
                    self.reserved.push(node);
                    node
                }
            };
            let ok = match (held.insert_or_get(block.hash.0, node, trie), next) {
                // Storing a block twice is a no-op; one name for two blocks is a conflict.
                (Some(existing), _) => Some(existing) == next,
                // A new node's name (on a conflict, taken out again by position).
                (None, None) => true,
                // An existing node's new name; not one block under two names.
                (None, Some(node)) => {
                    self.fresh.push(block.hash.0);
                    let named_before = trie.holds_at(&mut at);
                    if !named_before {
                        self.path.push(node);
                    }
                    !named_before
                }
            };
            if !ok {
                rejected = Some(index);
                break;
            }
        }
        self.last_existing = at.node();
        match rejected {
            None => {
                self.appended.extend(blocks[new_from..].iter().map(|block| block.local.0));
                Ok(())
            }
            Some(index) => {
                // The names entered: the existing nodes' (`fresh`), and every new node's before
                // the conflict (each was new to the worker, or the conflict would be there).
                let new_names = blocks[new_from.min(index)..index].iter().map(|b| b.hash.0);
                for hash in self.fresh.iter().copied().chain(new_names) {
                    held.remove(hash, trie);
                }
                trie.unreserve(&self.reserved);
                Err(blocks[index].hash)
            }
        }
    }

    /// Stores the chain [`Self::check`] accepted: `worker` newly holds its existing nodes, and
    /// its new blocks hang below the last of them.
    pub(crate) fn apply(&self, worker: Worker, trie: &mut LaneTrie, guard: &Guard) {
        trie.add_holder(worker, &self.path, guard);
        trie.append(worker, self.last_existing, &self.appended, &self.reserved, guard);
    }

    /// Gives back the memory an unusually large chain grew.
    pub(crate) fn shed(&mut self) {
        shed(&mut self.path);
        shed(&mut self.reserved);
        shed(&mut self.fresh);
        shed(&mut self.appended);
    }
}
