//! [`ActiveSequences`]: the requests in flight on one worker and the load they put on it.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use super::clock::{Clock, SystemClock};
use super::error::{
    AddRequestError, ConfigError, UnknownRequest, checked_prefill_tokens, saturating_prefill_tokens,
};
use super::owners::Slot;
use super::requests::RecordId;
use super::shard::Shard;
use super::{DEFAULT_EXPIRY, RequestId};
use crate::event::{SequenceHash, Worker};

/// The requests in flight on one worker: the blocks they pin (shared prefixes counted once) and
/// the prefill tokens still to compute, with the "what if" queries a router needs.
///
/// Single-threaded; [`super::MultiWorkerSequences`] tracks a whole fleet from many threads.
///
/// Block sequences are [`SequenceHash`]es: each commits to its whole prefix, so two requests
/// share block `i` only if they share blocks `0..=i`. Blocks are counted as positions on those
/// prefix paths (for real sequence hashes, the same as counting distinct hashes).
///
/// Requests still in flight [`expiry`](Self::with_expiry) after they were added (300 s by
/// default) are dropped the next time a request is added, and their ids returned.
///
/// ```
/// use kvroute::SequenceHash;
/// use kvroute::sequences::{ActiveSequences, RequestId};
///
/// let blocks = |ids: &[u64]| ids.iter().copied().map(SequenceHash).collect::<Vec<_>>();
/// let mut worker = ActiveSequences::new(16)?;
///
/// // A 4-block prompt of 64 tokens, none of it cached: 64 tokens to prefill.
/// worker.add_request("a".into(), Some(&blocks(&[1, 2, 3, 4])), 64, 0)?;
/// // A second request sharing the first two blocks, two of them already cached.
/// worker.add_request("b".into(), Some(&blocks(&[1, 2, 9])), 48, 2)?;
/// assert_eq!(worker.active_blocks(), 5); // 1, 2, 3, 4 and 9: the shared prefix counts once
/// assert_eq!(worker.active_tokens(), 64 + 16);
///
/// // What a third request would cost here.
/// let candidate = blocks(&[1, 2, 3, 7]);
/// assert_eq!(worker.new_blocks(&candidate), 1);
/// assert_eq!(worker.potential_blocks_and_tokens(&candidate, 64, 3), (6, 80 + 16));
///
/// worker.mark_prefill_completed(&"a".into())?;
/// worker.free(&"b".into())?;
/// assert_eq!((worker.active_blocks(), worker.active_tokens()), (4, 0));
/// assert!(worker.free(&"b".into()).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ActiveSequences {
    shard: Shard,
    slot: Slot,
    records: HashMap<RequestId, RecordId, ahash::RandomState>,
    block_size: u32,
    expiry: Option<Duration>,
    clock: Box<dyn Clock>,
}

impl ActiveSequences {
    /// An idle worker whose KV blocks hold `block_size` tokens; requests expire after 300 s,
    /// measured by the system clock.
    pub fn new(block_size: u32) -> Result<Self, ConfigError> {
        if block_size == 0 {
            return Err(ConfigError::ZeroBlockSize);
        }
        let mut shard = Shard::default();
        let (slot, _) = shard.add_worker(Worker::default());
        Ok(Self {
            shard,
            slot,
            records: HashMap::default(),
            block_size,
            expiry: Some(DEFAULT_EXPIRY),
            clock: Box::new(SystemClock),
        })
    }

    /// Requests still in flight this long after they were added are dropped; `None` keeps
    /// them until freed.
    pub fn with_expiry(mut self, expiry: Option<Duration>) -> Self {
        self.expiry = expiry;
        self
    }

    /// Reads the time from `clock` (for tests: a [`super::ManualClock`]).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// Tokens per KV block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Adds a request of `isl` input tokens whose first `overlap` blocks are already cached on
    /// the worker: pins its `blocks` (if known) and counts `isl - overlap * block_size` tokens
    /// to prefill until [`mark_prefill_completed`](Self::mark_prefill_completed).
    ///
    /// First drops the requests that have expired and returns their ids (usually none).
    /// On error nothing changes, not even expiry.
    pub fn add_request(
        &mut self,
        id: RequestId,
        blocks: Option<&[SequenceHash]>,
        isl: usize,
        overlap: u32,
    ) -> Result<Vec<RequestId>, AddRequestError> {
        let prefill_tokens = checked_prefill_tokens(isl, overlap, self.block_size)?;
        if self.records.contains_key(&id) {
            return Err(AddRequestError::DuplicateRequest { id });
        }
        let now = self.clock.now();
        let expired = self.expire_at(now);
        let blocks = blocks.unwrap_or_default();
        let record =
            self.shard.add_request(self.slot, id.clone(), blocks, prefill_tokens, now, &mut None);
        if let Some(record) = record {
            self.records.insert(id, record);
        }
        Ok(expired)
    }

