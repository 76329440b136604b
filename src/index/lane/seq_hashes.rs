//! [`SeqHashes`]: our sequence hashes of a lane's nodes, for snapshots. Nothing on the event or
//! query path needs them (runs are keyed by where they hang, see [`crate::index::runs::run`]), so
//! they are computed on demand from the trie's content hashes, a run at a time.

use std::collections::HashMap;

use crate::event::{LocalBlockHash, SequenceHash};
use crate::hash::next_sequence_hash;
use crate::index::lane::lane_trie::LaneTrie;
use crate::index::lane::node_ids::NodeId;
use crate::index::runs::run::RunId;
use crate::sync::epoch::Guard;

/// Our sequence hashes of a trie's nodes, computed from the roots
/// down a run at a time and kept per run, so a snapshot hashes each block once.
pub(crate) struct SeqHashes<'a> {
    trie: &'a LaneTrie,
    guard: &'a Guard,
    runs: HashMap<RunId, Vec<u64>>,
}

impl<'a> SeqHashes<'a> {
    pub(crate) fn new(trie: &'a LaneTrie, guard: &'a Guard) -> Self {
        Self { trie, guard, runs: HashMap::new() }
    }

    /// Our sequence hash of `node`.
    pub(crate) fn seq(&mut self, node: NodeId) -> SequenceHash {
        let (run, offset) = self.trie.position(node);
        self.hash_run(run);
        SequenceHash(self.runs[&run][offset])
    }

    /// Hashes `run` and the ancestors not hashed yet, from the highest down.
    fn hash_run(&mut self, run: RunId) {
        let trie = self.trie;
        let mut pending = Vec::new();
        let mut up = Some(run);
        while let Some(at) = up
            && !self.runs.contains_key(&at)
        {
            pending.push(at);
            up = trie.parent_run(at);
        }
        for run in pending.into_iter().rev() {
            let mut seq = trie
                .parent_run(run)
                .map(|parent| SequenceHash(*self.runs[&parent].last().expect("non-empty")));
            let seqs = trie.state(run, self.guard).locals().iter().map(|&local| {
                let next = next_sequence_hash(seq, LocalBlockHash(local));
                seq = Some(next);
                next.0
            });
            let seqs = seqs.collect();
            self.runs.insert(run, seqs);
        }
    }
}
