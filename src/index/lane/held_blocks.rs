//! [`HeldBlocks`]: one worker's blocks, found by the engine hash (name) the worker gave them.
//!
//! Each node records the name its first holder gave it ([`LaneTrie::name`]). A worker's entries
//! under that name, the usual case (one holder, or engines that agree on names), go in a
//! [`TagMap`] of 8-byte slots that confirms a match against the node's own record; entries
//! under any other name (engines with per-worker hash seeds naming a shared prefix) and the
//! rare entry the tag map spills go in a [`ProbeMap`] keyed by the full name. Both find names
//! through the pool's secret [`Mixer`] (engines' hashes are chosen by whoever sends events).

use crate::index::lane::lane_trie::LaneTrie;
use crate::index::lane::node_ids::NodeId;
use crate::index::lane::probe_map::ProbeMap;
use crate::index::lane::tag_map::TagMap;
use crate::mix::Mixer;

/// See the [module docs](self).
#[derive(Clone, Debug)]
pub(crate) struct HeldBlocks {
    /// Entries under their node's recorded name.
    tagged: TagMap,
    /// Entries under other names, by name.
    named: ProbeMap,
    mixer: Mixer,
}

impl HeldBlocks {
    /// No blocks; names are found through `mixer`.
    pub(crate) fn new(mixer: Mixer) -> Self {
        Self { tagged: TagMap::default(), named: ProbeMap::new(mixer), mixer }
    }

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
        self.tagged.prefetch(self.mixer.mix(name));
    }

    /// The node this worker named `name`.
    pub(crate) fn get(&self, name: u64, trie: &LaneTrie) -> Option<NodeId> {
        let tagged = self.tagged.get(self.mixer.mix(name), |node| trie.name(node) == name);
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
        let mixed = self.mixer.mix(name);
        if trie.name(node) != name {
            let existing = self.tagged.get(mixed, is_named);
            if existing.is_none() {
                self.named.insert_or_get(name, node);
            }
            return existing;
        }
        let existing = self.tagged.insert_or_get(mixed, node, is_named);
        self.take_spilled(trie);
        existing
    }

    /// Forgets the name `name`; returns the node it named.
    #[inline(always)] // One caller in the lane's hot loop: a call there costs ~20 instructions.
    pub(crate) fn remove(&mut self, name: u64, trie: &LaneTrie) -> Option<NodeId> {
        let tagged = self.tagged.remove(self.mixer.mix(name), |node| trie.name(node) == name);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::index::runs::run_table::RunTableWriter;

    /// Names that all shared one tag (and one probe-map home) under the fixed mixer the worker
    /// maps used before pools had their own: its multiply undone for values with one high half.
    fn crowd(count: u64) -> Vec<u64> {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let inverse =
            (0..6).fold(K, |x: u64, _| x.wrapping_mul(2u64.wrapping_sub(K.wrapping_mul(x))));
        (0..count)
            .map(|i| ((0x1234_5678u64 << 32) | i).wrapping_mul(inverse))
            .map(|x| x ^ (x >> 32))
            .collect()
    }

    /// #18 item 3: engine hashes chosen to share a bucket under a fixed mixer spread under the
    /// pool's secret one: few spill out of the tag map, and all are found.
    #[test]
    fn names_crafted_for_a_fixed_mixer_spread() {
        let mut trie = LaneTrie::new(RunTableWriter::new(Mixer::random()));
        let mut held = HeldBlocks::new(Mixer::random());
        let names = crowd(4000);
        for &name in &names {
            let node = trie.reserve_node(name);
            assert_eq!(held.insert_or_get(name, node, &trie), None);
        }
        assert!(held.named.len() < 40, "{} of {} spilled", held.named.len(), names.len());
        for &name in &names {
            assert!(held.get(name, &trie).is_some());
        }
        assert_eq!(held.len(), names.len());
    }
}
