//! The recovery state machine: single-threaded, no I/O, so it can be checked directly.
//!
//! Per stream it holds a [`Cursor`], a phase (live, waiting to fetch, fetching) and a buffer of
//! live events by id. Its inputs are events, fetch results and removals; its outputs are
//! [`Action`]s for the index, in order, and [`Job`]s for the recovery source.
//!
//! Invariants: a live stream's buffer is empty; a buffered event's id is past the cursor; a
//! fetch result counts only if its job's epoch is the stream's current one (a barrier, a
//! restart or a newer fetch bumps the epoch, so stale results are dropped when they return).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::event::{KvEventData, RouterEvent, StorageTier, Worker, WorkerId};

use super::config::{MAX_BACKOFF, RecoveryConfig};
use super::cursor::{Cursor, Verdict};
use super::source::{Recovered, RecoveryError};
use super::stats::{RecoveryStats, StreamStats};

/// One event stream: a worker's dp_rank in one tier.
pub type StreamKey = (Worker, StorageTier);

/// What the index must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Apply the event.
    Apply(RouterEvent),
    /// Drop the stream's state (before a full restore's events).
    Clear(Worker, StorageTier),
}

/// What a recovery asks the source for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// The events from this id on.
    Since(u64),
    /// A full dump.
    Full,
}

/// One fetch to run against the recovery source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// The stream.
    pub stream: StreamKey,
    /// What to fetch.
    pub kind: JobKind,
    /// The stream incarnation that issued it: a stream made again (its worker removed and
    /// added back) is a new incarnation, so its fetches never compare equal to the old one's.
    incarnation: u64,
    epoch: u64,
    /// The stream's arrival count when the fetch was issued: events buffered before it were
    /// published before the source answered.
    issued: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Live,
    Waiting { kind: JobKind, at: Instant },
    Fetching(Job),
}

#[derive(Debug)]
struct Stream {
    cursor: Cursor,
    phase: Phase,
    /// Buffered events by id, each with its arrival number.
    buffer: BTreeMap<u64, (u64, RouterEvent)>,
    arrivals: u64,
    /// Unique per stream made, for the state's life (epochs restart with each incarnation).
    incarnation: u64,
    epoch: u64,
    failures: u32,
    gap_since: Option<Instant>,
    /// The engine hashes the index holds for this stream, when known (from the last dump or
    /// barrier on): a `Stored` continuing a block outside it comes from another run.
    held: Option<HashSet<u64, ahash::RandomState>>,
    stats: StreamStats,
}

impl Stream {
    fn new(incarnation: u64) -> Self {
        Self {
            cursor: Cursor::Initial,
            phase: Phase::Live,
            buffer: BTreeMap::new(),
            arrivals: 0,
            incarnation,
            epoch: 0,
            failures: 0,
            gap_since: None,
            held: None,
            stats: StreamStats::default(),
        }
    }

    /// Records what an applied event changes in the blocks the index holds.
    fn track(&mut self, event: &RouterEvent) {
        match &event.event.data {
            KvEventData::Cleared => self.held = Some(HashSet::default()),
            KvEventData::Stored { blocks, .. } => {
                if let Some(held) = &mut self.held {
                    held.extend(blocks.iter().map(|b| b.hash.0));
                }
            }
            KvEventData::Removed { blocks } => {
                if let Some(held) = &mut self.held {
                    for block in blocks {
                        held.remove(&block.0);
                    }
                }
            }
        }
    }

    /// A `Stored` that continues a block this stream does not hold: its engine restarted and
    /// numbers a new run's events from the start (its first ones lost), so ids alone mislead.
    fn continues_unknown_block(&self, event: &RouterEvent) -> bool {
        match (&self.held, &event.event.data) {
            (Some(held), KvEventData::Stored { parent: Some(parent), .. }) => {
                !held.contains(&parent.0)
            }
            _ => false,
        }
    }

    /// Drops the stream's state and restores it from a full dump (counted as a restart).
    fn restarted(&mut self, now: Instant) {
        self.stats.restarts += 1;
        self.cursor = Cursor::InvalidatedByBarrier;
        self.buffer.clear();
        self.held = None;
        self.start(JobKind::Full, now);
    }

    /// Starts (or restarts) a recovery: any fetch in flight is overtaken.
    fn start(&mut self, kind: JobKind, now: Instant) {
        self.epoch += 1;
        self.failures = 0;
        self.phase = Phase::Waiting { kind, at: now };
        self.gap_since.get_or_insert(now);
    }

    fn recovering(&self) -> bool {
        self.phase != Phase::Live
    }
}

