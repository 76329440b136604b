//! The state machine's cases, one decision at a time.

use std::time::{Duration, Instant};

use super::state::{Action, RecoveryState};
use super::*;
use crate::event::{RouterEvent, SequenceHash, StorageTier, StoredBlock, Worker};

const W: Worker = Worker::new(1, 0);
const KEY: StreamKey = (W, StorageTier::Device);

fn stored(id: u64) -> RouterEvent {
    RouterEvent::stored(W, id, None, vec![StoredBlock::new(id, id.wrapping_add(1_000))])
}

fn applied(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Apply(e) => Some(e.event.event_id),
            Action::Clear(..) => None,
        })
        .collect()
}

/// A state whose stream is live at `cursor` (a `Cleared` barrier put it there).
fn live_at(cursor: u64, now: Instant) -> RecoveryState {
    let mut state = RecoveryState::new(RecoveryConfig::default());
    let mut out = Vec::new();
    state.on_event(RouterEvent::cleared(W, cursor), || now, &mut out);
    assert_eq!(applied(&out), [cursor]);
    state
}

fn stream(state: &RecoveryState) -> StreamStats {
    state.stats().stream(W, StorageTier::Device).cloned().expect("the stream")
}

#[test]
fn cursor_at_35_with_1_to_40_queued_applies_36_first_then_37_to_40_in_order() {
    let now = Instant::now();
    let mut state = live_at(35, now);
    let mut out = Vec::new();
    for id in (37..=40).rev() {
        state.on_event(stored(id), || now, &mut out);
    }
    assert!(out.is_empty(), "nothing past a gap is applied");
    let jobs = state.due_jobs(now);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].kind, JobKind::Since(36));
    // The source answers with more than asked: 1..=40.
    let events = (1..=40).map(stored).collect();
    state.on_result(jobs[0], Ok(Recovered::Events(events)), now, &mut out);
    assert_eq!(applied(&out), [36, 37, 38, 39, 40]);
    let stats = stream(&state);
    assert_eq!((stats.cursor, stats.recovering, stats.buffered), (Cursor::Live(40), false, 0));
    assert_eq!((stats.gaps, stats.incremental_recoveries, stats.healed), (1, 1, 1));
    assert!(state.due_jobs(now + Duration::from_secs(9)).is_empty());
}

#[test]
fn a_stale_gappy_queue_behind_cursor_20_completes_with_nothing_pending() {
    let now = Instant::now();
    let mut state = live_at(10, now);
    let mut out = Vec::new();
    for id in [13, 14, 18, 19] {
        state.on_event(stored(id), || now, &mut out);
    }
    let jobs = state.due_jobs(now);
    assert_eq!(jobs[0].kind, JobKind::Since(11));
    // The source has moved on: its dump covers up to 20.
    let dump = Dump { events: vec![stored(20)], last_event_id: 20 };
    state.on_result(jobs[0], Ok(Recovered::Dump(dump)), now, &mut out);
    assert_eq!(out[0], Action::Clear(W, StorageTier::Device));
    assert_eq!(applied(&out[1..]), [20]);
    let stats = stream(&state);
    assert_eq!((stats.cursor, stats.recovering, stats.buffered), (Cursor::Live(20), false, 0));
    assert_eq!(stats.duplicates, 4, "13, 14, 18 and 19 pruned in one step");
    assert!(state.due_jobs(now).is_empty(), "nothing pending");
}

#[test]
fn the_first_event_of_a_stream_waits_for_a_full_restore() {
    let now = Instant::now();
    let mut state = RecoveryState::new(RecoveryConfig::default());
    let mut out = Vec::new();
    state.on_event(stored(5), || now, &mut out);
    let jobs = state.due_jobs(now);
    assert_eq!(jobs.iter().map(|j| j.kind).collect::<Vec<_>>(), [JobKind::Full]);
    state.on_event(stored(6), || now, &mut out);
    assert!(out.is_empty());
    // The dump covers 5 (the source records before it publishes); 6 came after.
    let dump = Dump { events: vec![stored(3)], last_event_id: 5 };
    state.on_result(jobs[0], Ok(Recovered::Dump(dump)), now, &mut out);
    assert_eq!(applied(&out), [3, 6]);
    assert_eq!(stream(&state).restores, 1);
}

