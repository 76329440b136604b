//! How whole batches go through the recovery cursors.
//!
//! A ZMQ message (one `seq`) carries many events, over several tiers; a recovery cursor takes
//! one event per id. So each endpoint's [`EventRecovery`](crate::recovery::EventRecovery) sees
//! one *token* per batch — an empty event numbered with the batch's `seq` — while the batch's
//! decoded events wait in the [`Stash`]. When recovery applies a token, [`BatchSink`] applies
//! that batch's events to the real index; when it restores the stream from a full dump, it
//! first clears every (rank, tier) stream the endpoint has written. Gaps, duplicates, buffering,
//! retries with backoff and full restores are all recovery's own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::event::{KvEventData, RouterEvent, StorageTier, Worker};
use crate::pool::LaneDown;
use crate::recovery::EventSink;
use crate::router::KvRouter;
use crate::sync::Mutex;

use super::stats::Counters;

/// A ZMQ endpoint's events from the router's point of view: the index of every tier (the
/// router's own recovery is bypassed — the subscriber sequences whole batches itself).
impl EventSink for KvRouter {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        self.index().apply_split(event)
    }
}

/// Decoded batches waiting for recovery to apply their token, by `seq`.
///
/// Live batches are bounded like recovery's own buffer: recovery keeps at most its
/// `buffer_capacity` live tokens and drops the lowest ids past it (restoring the stream in full
/// instead), so the stash keeps no more live batches than that and drops its lowest `seq`s too
/// — a batch whose token recovery dropped would never be taken.
#[derive(Debug)]
pub(super) struct Stash {
    batches: Mutex<BTreeMap<u64, Vec<RouterEvent>>>,
    capacity: usize,
}

impl Stash {
    /// An empty stash holding at most `capacity` batches after each live one.
    pub(super) fn new(capacity: usize) -> Self {
        Self { batches: Mutex::default(), capacity: capacity.max(1) }
    }

    /// A replayed batch: recovery takes it in the same fetch, so it is not bounded here (the
    /// answer's size is, in `replay.rs`).
    pub(super) fn put(&self, seq: u64, events: Vec<RouterEvent>) {
        self.batches.lock().insert(seq, events);
    }

    /// A live batch; past the capacity the lowest `seq`s are dropped.
    pub(super) fn put_live(&self, seq: u64, events: Vec<RouterEvent>) {
        let mut batches = self.batches.lock();
        batches.insert(seq, events);
        let excess = batches.len().saturating_sub(self.capacity);
        for _ in 0..excess {
            batches.pop_first();
        }
    }

    fn take(&self, seq: u64) -> Vec<RouterEvent> {
        self.batches.lock().remove(&seq).unwrap_or_default()
    }

    /// Drops batches recovery will never apply (duplicates of applied ones): every `seq` up to
    /// `last`, once the stream is settled.
    pub(super) fn prune_through(&self, last: u64) {
        self.batches.lock().retain(|&seq, _| seq > last);
    }

    pub(super) fn len(&self) -> usize {
        self.batches.lock().len()
    }
}

/// The token recovery sees for batch `seq` of the stream `worker`.
pub(super) fn token(worker: Worker, seq: u64) -> RouterEvent {
    RouterEvent::new(worker, seq, KvEventData::Removed { blocks: Vec::new() })
}

/// Applies a token's batch to the real index.
#[derive(Debug)]
pub(super) struct BatchSink<S> {
    pub stash: Arc<Stash>,
    pub target: Arc<S>,
    pub counters: Arc<Counters>,
    /// Every (rank, tier) stream this endpoint has written: what a full restore clears.
    written: Mutex<BTreeSet<(Worker, StorageTier)>>,
}

impl<S: EventSink> BatchSink<S> {
    pub(super) fn new(stash: Arc<Stash>, target: Arc<S>, counters: Arc<Counters>) -> Self {
        Self { stash, target, counters, written: Mutex::default() }
    }

    /// Applies `events` straight to the index (also the path without a replay socket).
    pub(super) fn apply(&self, events: Vec<RouterEvent>) -> Result<(), LaneDown> {
        for event in events {
            let ops = event.block_ops() as u64;
            self.written.lock().insert((event.worker(), event.tier));
            self.target.submit(event)?;
            Counters::add(&self.counters.events, 1);
            Counters::add(&self.counters.block_ops, ops);
        }
        Ok(())
    }
}

impl<S: EventSink> EventSink for BatchSink<S> {
    fn submit(&self, token: RouterEvent) -> Result<(), LaneDown> {
        self.apply(self.stash.take(token.event.event_id))
    }

    /// Before a full restore: the endpoint's state, every rank and tier of it, is dropped.
    fn clear(&self, _worker: Worker, _tier: StorageTier) -> Result<(), LaneDown> {
        let written = std::mem::take(&mut *self.written.lock());
        for (worker, tier) in written {
            self.target.clear(worker, tier)?;
        }
        Ok(())
    }
}