/// Every stream's recovery state.
#[derive(Debug)]
pub(crate) struct RecoveryState {
    config: RecoveryConfig,
    streams: HashMap<StreamKey, Stream, ahash::RandomState>,
    /// Streams made so far: the next one's incarnation.
    incarnations: u64,
    orphan_results: u64,
    /// The actions buffer, reused call after call (the ingest path allocates nothing).
    pub(crate) scratch: Vec<Action>,
}

impl RecoveryState {
    pub(crate) fn new(config: RecoveryConfig) -> Self {
        Self {
            config,
            streams: HashMap::default(),
            incarnations: 0,
            orphan_results: 0,
            scratch: Vec::new(),
        }
    }

    /// An incoming live event.
    pub(crate) fn on_event(
        &mut self,
        event: RouterEvent,
        now: impl Fn() -> Instant,
        out: &mut Vec<Action>,
    ) {
        let capacity = self.config.buffer_capacity;
        let stream =
            stream_of(&mut self.streams, &mut self.incarnations, (event.worker(), event.tier));
        let id = event.event.event_id;
        let verdict = stream.cursor.classify(id);
        if matches!(event.event.data, KvEventData::Cleared) && verdict != Verdict::Stale {
            return barrier(stream, event, now(), out);
        }
        let live = matches!(verdict, Verdict::Stale | Verdict::Apply) && !stream.recovering();
        if live && stream.continues_unknown_block(&event) {
            // A new run of the engine whose first events were lost: ids at or below the cursor
            // would pass for duplicates, and later ones would apply on the old run's state.
            let now = now();
            stream.restarted(now);
            return buffer(stream, event, capacity, now);
        }
        match verdict {
            Verdict::Stale => stream.stats.duplicates += 1,
            Verdict::Restore => {
                let now = now();
                if stream.cursor.last_applied().is_some() {
                    // Numbered from the start again: the worker restarted.
                    stream.restarted(now);
                } else if !matches!(stream.phase, Phase::Waiting { kind: JobKind::Full, .. })
                    && !matches!(stream.phase, Phase::Fetching(Job { kind: JobKind::Full, .. }))
                {
                    stream.start(JobKind::Full, now);
                }
                buffer(stream, event, capacity, now);
            }
            Verdict::Apply | Verdict::Gap { .. } if stream.recovering() => {
                buffer(stream, event, capacity, now())
            }
            Verdict::Apply => {
                stream.track(&event);
                out.push(Action::Apply(event));
                stream.cursor = Cursor::Live(id);
            }
            Verdict::Gap { from } => {
                let now = now();
                stream.stats.gaps += 1;
                buffer(stream, event, capacity, now);
                stream.start(JobKind::Since(from), now);
            }
        }
    }

    /// Fetches due now; each moves its stream to fetching.
    pub(crate) fn due_jobs(&mut self, now: Instant) -> Vec<Job> {
        let mut jobs = Vec::new();
        for (&key, stream) in &mut self.streams {
            if let Phase::Waiting { kind, at } = stream.phase
                && at <= now
            {
                let job = Job {
                    stream: key,
                    kind,
                    incarnation: stream.incarnation,
                    epoch: stream.epoch,
                    issued: stream.arrivals,
                };
                stream.phase = Phase::Fetching(job);
                jobs.push(job);
            }
        }
        jobs.sort_by_key(|job| job.stream);
        jobs
    }