#[test]
fn a_cleared_barrier_drops_the_fetch_in_flight_and_what_was_buffered_before_it() {
    let now = Instant::now();
    let mut state = live_at(1, now);
    let mut out = Vec::new();
    state.on_event(stored(4), || now, &mut out);
    state.on_event(stored(9), || now, &mut out);
    let job = state.due_jobs(now)[0];
    state.on_event(RouterEvent::cleared(W, 7), || now, &mut out);
    assert_eq!(applied(&out), [7], "the barrier applies at once");
    // 9 follows a new gap (8): a fresh fetch; the old one's result is thrown away.
    state.on_result(job, Ok(Recovered::Events((2..=9).map(stored).collect())), now, &mut out);
    assert_eq!(applied(&out), [7]);
    assert_eq!(stream(&state).discarded_results, 1);
    let jobs = state.due_jobs(now);
    assert_eq!(jobs[0].kind, JobKind::Since(8));
    state.on_result(jobs[0], Ok(Recovered::Events(vec![stored(8), stored(9)])), now, &mut out);
    assert_eq!(applied(&out), [7, 8, 9]);
}

#[test]
fn a_restarted_worker_is_restored_not_ignored() {
    let now = Instant::now();
    let mut state = live_at(50, now);
    let mut out = Vec::new();
    state.on_event(stored(1), || now, &mut out);
    let job = state.due_jobs(now)[0];
    assert_eq!(job.kind, JobKind::Full);
    state.on_event(stored(2), || now, &mut out);
    assert!(out.is_empty());
    let dump = Dump { events: vec![stored(1)], last_event_id: 1 };
    state.on_result(job, Ok(Recovered::Dump(dump)), now, &mut out);
    assert_eq!(out[0], Action::Clear(W, StorageTier::Device));
    assert_eq!(applied(&out), [1, 2]);
    assert_eq!(stream(&state).restarts, 1);
}

#[test]
fn failed_fetches_back_off_then_fall_back_to_a_full_restore() {
    let now = Instant::now();
    let mut state = live_at(1, now);
    let mut out = Vec::new();
    state.on_event(stored(3), || now, &mut out);
    let mut at = now;
    for attempt in 1..=3 {
        let job = state.due_jobs(at)[0];
        assert_eq!(job.kind, JobKind::Since(2), "attempt {attempt}");
        let error = RecoveryError::Unavailable("down".into());
        state.on_result(job, Err(error), at, &mut out);
        assert!(state.due_jobs(at).is_empty(), "backing off");
        at = state.next_due().expect("a retry is scheduled");
    }
    assert_eq!(at - now, Duration::from_millis(10 + 20 + 40));
    assert_eq!(state.due_jobs(at)[0].kind, JobKind::Full, "three failures: a full restore");
    assert_eq!(stream(&state).failed_fetches, 3);
}

#[test]
fn a_full_buffer_drops_its_oldest_and_asks_for_a_full_restore() {
    let now = Instant::now();
    let config = RecoveryConfig { buffer_capacity: 3, ..RecoveryConfig::default() };
    let mut state = RecoveryState::new(config);
    let mut out = Vec::new();
    state.on_event(RouterEvent::cleared(W, 1), || now, &mut out);
    for id in 3..=6 {
        state.on_event(stored(id), || now, &mut out);
    }
    let stats = stream(&state);
    assert_eq!((stats.buffered, stats.buffer_overflows), (3, 1));
    assert_eq!(state.due_jobs(now)[0].kind, JobKind::Full);
}

#[test]
fn results_for_a_removed_worker_are_dropped() {
    let now = Instant::now();
    let mut state = live_at(1, now);
    let mut out = Vec::new();
    state.on_event(stored(3), || now, &mut out);
    let job = state.due_jobs(now)[0];
    state.remove_worker(W.id);
    state.on_result(job, Ok(Recovered::Events(vec![stored(2)])), now, &mut out);
    assert!(out.is_empty());
    assert_eq!(state.stats().orphan_results, 1);
    assert!(state.stats().stream(KEY.0, KEY.1).is_none());
}

#[test]
fn duplicates_are_dropped_and_counted() {
    let now = Instant::now();
    let mut state = live_at(1, now);
    let mut out = Vec::new();
    for id in [2, 2, 3, 2, 3] {
        state.on_event(stored(id), || now, &mut out);
    }
    assert_eq!(applied(&out), [2, 3]);
    assert_eq!(stream(&state).duplicates, 3);
}

