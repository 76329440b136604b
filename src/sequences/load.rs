//! What the trackers report: each worker's load now, and its load if a candidate were added.

use crate::event::Worker;
use crate::scores::OverlapScores;

/// One worker's load now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WorkerLoad {
    /// The worker.
    pub worker: Worker,
    /// Blocks pinned by its requests in flight, shared prefixes counted once, decoded blocks
    /// included.
    pub active_blocks: usize,
    /// Prefill tokens it still has to compute (`usize::MAX` if more).
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
    /// (`isl - overlap * block_size`, at least 0), saturating at `usize::MAX`.
    pub potential_tokens: usize,
    /// Prefill tokens it has to compute now, before the candidate.
    pub active_tokens: usize,
    /// Leading blocks of the candidate in its KV cache, as given by the caller's overlaps.
    pub overlap_blocks: u32,
    /// Requests in flight now.
    pub active_requests: usize,
}

/// Per worker, the prefix overlap a candidate has with the worker's KV cache (in blocks), as a
/// small open-addressing table built once per query: `O(1)` per worker, where
/// [`OverlapScores::get`] is a scan.
pub(crate) struct OverlapTable {
    slots: Slots,
    mask: usize,
}

/// Entries kept inline: a table for up to 64 scored workers needs no allocation. Queries run
/// beside writers that free into the same allocator arena, and an arena-locked `malloc` per
/// query showed up in the query's tail latency.
const INLINE: usize = 128;

#[allow(clippy::large_enum_variant)] // Lives on the stack for one query; inline is the point.
enum Slots {
    Inline([(Worker, u32); INLINE]),
    Heap(Vec<(Worker, u32)>),
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
        let slots = if capacity <= INLINE {
            Slots::Inline([EMPTY; INLINE])
        } else {
            Slots::Heap(vec![EMPTY; capacity])
        };
        let mut table = Self { slots, mask: capacity - 1 };
        for (worker, depth) in scores.iter().filter(|&(_, depth)| depth > 0) {
            let mut at = mix(worker) & table.mask;
            loop {
                let slot = &mut table.slots_mut()[at];
                if slot.1 == 0 || slot.0 == worker {
                    *slot = (worker, depth);
                    break;
                }
                at = (at + 1) & table.mask;
            }
        }
        table
    }

    fn slots(&self) -> &[(Worker, u32)] {
        match &self.slots {
            Slots::Inline(slots) => slots,
            Slots::Heap(slots) => slots,
        }
    }

    fn slots_mut(&mut self) -> &mut [(Worker, u32)] {
        match &mut self.slots {
            Slots::Inline(slots) => slots,
            Slots::Heap(slots) => slots,
        }
    }

    /// The overlap of `worker`, 0 if absent.
    pub(crate) fn get(&self, worker: Worker) -> u32 {
        let mut at = mix(worker) & self.mask;
        loop {
            let (key, depth) = self.slots()[at];
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

    #[test]
    fn a_table_too_big_to_keep_inline_works_the_same() {
        let pairs: Vec<(Worker, u32)> =
            (0..300).map(|i| (Worker::new(i, 1), i as u32 + 1)).collect();
        let table = OverlapTable::new(&OverlapScores::from_pairs(pairs.clone()));
        assert!(matches!(table.slots, Slots::Heap(_)));
        for &(worker, depth) in &pairs {
            assert_eq!(table.get(worker), depth);
        }
        assert_eq!(table.get(Worker::new(0, 0)), 0);
    }
}