    /// The earliest time a waiting stream's fetch is due, if any is waiting.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let waits = self.streams.values().filter_map(|stream| match stream.phase {
            Phase::Waiting { at, .. } => Some(at),
            _ => None,
        });
        waits.min()
    }

    /// A fetch's result.
    pub(crate) fn on_result(
        &mut self,
        job: Job,
        result: Result<Recovered, RecoveryError>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(stream) = self.streams.get_mut(&job.stream) else {
            self.orphan_results += 1;
            return;
        };
        if stream.phase != Phase::Fetching(job) {
            stream.stats.discarded_results += 1;
            return;
        }
        let (worker, tier) = job.stream;
        match (job.kind, result) {
            (_, Ok(Recovered::Dump(dump))) => {
                out.push(Action::Clear(worker, tier));
                stream.held = Some(HashSet::default());
                // Only the stream's own events, as with fetch-since answers.
                let own =
                    dump.events.into_iter().filter(|e| e.worker() == worker && e.tier == tier);
                for event in own {
                    // A dump's chains may continue blocks it does not list (another tier's):
                    // the source vouches for them.
                    if let KvEventData::Stored { parent: Some(parent), .. } = &event.event.data
                        && let Some(held) = &mut stream.held
                    {
                        held.insert(parent.0);
                    }
                    stream.track(&event);
                    out.push(Action::Apply(event));
                }
                stream.cursor = Cursor::Live(dump.last_event_id);
                drop_phantoms(stream, dump.last_event_id, job.issued);
                stream.stats.restores += 1;
                stream.phase = Phase::Live;
                drain(stream, now, out);
            }
            (JobKind::Since(from), Ok(Recovered::Events(events))) => {
                let Cursor::Live(last) = stream.cursor else {
                    // The cursor was replaced under the fetch (a restore resets the phase, so
                    // this is defensive): the result answers a question no longer asked.
                    stream.stats.discarded_results += 1;
                    stream.start(JobKind::Full, now);
                    return;
                };
                let mut source_last = from.saturating_sub(1);
                for event in events {
                    let id = event.event.event_id;
                    if event.worker() == worker && event.tier == tier {
                        source_last = source_last.max(id);
                        if id > last {
                            stream.buffer.entry(id).or_insert((job.issued, event));
                        }
                    }
                }
                if drop_phantoms(stream, source_last, job.issued) > 0 {
                    // Events published before the fetch that the source does not know: a
                    // restarted worker's leftovers, or a source that lost them. Either way the
                    // gap is not healed: only a full restore says what the worker holds.
                    stream.start(JobKind::Full, now);
                    return;
                }
                if source_last >= from && !stream.buffer.contains_key(&from) {
                    // The source did not have what it was asked for: a failed attempt.
                    return failed(stream, &self.config, job.kind, now);
                }
                stream.stats.incremental_recoveries += u64::from(source_last >= from);
                stream.phase = Phase::Live;
                drain(stream, now, out);
            }
            (JobKind::Full, Ok(Recovered::Events(_))) | (_, Err(_)) => {
                failed(stream, &self.config, job.kind, now);
            }
        }
    }

    /// Forgets every stream of worker `id` (recoveries in flight are dropped when they return).
    pub(crate) fn remove_worker(&mut self, id: WorkerId) {
        self.streams.retain(|(worker, _), _| worker.id != id);
    }

    /// Marks a stream's state as lost: its next event (or now, if `now` is given) starts a full
    /// restore.
    pub(crate) fn invalidate(&mut self, key: StreamKey, now: Instant) {
        let stream = stream_of(&mut self.streams, &mut self.incarnations, key);
        stream.cursor = Cursor::InvalidatedByBarrier;
        stream.buffer.clear();
        stream.held = None;
        stream.start(JobKind::Full, now);
    }

    /// Every stream of `tier` (for when an index lost some of them without saying which).
    pub(crate) fn streams_of(&self, tier: StorageTier) -> Vec<StreamKey> {
        self.streams.keys().filter(|(_, t)| *t == tier).copied().collect()
    }

    /// Every stream's cursor, sorted (for a snapshot).
    pub(crate) fn cursors(&self) -> Vec<(StreamKey, Cursor)> {
        let mut cursors: Vec<_> = self.streams.iter().map(|(&k, s)| (k, s.cursor)).collect();
        cursors.sort_by_key(|(key, _)| *key);
        cursors
    }

    /// Starts the streams from a snapshot's cursors (live, nothing buffered or pending).
    ///
    /// A fetch in flight answered for the state the snapshot replaces: the epoch moves on so its
    /// result is discarded, and what was buffered for it goes too (the cursor now says what the
    /// index holds, and the next event finds any gap against it).
    pub(crate) fn restore_cursors(&mut self, cursors: &[(StreamKey, Cursor)]) {
        for &(key, cursor) in cursors {
            let stream = stream_of(&mut self.streams, &mut self.incarnations, key);
            stream.cursor = cursor;
            stream.epoch += 1;
            stream.phase = Phase::Live;
            stream.failures = 0;
            stream.buffer.clear();
            stream.gap_since = None;
            stream.held = None;
        }
    }

    pub(crate) fn stats(&self) -> RecoveryStats {
        let mut streams: Vec<_> = self
            .streams
            .iter()
            .map(|(&key, stream)| {
                let mut stats = stream.stats.clone();
                stats.cursor = stream.cursor;
                stats.recovering = stream.recovering();
                stats.buffered = stream.buffer.len();
                (key, stats)
            })
            .collect();
        streams.sort_by_key(|(key, _)| *key);
        RecoveryStats { streams, orphan_results: self.orphan_results }
    }
}

