//! What the trackers report: each worker's load now, and its load if a candidate were added.

use crate::event::Worker;
use crate::index::OverlapScores;

/// One worker's load now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WorkerLoad {
    /// The worker.
    pub worker: Worker,
    /// Blocks pinned by its requests in flight, shared prefixes counted once, decoded blocks
    /// included.
    pub active_blocks: usize,
    /// Prefill tokens it still has to compute.
    pub active_tokens: usize,
    /// Requests in flight.
    pub active_requests: usize,
}

/// One worker's load if a candidate request were sent to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PotentialLoad {
    /// The worker.
    pub worker: Worker,
    /// Its active blocks plus the candidate's blocks it does not pin yet.
    pub potential_blocks: usize,
    /// Its active prefill tokens plus the candidate's tokens beyond the worker's cached prefix
    /// (`isl - overlap * block_size`, at least 0).
    pub potential_tokens: usize,
    /// Requests in flight now.
    pub active_requests: usize,
}

/// Per worker, the prefix overlap a candidate has with the worker's KV cache (in blocks), as a
/// small open-addressing table built once per query: `O(1)` per worker, where
/// [`OverlapScores::get`] is a scan.
pub(crate) struct OverlapTable {
    slots: Vec<(Worker, u32)>,
    mask: usize,
}

/// A marker no real entry uses: overlaps of 0 are never stored.
const EMPTY: (Worker, u32) = (Worker::new(0, 0), 0);

fn mix(worker: Worker) -> usize {
    super::worker_hash(worker) as usize
}

impl OverlapTable {
    /// The table of `scores` (workers with a zero overlap need no entry).
    pub(crate) fn new(scores: &OverlapScores) -> Self {
        let capacity = (scores.len() * 2).next_power_of_two().max(2);
        let mut table = Self { slots: vec![EMPTY; capacity], mask: capacity - 1 };
        for (worker, depth) in scores.iter().filter(|&(_, depth)| depth > 0) {
            let mut at = mix(worker) & table.mask;
            loop {
                let slot = &mut table.slots[at];
                if slot.1 == 0 || slot.0 == worker {
                    *slot = (worker, depth);
                    break;
                }
                at = (at + 1) & table.mask;
            }
        }
        table
    }

    /// The overlap of `worker`, 0 if absent.
    pub(crate) fn get(&self, worker: Worker) -> u32 {
        let mut at = mix(worker) & self.mask;
        loop {
            let (key, depth) = self.slots[at];
            if depth == 0 {
                return 0;
            }
            if key == worker {
                return depth;
            }
            at = (at + 1) & self.mask;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn overlap_table_finds_every_worker_and_defaults_to_zero() {
        let pairs: Vec<(Worker, u32)> =
            (0..40).map(|i| (Worker::new(i / 3, (i % 3) as u32), (i as u32 % 7) + 1)).collect();
        let scores = OverlapScores::from_pairs(pairs.clone());
        let table = OverlapTable::new(&scores);
        for &(worker, depth) in &pairs {
            assert_eq!(table.get(worker), depth);
        }
        assert_eq!(table.get(Worker::new(999, 0)), 0);
        assert_eq!(OverlapTable::new(&OverlapScores::new()).get(Worker::new(0, 0)), 0);
    }
}
