//! Renumbering after mass removals: once half of a lane's node or run ids are free, the live
//! ones are renumbered densely, so the arenas (and every run's node ids, which become spans)
//! follow the live state instead of its high-water mark.
//!
//! Readers never see node or run ids (they walk the published versions by tail id), so the
//! renumbering changes nothing they load but each version's id, which they do not use. The
//! caller renames the nodes it refers to (its workers' maps) from the returned map.

use super::{LaneTrie, NodePos, ROOT, RunMeta};
use crate::index::lane::chunked::ChunkedVec;
use crate::index::lane::node_ids::{NodeId, NodeIds};
use crate::index::runs::run::RunId;
use crate::sync::Ordering;

impl LaneTrie {
    /// Whether enough nodes or runs are free that [`Self::compact`] pays.
    pub(crate) fn sparse(&self) -> bool {
        let sparse = |free: usize, all: usize| all >= 1024 && free * 2 > all;
        sparse(self.free_nodes.len(), self.nodes.len())
            || sparse(self.free_runs.len(), self.runs.len())
    }

    /// Renumbers the live nodes and runs densely so memory follows the live state after mass
    /// removals. Returns the new id of each old node id (`NodeId::MAX` for free ones): the
    /// caller renames the nodes it refers to.
    pub(crate) fn compact(&mut self) -> Vec<NodeId> {
        let mut node_map = vec![NodeId::MAX; self.nodes.len()];
        let mut runs: ChunkedVec<Option<RunMeta>> = ChunkedVec::default();
        for meta in self.runs.iter_mut() {
            if let Some(meta) = meta.take() {
                runs.push(Some(meta));
            }
        }
        let mut nodes = ChunkedVec::default();
        for (id, meta) in runs.iter_mut().enumerate() {
            let meta = meta.as_mut().expect("compacted runs are live");
            meta.run().id.store(id as RunId, Ordering::Relaxed);
            let first = nodes.len() as NodeId;
            meta.ids.iter().enumerate().for_each(|(offset, node)| {
                let name = self.nodes[node as usize].name;
                node_map[node as usize] = nodes.len() as NodeId;
                nodes.push(NodePos { run: id as RunId, offset: offset as u32, name });
            });
            // Renumbered in order: every run's ids are a span now.
            meta.ids = NodeIds::Span { first, len: meta.ids.len() as u32 };
        }
        // Parents by their new ids, now that every node has one; children by their new ids.
        let mut parents = Vec::with_capacity(runs.len());
        for meta in runs.iter_mut().flatten() {
            meta.child_xor = 0;
            if meta.parent != ROOT {
                meta.parent = node_map[meta.parent as usize];
                parents.push(nodes[meta.parent as usize].run);
            } else {
                parents.push(RunId::MAX);
            }
        }
        for (child, &parent) in parents.iter().enumerate() {
            if parent != RunId::MAX {
                runs[parent as usize].as_mut().expect("live parent").child_xor ^= child as RunId;
            }
        }
        self.runs = runs;
        self.nodes = nodes;
        self.free_runs = Vec::new();
        self.free_nodes = Vec::new();
        // Every run's ids are a span now, with no list on the heap.
        self.run_bytes = self.walked_run_bytes();
        node_map
    }
}
