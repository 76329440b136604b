//! [`EventRecovery`]: the state machine behind a lock, in front of an index.

use std::time::Instant;

use crate::event::{RouterEvent, StorageTier, Worker, WorkerId};
use crate::pool::LaneDown;
use crate::sync::Mutex;

use super::Cursor;
use super::config::{RecoveryConfig, RecoveryConfigError};
use super::sink::EventSink;
use super::source::{Recovered, RecoverySource};
use super::state::{Action, JobKind, RecoveryState, StreamKey};
use super::stats::RecoveryStats;

/// Feeds an index from event streams that may lose, duplicate and reorder events, or restart.
///
/// [`Self::ingest`] is called with every live event; it never waits for a recovery.
/// [`Self::run_pending`] runs the fetches recoveries need against a [`RecoverySource`] — call it
/// from the thread that receives events (between receives) or from a thread of its own; the
/// source is asked outside the lock, so ingestion goes on meanwhile. Queries go to the index
/// and never see recovery at all.
///
/// ```
/// use kvroute::index::{EventPool, PoolConfig};
/// use kvroute::recovery::{EventRecovery, LocalIndexer, RecoveryConfig};
/// use kvroute::{KvEventData, LocalBlockHash, StorageTier, StoredBlock, Worker};
///
/// let worker = Worker::new(7, 0);
/// let engine = LocalIndexer::new(worker, StorageTier::Device, 1_024)?; // the engine's record
/// let index = EventPool::new(PoolConfig::default())?;
/// let recovery = EventRecovery::new(&index, RecoveryConfig::default())?;
///
/// let first = engine.publish(KvEventData::Stored { parent: None, blocks: vec![StoredBlock::new(1, 10)] });
/// let _lost = engine.publish(KvEventData::Stored { parent: Some(first_hash()), blocks: vec![StoredBlock::new(2, 20)] });
/// # fn first_hash() -> kvroute::SequenceHash { kvroute::SequenceHash(10) }
/// recovery.ingest(first)?; // the second event never arrives...
/// let third = engine.publish(KvEventData::Stored { parent: Some(kvroute::SequenceHash(20)), blocks: vec![StoredBlock::new(3, 30)] });
/// recovery.ingest(third)?; // ...this one shows the gap
/// recovery.run_pending(&engine)?; // fetches what was missed, applies it in order
/// index.flush()?;
/// let hashes = [LocalBlockHash(1), LocalBlockHash(2), LocalBlockHash(3)];
/// assert_eq!(index.find_matches(&hashes).get(worker), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct EventRecovery<S: EventSink> {
    sink: S,
    core: RecoveryCore,
}

impl<S: EventSink> EventRecovery<S> {
    /// Recovery in front of `sink`.
    pub fn new(sink: S, config: RecoveryConfig) -> Result<Self, RecoveryConfigError> {
        Ok(Self { sink, core: RecoveryCore::new(config)? })
    }

    /// The index fed.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// Takes one live event: applies it if it is the next of its stream, drops it if already
    /// applied, or keeps it and schedules a recovery.
    pub fn ingest(&self, event: RouterEvent) -> Result<(), LaneDown> {
        self.core.ingest(&self.sink, event)
    }

    /// Runs every fetch due now against `source` and applies the results. Returns how many
    /// fetches ran.
    pub fn run_pending(&self, source: &dyn RecoverySource) -> Result<usize, LaneDown> {
        self.core.run_pending(&self.sink, source)
    }

    /// When the next waiting fetch is due (a retry after backoff), if any is waiting.
    pub fn next_due(&self) -> Option<Instant> {
        self.core.next_due()
    }

    /// Forgets worker `id`'s streams; recoveries in flight for it are dropped when they return.
    /// (Removing it from the index is the caller's.)
    pub fn remove_worker(&self, id: WorkerId) {
        self.core.remove_worker(id);
    }

    /// The stream's state was lost (its index lane restarted, or the worker came back under a
    /// new instance id): restore it from a full dump at the next [`Self::run_pending`]. Events
    /// from the worker's previous run must not be ingested after this (ids alone cannot tell
    /// two runs apart).
    pub fn invalidate(&self, worker: Worker, tier: StorageTier) {
        self.core.invalidate(worker, tier);
    }

    /// Per-stream counters.
    pub fn stats(&self) -> RecoveryStats {
        self.core.stats()
    }
}

/// The state machine behind its lock, for owners that hold the index themselves (the router).
#[derive(Debug)]
pub(crate) struct RecoveryCore {
    state: Mutex<RecoveryState>,
}

impl RecoveryCore {
    pub(crate) fn new(config: RecoveryConfig) -> Result<Self, RecoveryConfigError> {
        config.validate()?;
        Ok(Self { state: Mutex::new(RecoveryState::new(config)) })
    }

    pub(crate) fn ingest(&self, sink: &dyn EventSink, event: RouterEvent) -> Result<(), LaneDown> {
        let mut state = self.state.lock();
        let mut actions = std::mem::take(&mut state.scratch);
        // The clock is read only when a gap or a restore starts, not per event.
        state.on_event(event, Instant::now, &mut actions);
        // Applied under the lock: a stream's events reach the index in the decided order.
        let done = perform(sink, &mut actions);
        state.scratch = actions;
        done
    }

    pub(crate) fn run_pending(
        &self,
        sink: &dyn EventSink,
        source: &dyn RecoverySource,
    ) -> Result<usize, LaneDown> {
        let jobs = self.state.lock().due_jobs(Instant::now());
        for &job in &jobs {
            let (worker, tier) = job.stream;
            // Asked outside the lock: ingestion goes on meanwhile.
            let result = match job.kind {
                JobKind::Since(from) => source.events_since(worker, tier, from),
                JobKind::Full => source.full_dump(worker, tier).map(Recovered::Dump),
            };
            let mut state = self.state.lock();
            let mut actions = Vec::new();
            state.on_result(job, result, Instant::now(), &mut actions);
            perform(sink, &mut actions)?;
        }
        Ok(jobs.len())
    }

    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.state.lock().next_due()
    }

    pub(crate) fn remove_worker(&self, id: WorkerId) {
        self.state.lock().remove_worker(id);
    }

    pub(crate) fn invalidate(&self, worker: Worker, tier: StorageTier) {
        self.state.lock().invalidate((worker, tier), Instant::now());
    }

    pub(crate) fn stats(&self) -> RecoveryStats {
        self.state.lock().stats()
    }

    /// Every stream of `tier` recovery knows.
    pub(crate) fn streams_of(&self, tier: StorageTier) -> Vec<StreamKey> {
        self.state.lock().streams_of(tier)
    }

    /// Runs `f` with ingestion paused (the state locked), handing it the cursors: what `f`
    /// reads of the index then matches them.
    pub(crate) fn paused<T>(&self, f: impl FnOnce(Vec<(StreamKey, Cursor)>) -> T) -> T {
        let state = self.state.lock();
        f(state.cursors())
    }

    pub(crate) fn restore_cursors(&self, cursors: &[(StreamKey, Cursor)]) {
        self.state.lock().restore_cursors(cursors);
    }
}

/// Performs (and empties) `actions`; on a failure the rest are dropped.
fn perform(sink: &dyn EventSink, actions: &mut Vec<Action>) -> Result<(), LaneDown> {
    for action in actions.drain(..) {
        match action {
            Action::Apply(event) => sink.submit(event)?,
            Action::Clear(worker, tier) => sink.clear(worker, tier)?,
        }
    }
    Ok(())
}
