//! [`Shard`]: the requests in flight on a group of workers and the blocks they pin.
//!
//! A shard is single-threaded state; [`super::ActiveSequences`] owns one shard with one worker,
//! and [`super::MultiWorkerSequences`] keeps a power-of-two number of them behind locks.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::RequestId;
use super::load::{PotentialLoad, WorkerLoad};
use super::owners::Slot;
use super::requests::{Record, RecordId, RequestTable};
use super::trie::{BlockTrie, LeafEdge};
use crate::event::{SequenceHash, Worker};

/// Workers a query keeps depths for on the stack (as `u32`, 1 KiB): those of every shard walked
/// in step, or of one shard read alone. 256 workers in 2 shards, or 64 in each of 4, still walk
/// together.
const ON_STACK: usize = 256;

/// Shards [`Shard::potential_loads_together`] walks in step.
pub(crate) const TOGETHER: usize = 4;

/// One worker's requests and load.
#[derive(Debug)]
pub(crate) struct WorkerState {
    worker: Worker,
    requests: RequestTable,
    active_blocks: usize,
    /// Summed wide: requests' token counts are the caller's `isl`s, any `usize` each, and a
    /// sum that wrapped would turn a huge load into a small one. No sum of `usize`s a worker
    /// can hold reaches `u128::MAX`, so adds and removals stay exact; reports saturate.
    active_tokens: u128,
}

impl WorkerState {
    fn active_tokens(&self) -> usize {
        usize::try_from(self.active_tokens).unwrap_or(usize::MAX)
    }

    fn load(&self) -> WorkerLoad {
        WorkerLoad {
            worker: self.worker,
            active_blocks: self.active_blocks,
            active_tokens: self.active_tokens(),
            active_requests: self.requests.len(),
        }
    }
}

/// What an all-worker query reads of one worker, packed into 40 bytes: a query over a shard
/// reads one short array instead of every worker's whole state (≈100 bytes, of which it needs
/// four fields), so a query that finds the shard out of cache misses half as many lines. Kept
/// equal to the worker's state by every change ([`Shard::sync`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Figures {
    worker: Worker,
    active_blocks: usize,
    /// The state's exact sum, saturated as reports are.
    active_tokens: usize,
    /// A worker's requests are counted in `u32` slots ([`RequestTable`]), so this is exact.
    active_requests: u32,
    live: bool,
}

impl Figures {
    const VACANT: Self = Self {
        worker: Worker::new(0, 0),
        active_blocks: 0,
        active_tokens: 0,
        active_requests: 0,
        live: false,
    };

    fn of(state: &WorkerState) -> Self {
        Self {
            worker: state.worker,
            active_blocks: state.active_blocks,
            active_tokens: state.active_tokens(),
            active_requests: u32::try_from(state.requests.len()).unwrap_or(u32::MAX),
            live: true,
        }
    }
}

/// The state of a group of workers: one [`BlockTrie`] of their pinned blocks, and per worker
/// (in a stable slot) its requests and load counters, with the counters a query reads packed
/// beside them (`figures`, by the same slot).
#[derive(Debug, Default)]
pub(crate) struct Shard {
    trie: BlockTrie,
    slots: Vec<Option<WorkerState>>,
    figures: Vec<Figures>,
    slot_of: HashMap<Worker, Slot, ahash::RandomState>,
    vacant: Vec<Slot>,
}

impl Shard {
    /// The slot of `worker`, if tracked here.
    pub(crate) fn slot_of(&self, worker: Worker) -> Option<Slot> {
        self.slot_of.get(&worker).copied()
    }

    fn state(&self, slot: Slot) -> Option<&WorkerState> {
        self.slots.get(slot as usize)?.as_ref()
    }

    fn state_mut(&mut self, slot: Slot) -> Option<&mut WorkerState> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    /// Copies the counters of the worker in `slot` (or its absence) into `figures`: called by
    /// every change to a worker's state.
    fn sync(&mut self, slot: Slot) {
        let figures = self.state(slot).map_or(Figures::VACANT, Figures::of);
        let at = slot as usize;
        if at >= self.figures.len() {
            self.figures.resize(at + 1, Figures::VACANT);
        }
        self.figures[at] = figures;
    }

    /// The worker in `slot`.
    pub(crate) fn worker(&self, slot: Slot) -> Option<Worker> {
        self.state(slot).map(|state| state.worker)
    }

