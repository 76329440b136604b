//! [`HeldBlocks`]: one worker's blocks, found by the engine hash (name) the worker gave them.
//!
//! Each node records the name its first holder gave it ([`LaneTrie::name`]). A worker's entries
//! under that name, the usual case (one holder, or engines that agree on names), go in a
//! [`TagMap`] of 8-byte slots that confirms a match against the node's own record; entries
//! under any other name (engines with per-worker hash seeds naming a shared prefix) and the
//! rare entry the tag map spills go in a [`ProbeMap`] keyed by the full name.

use crate::index::lane_trie::{LaneTrie, NodeId};
use crate::index::probe_map::ProbeMap;
use crate::index::tag_map::TagMap;

/// See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub(crate) struct HeldBlocks {
    /// Entries under their node's recorded name.
    tagged: TagMap,
    /// Entries under other names, by name.
    named: ProbeMap,
}

impl HeldBlocks {
    pub(crate) fn len(&self) -> usize {
        self.tagged.len() + self.named.len()
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.tagged.bytes() + self.named.bytes()
    }

    /// Asks the processor to start loading where `name` would be.
    #[inline]
    pub(crate) fn prefetch(&self, name: u64) {
        self.tagged.prefetch(name);
    }

    /// The node this worker named `name`.
    pub(crate) fn get(&self, name: u64, trie: &LaneTrie) -> Option<NodeId> {
        let tagged = self.tagged.get(name, |node| trie.name(node) == name);
        tagged.or_else(|| self.named.get(name))
    }

    /// The node this worker named `name`; if there is none, records that it names `node` so.
    #[inline]
    pub(crate) fn insert_or_get(
        &mut self,
        name: u64,
        node: NodeId,
        trie: &LaneTrie,
    ) -> Option<NodeId> {
        if self.named.len() > 0
            && let Some(existing) = self.named.get(name)
        {
            return Some(existing);
        }
        let is_named = |node| trie.name(node) == name;
        if trie.name(node) != name {
            let existing = self.tagged.get(name, is_named);
            if existing.is_none() {
                self.named.insert_or_get(name, node);
            }
            return existing;
        }
        let existing = self.tagged.insert_or_get(name, node, is_named);
        self.take_spilled(trie);
        existing
    }

    /// Forgets the name `name`; returns the node it named.
    #[inline(always)] // One caller in the lane's hot loop: a call there costs ~20 instructions.
    pub(crate) fn remove(&mut self, name: u64, trie: &LaneTrie) -> Option<NodeId> {
        let tagged = self.tagged.remove(name, |node| trie.name(node) == name);
        // Shrinking the tag map may have spilled entries too.
        self.take_spilled(trie);
        match tagged {
            Some(node) => Some(node),
            None if self.named.len() > 0 => self.named.remove(name),
            None => None,
        }
    }

    /// Moves what the tag map handed back to the keyed map, so no entry is ever out of both.
    #[inline]
    fn take_spilled(&mut self, trie: &LaneTrie) {
        while let Some(left) = self.tagged.take_spilled() {
            self.named.insert_or_get(trie.name(left), left);
        }
    }

    /// Every (name, node), in no particular order.
    pub(crate) fn iter<'a>(
        &'a self,
        trie: &'a LaneTrie,
    ) -> impl Iterator<Item = (u64, NodeId)> + 'a {
        let tagged = self.tagged.nodes().map(|node| (trie.name(node), node));
        tagged.chain(self.named.iter())
    }

    /// Every node, in no particular order.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.tagged.nodes().chain(self.named.iter().map(|(_, node)| node))
    }

    /// Every node, to rewrite in place when the trie renumbers them (names move with nodes).
    pub(crate) fn nodes_mut(&mut self) -> impl Iterator<Item = &mut NodeId> + '_ {
        self.tagged.nodes_mut().chain(self.named.values_mut())
    }
}