#[test]
fn events_left_over_from_before_a_restart_are_dropped_not_waited_for() {
    let now = Instant::now();
    let mut state = live_at(1, now);
    let mut out = Vec::new();
    // 7 was published by the worker's previous run; its new run has published only up to 1.
    state.on_event(stored(7), || now, &mut out);
    let job = state.due_jobs(now)[0];
    assert_eq!(job.kind, JobKind::Since(2));
    state.on_result(job, Ok(Recovered::Events(Vec::new())), now, &mut out);
    let stats = stream(&state);
    assert_eq!((stats.phantoms, stats.buffered, stats.healed), (1, 0, 0));
    assert!(out.is_empty());
    // Only a full restore says what the new run holds: the stream is not taken as healed.
    let full = state.due_jobs(now)[0];
    assert_eq!(full.kind, JobKind::Full);
    let dump = Dump { events: vec![stored(1)], last_event_id: 1 };
    state.on_result(full, Ok(Recovered::Dump(dump)), now, &mut out);
    assert_eq!(applied(&out), [1]);
    let stats = stream(&state);
    assert_eq!((stats.recovering, stats.buffered, stats.restores), (false, 0, 1));
}

/// A gap whose fetch comes back empty, while an event past it was buffered before the fetch:
/// the source lost what the worker published (or the worker restarted). The buffered event is
/// not dropped as healed: the stream is restored in full, and ends holding it.
#[test]
fn an_empty_answer_to_a_gap_restores_the_stream_rather_than_calling_it_healed() {
    let now = Instant::now();
    let mut state = live_at(1, now);
    let mut out = Vec::new();
    state.on_event(stored(4), || now, &mut out);
    let job = state.due_jobs(now)[0];
    assert_eq!(job.kind, JobKind::Since(2));
    state.on_result(job, Ok(Recovered::Events(Vec::new())), now, &mut out);
    let stats = stream(&state);
    assert_eq!((stats.healed, stats.recovering), (0, true), "the gap was taken as healed");
    let full = state.due_jobs(now)[0];
    assert_eq!(full.kind, JobKind::Full);
    let dump = Dump { events: (1..=4).map(stored).collect(), last_event_id: 4 };
    state.on_result(full, Ok(Recovered::Dump(dump)), now, &mut out);
    assert_eq!(applied(&out), [1, 2, 3, 4]);
    let stats = stream(&state);
    assert_eq!((stats.healed, stats.recovering, stats.restores), (1, false, 1));
}

#[test]
fn a_barrier_at_the_last_possible_id_neither_overflows_nor_keeps_stale_events() {
    let now = Instant::now();
    let mut state = live_at(u64::MAX - 3, now);
    let mut out = Vec::new();
    state.on_event(stored(u64::MAX - 1), || now, &mut out);
    assert!(out.is_empty(), "past a gap");
    state.on_event(RouterEvent::cleared(W, u64::MAX), || now, &mut out);
    assert_eq!(applied(&out), [u64::MAX]);
    let stats = stream(&state);
    assert_eq!(
        (stats.cursor, stats.recovering, stats.buffered),
        (Cursor::Live(u64::MAX), false, 0)
    );
}

#[test]
fn a_restore_while_a_fetch_is_pending_discards_its_result() {
    let now = Instant::now();
    let mut state = live_at(10, now);
    let mut out = Vec::new();
    state.on_event(stored(12), || now, &mut out);
    let jobs = state.due_jobs(now);
    assert_eq!(jobs[0].kind, JobKind::Since(11));
    state.restore_cursors(&[(KEY, Cursor::Initial)]);
    state.on_result(jobs[0], Ok(Recovered::Events(vec![stored(11)])), now, &mut out);
    assert!(out.is_empty(), "the result answered for the replaced state");
    let stats = stream(&state);
    assert_eq!((stats.cursor, stats.recovering, stats.buffered), (Cursor::Initial, false, 0));
    assert_eq!(stats.discarded_results, 1);
    // The next event restores the stream from a full dump.
    state.on_event(stored(13), || now, &mut out);
    assert_eq!(state.due_jobs(now)[0].kind, JobKind::Full);
}

/// A `Stored` of block `hash` continuing `parent`.
fn chained(id: u64, parent: Option<u64>, hash: u64) -> RouterEvent {
    RouterEvent::stored(W, id, parent.map(SequenceHash), vec![StoredBlock::new(hash, hash)])
}

