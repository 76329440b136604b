//! The catch-up state machine, frame by frame, without a server.

use std::time::{Duration, Instant};

use super::*;
use crate::event::{SequenceHash, Worker};
use crate::sequences::{SequenceEvent, SequenceEventData};
use crate::sync::Ordering;

const PEER: u64 = 2;

fn add(id: &str) -> SequenceEvent {
    SequenceEvent {
        router_id: PEER,
        request_id: id.into(),
        worker: Worker::new(1, 0),
        data: SequenceEventData::AddRequest {
            blocks: Some(vec![SequenceHash(5)]),
            isl: 16,
            overlap: 0,
        },
    }
}

fn free(id: &str) -> SequenceEvent {
    SequenceEvent { data: SequenceEventData::Free, ..add(id) }
}

fn event(incarnation: u64, seq: u64, event: SequenceEvent) -> Frame {
    Frame::new(PEER, incarnation, Body::Events { first: seq, events: vec![event] })
}

fn beat(incarnation: u64, last_seq: u64) -> Frame {
    Frame::new(PEER, incarnation, Body::Beat { last_seq })
}

fn state(id: &str) -> RequestState {
    RequestState {
        request_id: id.into(),
        worker: Worker::new(1, 0),
        blocks: Some(vec![SequenceHash(5)]),
        isl: 16,
        overlap: 0,
        prefill_completed: false,
        output_blocks: 0,
    }
}

fn snapshot(incarnation: u64, seq: u64, part: u32, last: bool, ids: &[&str]) -> Frame {
    let requests = ids.iter().map(|id| state(id)).collect();
    Frame::new(PEER, incarnation, Body::Snapshot { seq, part, last, requests })
}

struct Harness {
    views: PeerViews,
    stats: Counters,
    now: Instant,
    /// The token of the last snapshot asked: what the peer's answer carries.
    token: u64,
}

/// Actions as the tests read them: events expanded (progress counted out), peers asked.
struct Out {
    events: Vec<SequenceEvent>,
    ask: Vec<u64>,
}

impl Harness {
    fn new() -> Self {
        Self {
            views: PeerViews::new(Duration::from_secs(2), Duration::from_secs(5), 100),
            stats: Counters::default(),
            now: Instant::now(),
            token: 0,
        }
    }

    fn out(&mut self, actions: Actions) -> Out {
        let mut events = Vec::new();
        for change in actions.events {
            events.extend((0..change.times).map(|_| change.event.clone()));
        }
        if let Some(&(_, token)) = actions.ask.last() {
            self.token = token;
        }
        Out { events, ask: actions.ask.iter().map(|&(origin, _)| origin).collect() }
    }

    fn stream(&mut self, frame: Frame) -> Out {
        let mut out = Actions::default();
        self.views.on_stream(frame, self.now, &self.stats, &mut out);
        self.out(out)
    }

    /// A part of the answer to the last snapshot asked.
    fn snapshot(&mut self, frame: Frame) -> Out {
        self.answer(self.token, frame)
    }

    /// A part of the answer to the request with `token`.
    fn answer(&mut self, token: u64, frame: Frame) -> Out {
        let mut out = Actions::default();
        self.views.on_snapshot(token, frame, self.now, &self.stats, &mut out);
        self.out(out)
    }

    fn tick(&mut self, after: Duration) -> Out {
        self.now += after;
        let mut out = Actions::default();
        self.views.tick(self.now, Duration::from_secs(300), &self.stats, &mut out);
        self.out(out)
    }
}

fn ids(actions: &Out) -> Vec<(String, &'static str)> {
    actions
        .events
        .iter()
        .map(|e| {
            let kind = match e.data {
                SequenceEventData::AddRequest { .. } => "add",
                SequenceEventData::Free => "free",
                _ => "other",
            };
            (e.request_id.as_str().to_owned(), kind)
        })
        .collect()
}