/// Keeps a live event for after the recovery; a full buffer drops its oldest and asks for a
/// full restore instead (the dropped event may have been the one the gap needs).
fn buffer(stream: &mut Stream, event: RouterEvent, capacity: usize, now: Instant) {
    let id = event.event.event_id;
    if stream.buffer.contains_key(&id) {
        stream.stats.duplicates += 1;
        return;
    }
    if stream.buffer.len() >= capacity {
        stream.buffer.pop_first();
        stream.stats.buffer_overflows += 1;
        let restoring = matches!(
            stream.phase,
            Phase::Waiting { kind: JobKind::Full, .. }
                | Phase::Fetching(Job { kind: JobKind::Full, .. })
        );
        if !restoring {
            stream.start(JobKind::Full, now);
        }
    }
    stream.arrivals += 1;
    stream.buffer.insert(id, (stream.arrivals, event));
}

/// Buffered events the source has never published although they arrived before it answered:
/// left over from an earlier run of a restarted worker (its ids are reused), or lost by the
/// source. Dropped; returns how many.
fn drop_phantoms(stream: &mut Stream, source_last: u64, issued: u64) -> usize {
    let before = stream.buffer.len();
    stream.buffer.retain(|&id, &mut (arrival, _)| id <= source_last || arrival > issued);
    let dropped = before - stream.buffer.len();
    stream.stats.phantoms += dropped as u64;
    dropped
}

/// The stream of `key`, made (as a new incarnation) if there is none.
fn stream_of<'a>(
    streams: &'a mut HashMap<StreamKey, Stream, ahash::RandomState>,
    incarnations: &mut u64,
    key: StreamKey,
) -> &'a mut Stream {
    streams.entry(key).or_insert_with(|| {
        *incarnations += 1;
        Stream::new(*incarnations)
    })
}

/// A `Cleared` past the cursor: everything before it is moot. Applies it, drops what was
/// buffered before it and any recovery in flight, and goes on from it.
fn barrier(stream: &mut Stream, event: RouterEvent, now: Instant, out: &mut Vec<Action>) {
    let id = event.event.event_id;
    stream.track(&event);
    out.push(Action::Apply(event));
    stream.cursor = Cursor::Live(id);
    stream.epoch += 1;
    stream.phase = Phase::Live;
    stream.failures = 0;
    stream.stats.barriers += 1;
    drain(stream, now, out);
}

/// Applies the buffered events that follow the cursor, in order. Left with a gap, starts a
/// recovery from the first missing id; left empty, the stream is live and its gap healed.
fn drain(stream: &mut Stream, now: Instant, out: &mut Vec<Action>) {
    let Cursor::Live(mut last) = stream.cursor else { return };
    // The already-applied prefix goes in one step (at the last id there is no next one: all of
    // the buffer is applied already).
    let keep = match last.checked_add(1) {
        Some(next) => stream.buffer.split_off(&next),
        None => BTreeMap::new(),
    };
    stream.stats.duplicates += stream.buffer.len() as u64;
    stream.buffer = keep;
    while let Some(entry) = stream.buffer.first_entry() {
        if last.checked_add(1) != Some(*entry.key()) {
            break;
        }
        last += 1;
        let event = entry.remove().1;
        stream.track(&event);
        out.push(Action::Apply(event));
    }
    stream.cursor = Cursor::Live(last);
    if stream.buffer.is_empty() {
        stream.phase = Phase::Live;
        if let Some(since) = stream.gap_since.take() {
            let took = now.saturating_duration_since(since);
            stream.stats.healed += 1;
            stream.stats.last_heal = Some(took);
            stream.stats.max_heal = stream.stats.max_heal.max(Some(took));
        }
    } else {
        stream.stats.gaps += 1;
        let since = stream.gap_since;
        // Not empty, so something past `last` is buffered: `last` is below `u64::MAX`.
        stream.start(JobKind::Since(last.saturating_add(1)), now);
        stream.gap_since = since.or(Some(now));
    }
}

/// A fetch failed: retry after the backoff, falling back to a full restore after too many
/// failed incremental attempts.
fn failed(stream: &mut Stream, config: &RecoveryConfig, kind: JobKind, now: Instant) {
    stream.stats.failed_fetches += 1;
    stream.failures += 1;
    let kind = match kind {
        JobKind::Since(_) if stream.failures >= config.incremental_attempts => JobKind::Full,
        kind => kind,
    };
    let wait: Duration = config.backoff_after(stream.failures);
    // A validated config bounds the wait; saturate anyway rather than overflow an `Instant`.
    let at = now.checked_add(wait).unwrap_or(now + MAX_BACKOFF);
    stream.phase = Phase::Waiting { kind, at };
}