    /// Starts tracking `worker` (no-op if tracked); returns its slot and whether it is new.
    pub(crate) fn add_worker(&mut self, worker: Worker) -> (Slot, bool) {
        if let Some(slot) = self.slot_of(worker) {
            return (slot, false);
        }
        let state = WorkerState {
            worker,
            requests: RequestTable::default(),
            active_blocks: 0,
            active_tokens: 0,
        };
        let slot = match self.vacant.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(state);
                slot
            }
            None => {
                let slot = Slot::try_from(self.slots.len()).expect("more than u32::MAX workers");
                self.slots.push(Some(state));
                slot
            }
        };
        self.slot_of.insert(worker, slot);
        self.sync(slot);
        (slot, true)
    }

    /// Stops tracking `worker`, dropping its requests; returns them oldest first, or `None` if
    /// the worker was not tracked.
    pub(crate) fn remove_worker(&mut self, worker: Worker) -> Option<Vec<RequestId>> {
        let slot = self.slot_of.remove(&worker)?;
        let state = self.slots.get_mut(slot as usize)?.take()?;
        self.vacant.push(slot);
        self.sync(slot);
        let mut dropped = Vec::with_capacity(state.requests.len());
        for (_, record) in state.requests.iter() {
            self.trie.remove(slot, record.tail);
            dropped.push(record.id.clone());
        }
        Some(dropped)
    }

    /// Every tracked worker.
    pub(crate) fn workers(&self) -> impl Iterator<Item = Worker> + '_ {
        self.slots.iter().flatten().map(|state| state.worker)
    }

    /// How many workers are tracked.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn worker_count(&self) -> usize {
        self.slot_of.len()
    }

    /// Adds a request to the worker in `slot`: pins `blocks` and counts `prefill_tokens`.
    /// Returns `None` (changing nothing) if no worker is in `slot`. A new leaf of the trie takes
    /// `leaf` if it was copied where the leaf starts (see [`LeafEdge`]).
    pub(crate) fn add_request(
        &mut self,
        slot: Slot,
        id: RequestId,
        blocks: &[SequenceHash],
        prefill_tokens: usize,
        now: Instant,
        leaf: &mut Option<LeafEdge>,
    ) -> Option<RecordId> {
        self.state(slot)?;
        let (tail, newly_pinned) = self.trie.insert(slot, blocks, leaf);
        let state = self.state_mut(slot)?;
        state.active_blocks += newly_pinned;
        state.active_tokens += prefill_tokens as u128;
        let record = Record { id, tail, started_at: now, prefill_tokens, output_blocks: 0 };
        let id = state.requests.insert(record);
        self.sync(slot);
        Some(id)
    }

    /// Hands over the trie's retired edges, to be freed after the exclusive lock (see
    /// `BlockTrie::take_retired`).
    pub(crate) fn take_retired(&mut self) -> Vec<Box<[SequenceHash]>> {
        self.trie.take_retired()
    }

    /// Pulls into cache what adding `blocks` to the worker in `slot` will touch, so the
    /// exclusive section that follows (which readers wait for) does not stall on memory.
    /// Returns where the add would start a new leaf of the trie now, to copy a [`LeafEdge`].
    pub(crate) fn warm_add(&self, slot: Slot, blocks: &[SequenceHash]) -> usize {
        let table = self.state(slot).map_or(0, |state| state.requests.warm(None));
        let (touched, leaves_at) = self.trie.warm_insert(blocks);
        std::hint::black_box(table + touched);
        leaves_at
    }

    /// Like [`Self::warm_add`], for a change to (or the removal of) the request in `record`.
    pub(crate) fn warm_request(&self, slot: Slot, record: RecordId) {
        let Some(state) = self.state(slot) else { return };
        let table = state.requests.warm(Some(record));
        let tail = state.requests.get(record).map_or(0, |r| self.trie.warm_remove(r.tail));
        std::hint::black_box(table + tail);
    }

    /// The request in `record` of the worker in `slot`.
    pub(crate) fn record(&self, slot: Slot, record: RecordId) -> Option<&Record> {
        self.state(slot)?.requests.get(record)
    }

    /// Removes the request in `record` of the worker in `slot`, unpinning its blocks and
    /// uncounting its remaining prefill tokens.
    pub(crate) fn free(&mut self, slot: Slot, record: RecordId) -> Option<Record> {
        let removed = self.state_mut(slot)?.requests.remove(record)?;
        let unpinned = self.trie.remove(slot, removed.tail);
        let state = self.state_mut(slot)?;
        state.active_blocks -= unpinned + removed.output_blocks;
        state.active_tokens -= removed.prefill_tokens as u128;
        self.sync(slot);
        Some(removed)
    }

    /// Stops counting the request's prefill tokens. False if there is no such request.
    pub(crate) fn mark_prefill_completed(&mut self, slot: Slot, record: RecordId) -> bool {
        let Some(state) = self.state_mut(slot) else { return false };
        let Some(request) = state.requests.get_mut(record) else { return false };
        state.active_tokens -= std::mem::take(&mut request.prefill_tokens) as u128;
        self.sync(slot);
        true
    }

    /// Pins one more (decoded) block for the request. False if there is no such request.
    pub(crate) fn add_output_block(&mut self, slot: Slot, record: RecordId) -> bool {
        let Some(state) = self.state_mut(slot) else { return false };
        let Some(request) = state.requests.get_mut(record) else { return false };
        request.output_blocks += 1;
        state.active_blocks += 1;
        self.sync(slot);
        true
    }

    /// Frees every request of the worker in `slot` that has been in flight for `expiry` or
    /// longer at `now`, oldest first, appending their ids to `expired`.
    pub(crate) fn expire(
        &mut self,
        slot: Slot,
        now: Instant,
        expiry: Duration,
        expired: &mut Vec<RequestId>,
    ) {
        while let Some((record, request)) = self.state(slot).and_then(|s| s.requests.oldest()) {
            if now.saturating_duration_since(request.started_at) < expiry {
                break;
            }
            if let Some(request) = self.free(slot, record) {
                expired.push(request.id);
            }
        }
    }

    /// The load of every worker, appended to `out`.
    pub(crate) fn loads_into(&self, out: &mut Vec<WorkerLoad>) {
        out.extend(self.slots.iter().flatten().map(WorkerState::load));
    }

    /// The load of the worker in `slot`.
    pub(crate) fn load(&self, slot: Slot) -> Option<WorkerLoad> {
        self.state(slot).map(WorkerState::load)
    }

    /// How many leading blocks of `candidate` the worker in `slot` pins.
    pub(crate) fn pinned_depth(&self, slot: Slot, candidate: &[SequenceHash]) -> usize {
        self.trie.depth_of(slot, candidate)
    }

    /// Appends every worker's potential load for `candidate` to `out`, with
    /// `new_tokens(worker)` the worker's cached prefix of the candidate (blocks) and the prefill
    /// tokens the candidate would add on that worker.
    pub(crate) fn potential_loads_into(
        &self,
        candidate: &[SequenceHash],
        new_tokens: impl Fn(Worker) -> (u32, usize),
        out: &mut Vec<PotentialLoad>,
    ) {
        if u32::try_from(candidate.len()).is_ok() && self.slots.len() <= ON_STACK {
            // `depth` fits: it is at most the candidate's length.
            let mut stack = [0u32; ON_STACK];
            let depths = &mut stack[..self.slots.len()];
            self.trie.visit_depths(candidate, |slot, depth| depths[slot as usize] = depth as u32);
            self.push_loads(candidate.len(), |slot| depths[slot] as usize, &new_tokens, out);
        } else {
            let mut depths = vec![0usize; self.slots.len()];
            self.trie.visit_depths(candidate, |slot, depth| depths[slot as usize] = depth);
            self.push_loads(candidate.len(), |slot| depths[slot], &new_tokens, out);
        }
    }

    /// [`Self::potential_loads_into`] for several shards at once (`None`s are skipped), their
    /// tries walked in step ([`BlockTrie::visit_depths_together`]) so that their cache misses
    /// overlap. Appends shard by shard.
    pub(crate) fn potential_loads_together(
        shards: &[Option<&Shard>],
        candidate: &[SequenceHash],
        new_tokens: impl Fn(Worker) -> (u32, usize),
        out: &mut Vec<PotentialLoad>,
    ) {
        // Depths are kept as `u32` on the stack, the shards of a group side by side from
        // `base[at]`; a shard that does not fit takes the one-shard path.
        let narrow = u32::try_from(candidate.len()).is_ok();
        for group in shards.chunks(TOGETHER) {
            let mut together: [Option<&Shard>; TOGETHER] = [None; TOGETHER];
            let mut base = [0usize; TOGETHER];
            let mut used = 0;
            for (at, shard) in group.iter().enumerate() {
                match shard {
                    Some(shard) if narrow && used + shard.slots.len() <= ON_STACK => {
                        together[at] = Some(shard);
                        base[at] = used;
                        used += shard.slots.len();
                    }
                    Some(shard) => shard.potential_loads_into(candidate, &new_tokens, out),
                    None => {}
                }
            }
            for shard in together.iter().flatten() {
                shard.prefetch_figures();
            }
            let mut depths = [0u32; ON_STACK];
            let tries = together.map(|shard| shard.map(|shard| &shard.trie));
            BlockTrie::visit_depths_together(&tries, candidate, |at, slot, depth| {
                // `depth` fits: it is at most the candidate's length.
                depths[base[at] + slot as usize] = depth as u32;
            });
            for (at, shard) in together.iter().enumerate() {
                if let Some(shard) = shard {
                    let depths = &depths[base[at]..];
                    shard.push_loads(
                        candidate.len(),
                        |slot| depths[slot] as usize,
                        &new_tokens,
                        out,
                    );
                }
            }
        }
    }

    /// Starts loading the packed figures a query reads.
    fn prefetch_figures(&self) {
        for figures in &self.figures {
            crate::prefetch::prefetch_line(figures);
        }
    }

    /// Appends every live worker's potential load, given `depth(slot)`, the leading blocks of
    /// the candidate that worker pins.
    fn push_loads(
        &self,
        candidate_len: usize,
        depth: impl Fn(usize) -> usize,
        new_tokens: impl Fn(Worker) -> (u32, usize),
        out: &mut Vec<PotentialLoad>,
    ) {
        out.reserve(self.slot_of.len());
        for (slot, figures) in self.figures.iter().enumerate() {
            if !figures.live {
                continue;
            }
            let (overlap_blocks, new_tokens) = new_tokens(figures.worker);
            out.push(PotentialLoad {
                worker: figures.worker,
                potential_blocks: figures.active_blocks + (candidate_len - depth(slot)),
                potential_tokens: figures.active_tokens.saturating_add(new_tokens),
                active_tokens: figures.active_tokens,
                overlap_blocks,
                active_requests: figures.active_requests as usize,
            });
        }
    }

    /// Checks every counter against a recount from the requests and the trie (for tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn assert_consistent(&self) {
        self.trie.assert_consistent();
        for (slot, state) in self.slots.iter().enumerate() {
            let Some(state) = state else { continue };
            let slot = slot as Slot;
            let outputs: usize = state.requests.iter().map(|(_, r)| r.output_blocks).sum();
            let tokens: u128 = state.requests.iter().map(|(_, r)| r.prefill_tokens as u128).sum();
            assert_eq!(state.active_blocks, self.trie.pinned_blocks(slot).len() + outputs);
            assert_eq!(state.active_tokens, tokens);
            assert_eq!(self.slot_of.get(&state.worker), Some(&slot));
        }
        for (slot, figures) in self.figures.iter().enumerate() {
            let expected = self.state(slot as Slot).map_or(Figures::VACANT, Figures::of);
            assert_eq!(*figures, expected, "slot {slot}'s packed figures");
        }
        assert!(self.figures.len() >= self.slots.len());
        assert_eq!(self.slot_of.len(), self.slots.iter().flatten().count());
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn hashes(values: &[u64]) -> Vec<SequenceHash> {
        values.iter().copied().map(SequenceHash).collect()
    }

    #[test]
    fn workers_share_the_trie_but_keep_their_own_counts() {
        let mut shard = Shard::default();
        let now = Instant::now();
        let (a, _) = shard.add_worker(Worker::new(1, 0));
        let (b, _) = shard.add_worker(Worker::new(2, 0));
        assert_eq!(shard.add_worker(Worker::new(1, 0)), (a, false));
        let ra = shard.add_request(a, "ra".into(), &hashes(&[1, 2, 3]), 40, now, &mut None);
        let rb = shard.add_request(b, "rb".into(), &hashes(&[1, 2]), 10, now, &mut None);
        let (ra, rb) = (ra.expect("worker a"), rb.expect("worker b"));
        shard.assert_consistent();
        assert_eq!(shard.load(a).map(|l| (l.active_blocks, l.active_tokens)), Some((3, 40)));
        assert_eq!(shard.load(b).map(|l| (l.active_blocks, l.active_tokens)), Some((2, 10)));

        let mut out = Vec::new();
        shard.potential_loads_into(&hashes(&[1, 2, 3, 4]), |_| (0, 7), &mut out);
        let by_worker: Vec<_> =
            out.iter().map(|p| (p.worker.id.0, p.potential_blocks, p.potential_tokens)).collect();
        assert_eq!(by_worker, [(1, 3 + 1, 47), (2, 2 + 2, 17)]);

        assert!(shard.add_output_block(a, ra));
        assert!(shard.mark_prefill_completed(a, ra));
        assert_eq!(shard.load(a).map(|l| (l.active_blocks, l.active_tokens)), Some((4, 0)));
        shard.assert_consistent();
        assert_eq!(shard.free(a, ra).map(|r| r.id.to_string()), Some("ra".into()));
        assert!(shard.free(a, ra).is_none());
        assert!(!shard.mark_prefill_completed(a, ra));
        assert!(!shard.add_output_block(a, ra));
        assert_eq!(shard.load(a).map(|l| l.active_blocks), Some(0));

        assert_eq!(shard.remove_worker(Worker::new(2, 0)), Some(vec![RequestId::from("rb")]));
        assert_eq!(shard.remove_worker(Worker::new(2, 0)), None);
        assert!(shard.record(b, rb).is_none());
        assert!(shard.add_request(b, "late".into(), &[], 0, now, &mut None).is_none());
        shard.assert_consistent();
        assert_eq!(shard.worker_count(), 1);
    }

    #[test]
    fn warming_takes_any_slot_record_or_path_without_panicking() {
        let mut shard = Shard::default();
        let (a, _) = shard.add_worker(Worker::new(1, 0));
        let ra =
            shard.add_request(a, "ra".into(), &hashes(&[1, 2, 3]), 4, Instant::now(), &mut None);
        let ra = ra.expect("worker a");
        shard.warm_add(a, &hashes(&[1, 2, 9]));
        shard.warm_add(a, &[]);
        shard.warm_add(99, &hashes(&[1]));
        shard.warm_request(a, ra);
        shard.warm_request(a, 99);
        shard.warm_request(99, ra);
        shard.free(a, ra);
        shard.warm_request(a, ra);
        shard.assert_consistent();
    }

    #[test]
    fn shards_queried_together_report_what_each_reports_alone() {
        // Shards of few workers (walked in step), one of more than `ON_STACK` (alone), and two
        // that each fit the array: the first beside a small one, the second (read alone) not.
        let now = Instant::now();
        let shards: Vec<Shard> = [3, ON_STACK + 5, 1, 7, 2, 4, ON_STACK - 9, ON_STACK / 2]
            .into_iter()
            .enumerate()
            .map(|(s, workers)| {
                let mut shard = Shard::default();
                for w in 0..workers as u64 {
                    let (slot, _) = shard.add_worker(Worker::new(w * 10 + s as u64, 0));
                    let path: Vec<u64> = (0..1 + (w + s as u64) % 6).collect();
                    shard.add_request(
                        slot,
                        format!("{s}-{w}").into(),
                        &hashes(&path),
                        5,
                        now,
                        &mut None,
                    );
                }
                shard
            })
            .collect();
        let present: Vec<Option<&Shard>> =
            shards.iter().enumerate().map(|(s, shard)| (s != 4).then_some(shard)).collect();
        let new_tokens = |worker: Worker| (worker.id.0 as u32 % 3, 7);
        for candidate in [hashes(&[]), hashes(&[0, 1, 2]), hashes(&[0, 1, 2, 3, 4, 5, 6])] {
            let mut together = Vec::new();
            Shard::potential_loads_together(&present, &candidate, new_tokens, &mut together);
            let mut alone = Vec::new();
            for shard in present.iter().flatten() {
                shard.potential_loads_into(&candidate, new_tokens, &mut alone);
            }
            together.sort_by_key(|l| l.worker);
            alone.sort_by_key(|l| l.worker);
            assert_eq!(together, alone);
        }
    }

    #[test]
    fn expiry_frees_the_oldest_requests_first() {
        let mut shard = Shard::default();
        let (slot, _) = shard.add_worker(Worker::new(1, 0));
        let t0 = Instant::now();
        let step = Duration::from_secs(10);
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            let at = t0 + step * i as u32;
            shard.add_request(slot, name.into(), &hashes(&[9, i as u64]), 1, at, &mut None);
        }
        let mut expired = Vec::new();
        shard.expire(slot, t0 + step * 3, Duration::from_secs(20), &mut expired);
        assert_eq!(expired, [RequestId::from("a"), RequestId::from("b")]);
        assert_eq!(shard.load(slot).map(|l| (l.active_requests, l.active_tokens)), Some((1, 1)));
        shard.assert_consistent();
    }
}