#[test]
fn a_stream_followed_from_its_start_needs_no_snapshot_and_drops_repeats() {
    let mut h = Harness::new();
    assert_eq!(ids(&h.stream(event(1, 1, add("a")))), [("a".into(), "add")]);
    assert_eq!(ids(&h.stream(event(1, 2, add("b")))), [("b".into(), "add")]);
    assert!(h.stream(event(1, 2, add("b"))).events.is_empty());
    assert!(h.stream(beat(1, 2)).ask.is_empty());
    assert_eq!(h.stats.duplicates.load(Ordering::Relaxed), 1);
    assert_eq!(h.stats.snapshots_requested.load(Ordering::Relaxed), 0);
    assert!(h.views.all_synced(h.now));
}

#[test]
fn joining_a_running_peer_asks_for_a_snapshot_then_applies_what_came_after() {
    let mut h = Harness::new();
    // The peer has made 10 changes; we hear change 11 first.
    let first = h.stream(event(1, 11, add("k")));
    assert_eq!((first.events.len(), first.ask.clone()), (0, vec![PEER]));
    assert!(h.stream(event(1, 12, free("x"))).ask.is_empty(), "asked once");
    // The snapshot is as of change 11 (it already holds k; x is still in flight).
    let out = h.snapshot(snapshot(1, 11, 0, true, &["x", "k"]));
    let mut got = ids(&out);
    got[..2].sort();
    assert_eq!(got, [("k".into(), "add"), ("x".into(), "add"), ("x".into(), "free")]);
    assert!(h.views.all_synced(h.now));
    assert_eq!(ids(&h.stream(event(1, 13, add("m")))), [("m".into(), "add")]);
}

#[test]
fn a_skipped_number_or_a_heartbeat_ahead_is_a_gap_healed_by_a_snapshot() {
    let mut h = Harness::new();
    h.stream(event(1, 1, add("a")));
    // Change 2 (add b) is lost; change 3 arrives.
    let out = h.stream(event(1, 3, add("c")));
    assert_eq!((out.events.len(), out.ask.clone()), (0, vec![PEER]));
    let healed = h.snapshot(snapshot(1, 2, 0, true, &["a", "b"]));
    assert_eq!(ids(&healed), [("b".into(), "add"), ("c".into(), "add")]);

    // A lost tail: the beat says 4 changes, only 3 arrived.
    assert_eq!(h.stream(beat(1, 4)).ask, [PEER]);
    let healed = h.snapshot(snapshot(1, 4, 0, true, &["b", "c"]));
    assert_eq!(ids(&healed), [("a".into(), "free")]);
    assert_eq!(h.stats.gaps.load(Ordering::Relaxed), 2);
    assert_eq!(h.stats.snapshots_applied.load(Ordering::Relaxed), 2);
}

#[test]
fn a_snapshot_comes_in_parts_and_a_lost_part_is_asked_again() {
    let mut h = Harness::new();
    assert_eq!(h.stream(beat(1, 7)).ask, [PEER]);
    assert!(h.snapshot(snapshot(1, 7, 0, false, &["a"])).events.is_empty());
    // Part 1 is lost; part 2 makes the answer unusable.
    assert!(h.snapshot(snapshot(1, 7, 2, true, &["c"])).events.is_empty());
    assert!(!h.views.all_synced(h.now));
    // The next tick asks again; the new answer is whole.
    assert_eq!(h.tick(Duration::from_millis(500)).ask, [PEER]);
    h.snapshot(snapshot(1, 8, 0, false, &["a"]));
    h.snapshot(snapshot(1, 8, 1, false, &["b"]));
    let out = h.snapshot(snapshot(1, 8, 2, true, &[]));
    let mut got = ids(&out);
    got.sort();
    assert_eq!(got, [("a".into(), "add"), ("b".into(), "add")]);
    assert!(h.views.all_synced(h.now));
}

#[test]
fn an_unanswered_snapshot_is_asked_again_after_the_timeout() {
    let mut h = Harness::new();
    assert_eq!(h.stream(beat(1, 3)).ask, [PEER]);
    assert!(h.tick(Duration::from_millis(500)).ask.is_empty(), "still waiting");
    assert_eq!(h.tick(Duration::from_secs(2)).ask, [PEER]);
}