    fn record(&self, id: &RequestId) -> Result<RecordId, UnknownRequest> {
        self.records.get(id).copied().ok_or_else(|| UnknownRequest { id: id.clone() })
    }

    /// Stops counting the request's prefill tokens (idempotent while it is in flight).
    pub fn mark_prefill_completed(&mut self, id: &RequestId) -> Result<(), UnknownRequest> {
        let record = self.record(id)?;
        self.shard.mark_prefill_completed(self.slot, record);
        Ok(())
    }

    /// The request decoded one more block: it pins one more block on the worker.
    pub fn add_output_block(&mut self, id: &RequestId) -> Result<(), UnknownRequest> {
        let record = self.record(id)?;
        self.shard.add_output_block(self.slot, record);
        Ok(())
    }

    /// The request finished: unpins its blocks (those no other request shares) and uncounts its
    /// prefill tokens if prefill had not completed.
    pub fn free(&mut self, id: &RequestId) -> Result<(), UnknownRequest> {
        let record = self.record(id)?;
        self.records.remove(id);
        self.shard.free(self.slot, record);
        Ok(())
    }

    /// Drops every request that has expired now; returns their ids, oldest first.
    pub fn expire_stale(&mut self) -> Vec<RequestId> {
        let now = self.clock.now();
        self.expire_at(now)
    }

    fn expire_at(&mut self, now: std::time::Instant) -> Vec<RequestId> {
        let mut expired = Vec::new();
        if let Some(expiry) = self.expiry {
            self.shard.expire(self.slot, now, expiry, &mut expired);
            for id in &expired {
                self.records.remove(id);
            }
        }
        expired
    }

    /// Whether the request is in flight.
    pub fn contains(&self, id: &RequestId) -> bool {
        self.records.contains_key(id)
    }

    /// Requests in flight.
    pub fn active_requests(&self) -> usize {
        self.records.len()
    }

    /// Blocks pinned by the requests in flight, shared prefixes counted once, decoded blocks
    /// included.
    pub fn active_blocks(&self) -> usize {
        self.shard.load(self.slot).map_or(0, |load| load.active_blocks)
    }

    /// Prefill tokens still to compute.
    pub fn active_tokens(&self) -> usize {
        self.shard.load(self.slot).map_or(0, |load| load.active_tokens)
    }

    /// How many blocks of `sequence` the worker does not pin yet (all those after its longest
    /// pinned prefix).
    pub fn new_blocks(&self, sequence: &[SequenceHash]) -> usize {
        sequence.len() - self.shard.pinned_depth(self.slot, sequence)
    }

    /// Active blocks if a request of `sequence` were added.
    pub fn potential_blocks(&self, sequence: &[SequenceHash]) -> usize {
        self.active_blocks() + self.new_blocks(sequence)
    }

    /// Tokens a request of `isl` tokens with `overlap` cached blocks would prefill:
    /// `isl - overlap * block_size`, or 0 if the overlap covers the whole input.
    pub fn new_tokens(&self, isl: usize, overlap: u32) -> usize {
        saturating_prefill_tokens(isl, overlap, self.block_size)
    }

    /// `(potential blocks, potential tokens)` if a request of `sequence` (`isl` tokens,
    /// `overlap` blocks cached) were added.
    pub fn potential_blocks_and_tokens(
        &self,
        sequence: &[SequenceHash],
        isl: usize,
        overlap: u32,
    ) -> (usize, usize) {
        let tokens = self.active_tokens().saturating_add(self.new_tokens(isl, overlap));
        (self.potential_blocks(sequence), tokens)
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn assert_consistent(&self) {
        self.shard.assert_consistent();
        for (id, &record) in &self.records {
            let stored = self.shard.record(self.slot, record).map(|r| &r.id);
            assert_eq!(stored, Some(id));
        }
        assert_eq!(self.shard.load(self.slot).map(|l| l.active_requests), Some(self.records.len()));
    }
}

impl fmt::Debug for ActiveSequences {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActiveSequences")
            .field("block_size", &self.block_size)
            .field("expiry", &self.expiry)
            .field("active_requests", &self.active_requests())
            .field("active_blocks", &self.active_blocks())
            .field("active_tokens", &self.active_tokens())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sequences::ManualClock;

    fn blocks(values: &[u64]) -> Vec<SequenceHash> {
        values.iter().copied().map(SequenceHash).collect()
    }

