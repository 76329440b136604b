//! Entry points for the fuzz targets (`fuzz/fuzz_targets/nats_*.rs`) and their corpus replay
//! on stable (`tests/fuzz_corpus.rs`): what a peer sends, checked from raw bytes. Not API.

use std::time::{Duration, Instant};

use super::frame::{Body, Frame, MAX_SNAPSHOT_PROGRESS, RequestState};
use super::mirror::Mirror;
use super::stats::Counters;
use super::views::{Actions, PeerViews};
use crate::event::{SequenceHash, Worker};
use crate::sequences::SequenceEventData;

/// Decodes `bytes` as a peer's frame: it must refuse or decode, never panic, and what it
/// decodes must encode back to a frame that decodes the same.
pub fn decode_frame(bytes: &[u8]) -> Result<(), String> {
    let Ok(frame) = Frame::decode(bytes) else { return Ok(()) };
    match Frame::decode(&frame.encode()) {
        Ok(again) if again == frame => Ok(()),
        Ok(again) => Err(format!("{frame:?} re-decodes as {again:?}")),
        Err(error) => Err(format!("{frame:?} does not re-decode: {error}")),
    }
}

const PEER: u64 = 7;

/// Reads fuzz bytes as a peer's snapshot answers arriving in any order: parts of the current
/// request or an earlier one, duplicated, lost, with forged numbers and sizes, between ticks.
/// Checks that replaying what the views hand the tracker gives exactly what they believe the
/// peer holds, that no answer hands over more progress than the bound, and that a whole
/// answer to the current request, sent last, is taken.
pub fn reassemble(data: &[u8]) -> Result<(), String> {
    let stats = Counters::default();
    let mut now = Instant::now();
    let mut views = PeerViews::new(Duration::from_secs(2), Duration::from_secs(60), 64);
    let mut tracker = Mirror::default();
    let mut tokens = Vec::new();
    let mut actions = Actions::default();
    views.on_stream(Frame::new(PEER, 1, Body::Beat { last_seq: 3 }), now, &stats, &mut actions);
    step(&mut tracker, &mut tokens, actions, now)?;
    for op in data.chunks(6) {
        let byte = |i: usize| op.get(i).copied().unwrap_or(0);
        let mut actions = Actions::default();
        match byte(0) % 8 {
            0 => {
                now += Duration::from_millis(u64::from(byte(1)) * 20);
                views.tick(now, Duration::MAX, &stats, &mut actions);
            }
            1 => {
                let beat = Body::Beat { last_seq: u64::from(byte(1)) };
                views.on_stream(Frame::new(PEER, 1, beat), now, &stats, &mut actions);
            }
            _ => {
                // A part: which request (the current one, an earlier one, or a forged token).
                let token = match byte(1) % 4 {
                    0 => u64::from(byte(1)),
                    _ => tokens.iter().rev().nth(usize::from(byte(1) % 3)).copied().unwrap_or(1),
                };
                let output_blocks = match byte(4) % 4 {
                    0 => u32::MAX,
                    1 => 1 << 20,
                    _ => u32::from(byte(4)),
                };
                let requests = (0..byte(3) % 4)
                    .map(|i| state(byte(2).wrapping_add(i) % 8, output_blocks))
                    .collect();
                let body = Body::Snapshot {
                    seq: u64::from(byte(5) % 8),
                    part: u32::from(byte(2) % 4),
                    last: byte(3) & 0x80 != 0,
                    requests,
                };
                // Through the wire format, as a peer's part arrives.
                let Ok(frame) = Frame::decode(&Frame::new(PEER, 1, body).encode()) else {
                    continue;
                };
                views.on_snapshot(token, frame, now, &stats, &mut actions);
            }
        }
        step(&mut tracker, &mut tokens, actions, now)?;
    }
    agree(&views, &tracker)?;
    // Finally a whole answer to the current request (asking first if nothing is pending).
    let mut actions = Actions::default();
    views.tick(now + Duration::from_secs(5), Duration::MAX, &stats, &mut actions);
    now += Duration::from_secs(5);
    step(&mut tracker, &mut tokens, actions, now)?;
    if !views.all_synced(now) {
        let token = *tokens.last().ok_or("nothing was ever asked")?;
        let requests = vec![state(1, 2), state(2, 0)];
        let body = Body::Snapshot { seq: 3, part: 0, last: true, requests };
        let mut actions = Actions::default();
        views.on_snapshot(token, Frame::new(PEER, 1, body), now, &stats, &mut actions);
        step(&mut tracker, &mut tokens, actions, now)?;
        if !views.all_synced(now) {
            return Err("a whole answer to the current request was not taken".into());
        }
    }
    agree(&views, &tracker)
}

/// Hands `actions` to the tracker (a mirror here) and notes the tokens asked.
fn step(
    tracker: &mut Mirror,
    tokens: &mut Vec<u64>,
    actions: Actions,
    now: Instant,
) -> Result<(), String> {
    let mut progress = 0u64;
    for change in &actions.events {
        if change.event.data == SequenceEventData::AddOutputBlock {
            progress += u64::from(change.times);
        }
        tracker.apply_change(change, now);
    }
    tokens.extend(actions.ask.iter().map(|&(_, token)| token));
    match progress <= MAX_SNAPSHOT_PROGRESS {
        true => Ok(()),
        false => Err(format!("{progress} blocks of progress handed over at once")),
    }
}

fn state(id: u8, output_blocks: u32) -> RequestState {
    RequestState {
        request_id: format!("r{id}").as_str().into(),
        worker: Worker::new(u64::from(id % 3), 0),
        blocks: Some(vec![SequenceHash(u64::from(id))]),
        isl: 16,
        overlap: 0,
        prefill_completed: id.is_multiple_of(2),
        output_blocks,
    }
}

/// The tracker (what the views handed over, replayed) holds what the views believe.
fn agree(views: &PeerViews, tracker: &Mirror) -> Result<(), String> {
    let sorted = |mirror: &Mirror| {
        let mut states: Vec<_> = mirror.states().cloned().collect();
        states.sort_by(|a, b| a.request_id.as_str().cmp(b.request_id.as_str()));
        states
    };
    let believed = views.mirror(PEER).map(sorted).unwrap_or_default();
    match believed == sorted(tracker) {
        true => Ok(()),
        false => Err(format!("views hold {believed:?}, the tracker {:?}", sorted(tracker))),
    }
}

/// One encoded frame of every kind a replica sends: seeds for the frame target's corpus.
pub fn seed_frames() -> Vec<Vec<u8>> {
    let event = |data| crate::sequences::SequenceEvent {
        router_id: PEER,
        request_id: "req-1".into(),
        worker: Worker::new(1, 0),
        data,
    };
    let add =
        SequenceEventData::AddRequest { blocks: Some(vec![SequenceHash(9)]), isl: 16, overlap: 0 };
    let bodies = [
        Body::Events { first: 1, events: vec![event(add), event(SequenceEventData::Free)] },
        Body::Events { first: 5, events: vec![event(SequenceEventData::AddOutputBlock)] },
        Body::Beat { last_seq: 12 },
        Body::Hello,
        Body::Snapshot { seq: 4, part: 0, last: false, requests: vec![state(1, 3)] },
        Body::Snapshot { seq: 4, part: 1, last: true, requests: vec![state(2, 0), state(3, 7)] },
    ];
    bodies.into_iter().map(|body| Frame::new(PEER, 1, body).encode()).collect()
}