#[test]
fn a_restarted_peer_loses_its_requests_and_old_frames_are_stale() {
    let mut h = Harness::new();
    h.stream(event(1, 1, add("a")));
    h.stream(event(1, 2, add("b")));
    let out = h.stream(event(2, 1, add("c")));
    let mut got = ids(&out);
    got.sort();
    assert_eq!(got, [("a".into(), "free"), ("b".into(), "free"), ("c".into(), "add")]);
    assert!(h.stream(event(1, 3, add("d"))).events.is_empty());
    assert_eq!(h.stats.stale.load(Ordering::Relaxed), 1);
    assert_eq!(h.stats.peer_restarts.load(Ordering::Relaxed), 1);
}

#[test]
fn an_overflowing_buffer_is_dropped_and_healed_by_a_later_snapshot() {
    let mut h = Harness {
        views: PeerViews::new(Duration::from_secs(2), Duration::from_secs(5), 3),
        ..Harness::new()
    };
    h.stream(beat(1, 5));
    for seq in 6..=10 {
        h.stream(event(1, seq, add(&format!("r{seq}"))));
    }
    assert_eq!(h.stats.buffer_overflows.load(Ordering::Relaxed), 1);
    // The snapshot is as of 5; 6..=8 were dropped from the buffer, 9 is next: a gap again.
    let out = h.snapshot(snapshot(1, 5, 0, true, &[]));
    assert_eq!(out.ask, [PEER]);
    assert!(!h.views.all_synced(h.now));
    let out = h.snapshot(snapshot(1, 10, 0, true, &["r6", "r7", "r8", "r9", "r10"]));
    assert_eq!(out.events.len(), 5);
    assert!(h.views.all_synced(h.now));
}

#[test]
fn an_event_naming_another_sender_is_dropped() {
    let mut h = Harness::new();
    let forged = SequenceEvent { router_id: 99, ..add("a") };
    assert!(h.stream(event(1, 1, forged)).events.is_empty());
    assert_eq!(h.stats.decode_errors.load(Ordering::Relaxed), 1);
}

#[test]
fn a_silent_peer_is_neither_asked_nor_waited_for_until_it_is_heard_again() {
    let mut h = Harness::new();
    assert_eq!(h.stream(beat(1, 3)).ask, [PEER]);
    assert!(!h.views.all_synced(h.now));
    // The peer dies before answering: after the silence it is no longer waited for.
    assert_eq!(h.tick(Duration::from_secs(2)).ask, [PEER]);
    assert!(h.tick(Duration::from_secs(4)).ask.is_empty());
    assert!(h.views.all_synced(h.now));
    assert_eq!(h.views.live_peers(h.now), 0);
    // Heard again: asked again.
    assert_eq!(h.stream(beat(1, 3)).ask, [PEER]);
    assert_eq!(h.views.live_peers(h.now), 1);
}

#[test]
fn a_batch_applies_change_by_change() {
    let mut h = Harness::new();
    let batch = |first, events| Frame::new(PEER, 1, Body::Events { first, events });
    let out = h.stream(batch(1, vec![add("a"), add("b"), free("a")]));
    assert_eq!(ids(&out), [("a".into(), "add"), ("b".into(), "add"), ("a".into(), "free")]);
    // A batch overlapping what was applied: the repeats are dropped, the rest applies.
    let out = h.stream(batch(3, vec![free("a"), add("c")]));
    assert_eq!(ids(&out), [("c".into(), "add")]);
    assert_eq!(h.stats.duplicates.load(Ordering::Relaxed), 1);
}

#[test]
fn change_numbers_at_the_top_of_u64_are_refused_not_a_panic() {
    let mut h = Harness::new();
    h.stream(event(1, 1, add("a")));
    let top = Frame::new(PEER, 1, Body::Events { first: u64::MAX, events: vec![add("b")] });
    assert!(h.stream(top).events.is_empty());
    let wraps =
        Frame::new(PEER, 1, Body::Events { first: u64::MAX - 1, events: vec![add("c"); 2] });
    assert!(h.stream(wraps).events.is_empty());
    assert_eq!(h.stats.decode_errors.load(Ordering::Relaxed), 2);
    // The stream goes on where it was.
    assert_eq!(ids(&h.stream(event(1, 2, add("d")))), [("d".into(), "add")]);
    assert!(h.views.all_synced(h.now));
}