    #[test]
    fn bad_input_is_a_typed_error_that_changes_nothing() {
        assert_eq!(ActiveSequences::new(0).err(), Some(ConfigError::ZeroBlockSize));
        let mut seqs = ActiveSequences::new(4).expect("block size");
        seqs.add_request("a".into(), Some(&blocks(&[1, 2])), 8, 0).expect("first add");
        let before = (seqs.active_blocks(), seqs.active_tokens(), seqs.active_requests());

        let duplicate = seqs.add_request("a".into(), Some(&blocks(&[5])), 4, 0);
        assert_eq!(duplicate, Err(AddRequestError::DuplicateRequest { id: "a".into() }));
        let overlap = seqs.add_request("b".into(), Some(&blocks(&[1, 2])), 7, 2);
        assert!(matches!(overlap, Err(AddRequestError::OverlapExceedsInput { .. })));
        assert_eq!(seqs.free(&"zz".into()), Err(UnknownRequest { id: "zz".into() }));
        assert!(seqs.mark_prefill_completed(&"zz".into()).is_err());
        assert!(seqs.add_output_block(&"zz".into()).is_err());

        assert_eq!((seqs.active_blocks(), seqs.active_tokens(), seqs.active_requests()), before);
        assert!(!seqs.contains(&"b".into()));
        seqs.assert_consistent();
    }

    #[test]
    fn requests_without_blocks_count_tokens_and_decoded_blocks_only() {
        let mut seqs = ActiveSequences::new(16).expect("block size");
        seqs.add_request("t".into(), None, 100, 0).expect("add");
        assert_eq!((seqs.active_blocks(), seqs.active_tokens()), (0, 100));
        seqs.add_output_block(&"t".into()).expect("known");
        seqs.add_output_block(&"t".into()).expect("known");
        assert_eq!(seqs.active_blocks(), 2);
        seqs.mark_prefill_completed(&"t".into()).expect("known");
        seqs.mark_prefill_completed(&"t".into()).expect("idempotent");
        assert_eq!(seqs.active_tokens(), 0);
        seqs.free(&"t".into()).expect("known");
        assert_eq!((seqs.active_blocks(), seqs.active_requests()), (0, 0));
        seqs.assert_consistent();
    }

    #[test]
    fn stale_requests_expire_lazily_on_the_injected_clock() {
        let clock = ManualClock::new();
        let mut seqs = ActiveSequences::new(4)
            .expect("block size")
            .with_expiry(Some(Duration::from_secs(300)))
            .with_clock(clock.clone());
        seqs.add_request("old".into(), Some(&blocks(&[1, 2])), 8, 0).expect("add");
        clock.advance(Duration::from_secs(200));
        seqs.add_request("mid".into(), Some(&blocks(&[1, 3])), 8, 0).expect("add");
        clock.advance(Duration::from_secs(100));
        assert_eq!(seqs.active_requests(), 2, "expiry is lazy: nothing happens on its own");

        let expired = seqs.add_request("new".into(), None, 4, 0).expect("add");
        assert_eq!(expired, [RequestId::from("old")]);
        assert!(!seqs.contains(&"old".into()));
        assert_eq!(seqs.active_blocks(), 2, "block 1 is still pinned by `mid`");
        assert_eq!(seqs.free(&"old".into()), Err(UnknownRequest { id: "old".into() }));

        clock.advance(Duration::from_secs(250));
        assert_eq!(seqs.expire_stale(), [RequestId::from("mid")]);
        assert_eq!(seqs.expire_stale(), Vec::<RequestId>::new());
        seqs.assert_consistent();

        let mut forever = ActiveSequences::new(4).expect("bs").with_expiry(None);
        forever.add_request("x".into(), None, 1, 0).expect("add");
        assert!(forever.expire_stale().is_empty());
        assert!(format!("{forever:?}").contains("active_requests: 1"));
    }

    #[test]
    fn potential_load_counts_only_the_unpinned_suffix() {
        let mut seqs = ActiveSequences::new(2).expect("block size");
        seqs.add_request("a".into(), Some(&blocks(&[1, 2, 3])), 6, 0).expect("add");
        assert_eq!(seqs.new_blocks(&blocks(&[1, 2, 3])), 0);
        assert_eq!(seqs.new_blocks(&blocks(&[1, 2, 4, 5])), 2);
        assert_eq!(seqs.new_blocks(&blocks(&[8, 2, 3])), 3, "a block counts only with its prefix");
        assert_eq!(seqs.potential_blocks(&blocks(&[1, 9])), 4);
        assert_eq!(seqs.new_tokens(10, 2), 6);
        assert_eq!(seqs.new_tokens(3, 2), 0, "queries saturate instead of failing");
        assert_eq!(seqs.potential_blocks_and_tokens(&[], 10, 0), (3, 16));
        assert_eq!(seqs.block_size(), 2);
    }
}