#[test]
fn a_restart_whose_first_events_were_lost_is_restored_not_taken_for_duplicates() {
    let now = Instant::now();
    let mut state = live_at(0, now);
    let mut out = Vec::new();
    // Run one: ids 1..=99, one chain.
    for id in 1..=99 {
        state.on_event(chained(id, (id > 1).then(|| id - 1), id), || now, &mut out);
    }
    assert_eq!(applied(&out).len(), 99);
    out.clear();
    // Run two: ids 0 and 1 (blocks 1_000 and 1_001) lost; 2 continues block 1_001.
    state.on_event(chained(2, Some(1_001), 1_002), || now, &mut out);
    state.on_event(chained(3, Some(1_002), 1_003), || now, &mut out);
    assert!(out.is_empty(), "nothing applied on the old run's state");
    let jobs = state.due_jobs(now);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].kind, JobKind::Full, "the stream is restored from a full dump");
    let events = vec![
        chained(0, None, 1_000),
        chained(1, Some(1_000), 1_001),
        chained(2, Some(1_001), 1_002),
        chained(3, Some(1_002), 1_003),
    ];
    let dump = Dump { events, last_event_id: 3 };
    state.on_result(jobs[0], Ok(Recovered::Dump(dump)), now, &mut out);
    assert_eq!(out[0], Action::Clear(W, StorageTier::Device));
    assert_eq!(applied(&out[1..]), [0, 1, 2, 3]);
    let stats = stream(&state);
    assert_eq!((stats.cursor, stats.recovering, stats.restarts), (Cursor::Live(3), false, 1));
}

#[test]
fn a_duplicate_of_a_chained_event_is_only_a_duplicate() {
    let now = Instant::now();
    let mut state = live_at(0, now);
    let mut out = Vec::new();
    for id in 1..=5 {
        state.on_event(chained(id, (id > 1).then(|| id - 1), id), || now, &mut out);
    }
    state.on_event(chained(3, Some(2), 3), || now, &mut out);
    assert_eq!(applied(&out), [1, 2, 3, 4, 5]);
    assert!(state.due_jobs(now).is_empty());
    assert_eq!((stream(&state).duplicates, stream(&state).restarts), (1, 0));
}

#[test]
fn a_dump_applies_only_its_own_streams_events() {
    let now = Instant::now();
    let mut state = RecoveryState::new(RecoveryConfig::default());
    let mut out = Vec::new();
    state.on_event(stored(3), || now, &mut out);
    let jobs = state.due_jobs(now);
    assert_eq!(jobs[0].kind, JobKind::Full);
    state.on_event(stored(5), || now, &mut out);
    let mut host = stored(4);
    host.tier = StorageTier::HostPinned;
    let other = RouterEvent::stored(Worker::new(2, 0), 4, None, vec![StoredBlock::new(9, 9)]);
    let dump = Dump { events: vec![stored(4), host, other], last_event_id: 4 };
    state.on_result(jobs[0], Ok(Recovered::Dump(dump)), now, &mut out);
    assert_eq!(out[0], Action::Clear(W, StorageTier::Device));
    let rest: Vec<_> = out[1..].iter().collect();
    assert_eq!(rest, [&Action::Apply(stored(4)), &Action::Apply(stored(5))]);
}

#[test]
fn a_fetch_of_a_removed_incarnation_is_not_taken_for_the_re_added_ones() {
    let now = Instant::now();
    let mut state = RecoveryState::new(RecoveryConfig::default());
    let mut out = Vec::new();
    // The first incarnation's first event asks for a full restore.
    state.on_event(stored(1), || now, &mut out);
    let old = state.due_jobs(now)[0];
    // Removed and added again: the new incarnation asks for the same kind of restore.
    state.remove_worker(W.id);
    state.on_event(stored(1), || now, &mut out);
    let new = state.due_jobs(now)[0];
    assert_ne!(old, new, "two incarnations' fetches must never compare equal");
    // The old incarnation's answer comes back first: it is discarded, not applied.
    let dump = Dump { events: vec![stored(7), stored(8), stored(9)], last_event_id: 9 };
    state.on_result(old, Ok(Recovered::Dump(dump)), now, &mut out);
    assert!(out.is_empty(), "the old incarnation's blocks were applied: {out:?}");
    assert_eq!(stream(&state).discarded_results, 1);
}