#[test]
fn a_late_answer_to_an_earlier_request_is_not_taken_for_the_current_one() {
    let mut h = Harness::new();
    h.stream(event(1, 1, add("a")));
    h.stream(event(1, 2, add("b")));
    // A gap: the first request goes unanswered in time, a second is asked.
    assert_eq!(h.stream(event(1, 4, add("d"))).ask, [PEER]);
    let first = h.token;
    assert_eq!(h.tick(Duration::from_secs(3)).ask, [PEER]);
    let second = h.token;
    assert_ne!(first, second);
    // The first request's answer arrives now, late, as of change 1 (older than applied).
    assert!(h.answer(first, snapshot(1, 1, 0, true, &["a"])).events.is_empty());
    assert!(!h.views.all_synced(h.now));
    // The second request's answer is taken.
    let out = h.answer(second, snapshot(1, 3, 0, true, &["a", "b", "c"]));
    assert_eq!(ids(&out), [("c".into(), "add"), ("d".into(), "add")]);
    assert!(h.views.all_synced(h.now));
}

#[test]
fn parts_of_two_answers_interleaving_leave_the_current_one_whole() {
    let mut h = Harness::new();
    assert_eq!(h.stream(beat(1, 5)).ask, [PEER]);
    let first = h.token;
    assert_eq!(h.tick(Duration::from_secs(3)).ask, [PEER]);
    let second = h.token;
    // Both answers stream into the inbox at once, part by part.
    h.answer(first, snapshot(1, 4, 0, false, &["a"]));
    h.answer(second, snapshot(1, 5, 0, false, &["a"]));
    h.answer(first, snapshot(1, 4, 1, false, &["b"]));
    h.answer(second, snapshot(1, 5, 1, false, &["b"]));
    h.answer(first, snapshot(1, 4, 2, true, &[]));
    let out = h.answer(second, snapshot(1, 5, 2, true, &["c"]));
    let mut got = ids(&out);
    got.sort();
    assert_eq!(got, [("a".into(), "add"), ("b".into(), "add"), ("c".into(), "add")]);
    assert!(h.views.all_synced(h.now));
}

#[test]
fn snapshot_progress_is_bounded_and_carried_as_a_count() {
    let mut h = Harness::new();
    assert_eq!(h.stream(beat(1, 5)).ask, [PEER]);
    let busy = |blocks| RequestState { output_blocks: blocks, ..state("a") };
    let frame = |part, last, blocks| {
        let requests =
            vec![RequestState { request_id: format!("r{part}").as_str().into(), ..busy(blocks) }];
        Frame::new(PEER, 1, Body::Snapshot { seq: 5, part, last, requests })
    };
    // Parts whose progress together passes the bound: the answer is given up, nothing applied.
    let per_part = super::super::frame::MAX_OUTPUT_BLOCKS;
    let parts = (MAX_SNAPSHOT_PROGRESS / u64::from(per_part)) as u32 + 1;
    for part in 0..parts {
        assert!(h.snapshot(frame(part, part + 1 == parts, per_part)).events.is_empty());
    }
    assert!(!h.views.all_synced(h.now));
    // A real answer's progress arrives as one counted change.
    assert_eq!(h.tick(Duration::from_secs(1)).ask, [PEER]);
    let mut actions = Actions::default();
    h.views.on_snapshot(h.token, frame(0, true, 40), h.now, &h.stats, &mut actions);
    let progress: Vec<_> = actions
        .events
        .iter()
        .filter(|change| change.event.data == SequenceEventData::AddOutputBlock)
        .map(|change| change.times)
        .collect();
    assert_eq!(progress, [40]);
    assert!(h.views.all_synced(h.now));
}
