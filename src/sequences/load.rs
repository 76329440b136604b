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
///
/// Slots hold positions in the caller's scores, not the scores themselves: a table for up to 64
/// scored workers is 128 bytes on the stack, where one of `(worker, depth)` pairs was 3 KiB to
/// clear and move on every query (a fifth of a warm query's time).
pub(crate) struct OverlapTable<'a> {
    scores: &'a [(Worker, u32)],
    slots: Slots,
    mask: usize,
}

/// Slots kept inline: enough for 64 scored workers at half load, with no allocation. Queries run
/// beside writers that free into the same allocator arena, and an arena-locked `malloc` per
/// query showed up in the query's tail latency.
const INLINE: usize = 128;

/// Per slot, 1 + the position of its entry in the scores, or 0 when free. Positions of an inline
/// table are below `INLINE / 2`, so they fit a byte.
enum Slots {
    Inline([u8; INLINE]),
    Heap(Vec<u32>),
}

fn mix(worker: Worker) -> usize {
    super::worker_hash(worker) as usize
}

impl<'a> OverlapTable<'a> {
    /// The table of `scores` (workers with a zero overlap need no entry; of a worker given
    /// twice, the later depth counts).
    pub(crate) fn new(scores: &'a OverlapScores) -> Self {
        let scores = scores.as_slice();
        let capacity = (scores.len() * 2).next_power_of_two().max(2);
        let mut table = Self {
            scores,
            slots: if capacity <= INLINE {
                Slots::Inline([0; INLINE])
            } else {
                Slots::Heap(vec![0; capacity])
            },
            mask: capacity - 1,
        };
        for (position, &(worker, depth)) in scores.iter().enumerate() {
            if depth == 0 {
                continue;
            }
            let mut at = mix(worker) & table.mask;
            loop {
                match table.slot(at) {
                    Some((key, _)) if key != worker => at = (at + 1) & table.mask,
                    _ => break,
                }
            }
            match &mut table.slots {
                // Below `INLINE / 2`: an inline table has at most that many scores.
                Slots::Inline(slots) => slots[at] = position as u8 + 1,
                Slots::Heap(slots) => {
                    slots[at] = u32::try_from(position + 1).expect("fewer than 2^32 scores")
                }
            }
        }
        table
    }

    /// The entry in slot `at`, if any.
    #[inline]
    fn slot(&self, at: usize) -> Option<(Worker, u32)> {
        let position = match &self.slots {
            Slots::Inline(slots) => slots[at] as usize,
            Slots::Heap(slots) => slots[at] as usize,
        };
        position.checked_sub(1).map(|position| self.scores[position])
    }

    /// The overlap of `worker`, 0 if absent.
    #[inline]
    pub(crate) fn get(&self, worker: Worker) -> u32 {
        let mut at = mix(worker) & self.mask;
        loop {
            match self.slot(at) {
                None => return 0,
                Some((key, depth)) if key == worker => return depth,
                Some(_) => at = (at + 1) & self.mask,
            }
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
    fn a_worker_given_twice_counts_its_later_depth() {
        let scores = OverlapScores::from_pairs(vec![
            (Worker::new(1, 0), 3),
            (Worker::new(2, 0), 4),
            (Worker::new(1, 0), 7),
        ]);
        let table = OverlapTable::new(&scores);
        assert_eq!(table.get(Worker::new(1, 0)), 7);
        assert_eq!(table.get(Worker::new(2, 0)), 4);
        assert_eq!(table.get(Worker::new(1, 1)), 0);
    }

    #[test]
    fn a_table_too_big_to_keep_inline_works_the_same() {
        let pairs: Vec<(Worker, u32)> =
            (0..300).map(|i| (Worker::new(i, 1), i as u32 + 1)).collect();
        let scores = OverlapScores::from_pairs(pairs.clone());
        let table = OverlapTable::new(&scores);
        assert!(matches!(table.slots, Slots::Heap(_)));
        for &(worker, depth) in &pairs {
            assert_eq!(table.get(worker), depth);
        }
        assert_eq!(table.get(Worker::new(0, 0)), 0);
    }
}
