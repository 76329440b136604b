//! What replicas send each other over NATS: subjects and msgpack frames.
//!
//! Frames are msgpack (rmp-serde, structs as positional arrays): compact (a `Free` is ~30
//! bytes, most of it the request id), the same codec engines' KV events use, and it keeps
//! working when a field or an event kind is added (a fixed binary layout would need its own
//! versioning and hand-written bounds checks on every field). Every frame starts with a format
//! version; a frame that does not decode is a typed [`FrameError`], counted and skipped.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::event::{SequenceHash, Worker};
use crate::sequences::{RequestId, SequenceEvent};

/// The frame format this build writes and reads.
pub(crate) const FORMAT_VERSION: u8 = 1;

/// Every size a peer's frame may claim is bounded here, so that a forged or corrupt frame is
/// refused at decode (a typed [`FrameError::Bound`]) before anything is built from it.
///
/// The largest change number (also a heartbeat's count and a snapshot's `seq`): far past what
/// a replica reaches (2^62 changes at a billion a second take 146 years), and `n + 1` never
/// overflows.
pub(crate) const MAX_SEQ: u64 = 1 << 62;
/// The most changes in one `Events` frame (a replica sends at most 1,024).
pub(crate) const MAX_FRAME_EVENTS: usize = 4096;
/// The most blocks of one request (an `AddRequest`, a snapshot's request).
pub(crate) const MAX_REQUEST_BLOCKS: usize = 1 << 20;
/// The most blocks one request may have decoded (16 M tokens at 16 tokens a block).
pub(crate) const MAX_OUTPUT_BLOCKS: u32 = 1 << 20;
/// The most parts of one snapshot.
pub(crate) const MAX_SNAPSHOT_PARTS: u32 = 1 << 16;
/// The most requests one snapshot may hold, all parts together.
pub(crate) const MAX_SNAPSHOT_REQUESTS: usize = 1 << 22;
/// The most decoded blocks one snapshot may report, all requests together: the progress a
/// snapshot hands the tracker is bounded, whatever a peer claims.
pub(crate) const MAX_SNAPSHOT_PROGRESS: u64 = 1 << 26;

/// The subjects of one namespace (`kvroute.<namespace>.…`).
#[derive(Clone, Debug)]
pub(crate) struct Subjects {
    prefix: String,
}

impl Subjects {
    pub(crate) fn new(namespace: &str) -> Self {
        Self { prefix: format!("kvroute.{namespace}") }
    }

    /// Where replica `router_id` publishes its events and heartbeats.
    pub(crate) fn stream(&self, router_id: u64) -> String {
        format!("{}.seq.{router_id}", self.prefix)
    }

    /// Every replica's stream.
    pub(crate) fn all_streams(&self) -> String {
        format!("{}.seq.*", self.prefix)
    }

    /// Where a replica that (re)joined says so, so that peers beat at once.
    pub(crate) fn hello(&self) -> String {
        format!("{}.hello", self.prefix)
    }

    /// Where replica `router_id` answers snapshot requests.
    pub(crate) fn snapshot(&self, router_id: u64) -> String {
        format!("{}.snapshot.{router_id}", self.prefix)
    }
}

/// One message between replicas: who sent it, which run of that replica, and what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Frame {
    pub(crate) version: u8,
    /// The sender's router id.
    pub(crate) origin: u64,
    /// The sender's run: a new value (larger than the last) each time the replica starts, so
    /// peers tell a restart (whose state starts empty) from a gap.
    pub(crate) incarnation: u64,
    pub(crate) body: Body,
}

/// What a [`Frame`] carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Body {
    /// The sender's changes `first`, `first + 1`, … (numbered 1, 2, … per incarnation): what
    /// its transport found queued at once, so a burst costs few messages.
    Events { first: u64, events: Vec<SequenceEvent> },
    /// The sender is alive and has made `last_seq` changes so far.
    Beat { last_seq: u64 },
    /// The sender just started or reconnected.
    Hello,
    /// The sender's own requests in flight as of its change `seq`, in parts (a part fits well
    /// inside the server's payload limit); `last` closes it.
    Snapshot { seq: u64, part: u32, last: bool, requests: Vec<RequestState> },
}

/// One request in flight, as a snapshot carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RequestState {
    pub(crate) request_id: RequestId,
    pub(crate) worker: Worker,
    pub(crate) blocks: Option<Vec<SequenceHash>>,
    pub(crate) isl: usize,
    pub(crate) overlap: u32,
    pub(crate) prefill_completed: bool,
    pub(crate) output_blocks: u32,
}

/// Encoded size of an event, roughly (to bound a batch).
pub(crate) fn approx_event_size(event: &SequenceEvent) -> usize {
    let blocks = match &event.data {
        crate::sequences::SequenceEventData::AddRequest { blocks, .. } => {
            blocks.as_ref().map_or(0, Vec::len)
        }
        _ => 0,
    };
    32 + event.request_id.as_str().len() + 9 * blocks
}

impl RequestState {
    /// Encoded size, roughly (to cut snapshots into parts).
    pub(crate) fn approx_size(&self) -> usize {
        48 + self.request_id.as_str().len() + 9 * self.blocks.as_ref().map_or(0, Vec::len)
    }
}

/// Why a received payload is not a frame.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum FrameError {
    /// Not msgpack of the frame's shape.
    Decode(String),
    /// A format version this build does not read.
    Version(u8),
    /// A size or number past its bound (the message says which).
    Bound(String),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(reason) => write!(f, "not a kvroute replica frame: {reason}"),
            Self::Version(v) => write!(f, "replica frame format {v}, this build reads 1"),
            Self::Bound(what) => write!(f, "replica frame out of bounds: {what}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl Frame {
    pub(crate) fn new(origin: u64, incarnation: u64, body: Body) -> Self {
        Self { version: FORMAT_VERSION, origin, incarnation, body }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serializing plain data into a Vec cannot fail (no I/O, every key a string).
        rmp_serde::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, FrameError> {
        let frame: Frame =
            rmp_serde::from_slice(bytes).map_err(|e| FrameError::Decode(e.to_string()))?;
        if frame.version != FORMAT_VERSION {
            return Err(FrameError::Version(frame.version));
        }
        frame.body.check_bounds().map_err(FrameError::Bound)?;
        Ok(frame)
    }
}

impl Body {
    /// Checks every size and number a peer chose against its bound.
    fn check_bounds(&self) -> Result<(), String> {
        let seq_ok = |what: &str, seq: u64| match seq <= MAX_SEQ {
            true => Ok(()),
            false => Err(format!("{what} {seq} is past {MAX_SEQ}")),
        };
        let blocks_ok = |blocks: &Option<Vec<SequenceHash>>| match blocks {
            Some(blocks) if blocks.len() > MAX_REQUEST_BLOCKS => Err(format!(
                "{} blocks in one request (at most {MAX_REQUEST_BLOCKS})",
                blocks.len()
            )),
            _ => Ok(()),
        };
        match self {
            Self::Events { first, events } => {
                if events.is_empty() || events.len() > MAX_FRAME_EVENTS {
                    return Err(format!("{} events (1..={MAX_FRAME_EVENTS})", events.len()));
                }
                if *first == 0 {
                    return Err("change number 0 (changes count from 1)".into());
                }
                let last = first.checked_add(events.len() as u64 - 1).unwrap_or(u64::MAX);
                seq_ok("change number", last)?;
                for event in events {
                    if let crate::sequences::SequenceEventData::AddRequest { blocks, .. } =
                        &event.data
                    {
                        blocks_ok(blocks)?;
                    }
                }
                Ok(())
            }
            Self::Beat { last_seq } => seq_ok("heartbeat count", *last_seq),
            Self::Hello => Ok(()),
            Self::Snapshot { seq, part, requests, .. } => {
                seq_ok("snapshot change number", *seq)?;
                if *part >= MAX_SNAPSHOT_PARTS {
                    return Err(format!("snapshot part {part} (at most {MAX_SNAPSHOT_PARTS})"));
                }
                if requests.len() > MAX_SNAPSHOT_REQUESTS {
                    return Err(format!("{} requests in one part", requests.len()));
                }
                for state in requests {
                    blocks_ok(&state.blocks)?;
                    if state.output_blocks > MAX_OUTPUT_BLOCKS {
                        return Err(format!(
                            "{} decoded blocks in one request (at most {MAX_OUTPUT_BLOCKS})",
                            state.output_blocks
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequences::SequenceEventData;

    fn event() -> SequenceEvent {
        SequenceEvent {
            router_id: 3,
            request_id: RequestId::from("req-17"),
            worker: Worker::new(2, 1),
            data: SequenceEventData::AddRequest {
                blocks: Some(vec![SequenceHash(u64::MAX), SequenceHash(0)]),
                isl: 70,
                overlap: 1,
            },
        }
    }

    #[test]
    fn every_body_round_trips() {
        let state = RequestState {
            request_id: "a".into(),
            worker: Worker::new(1, 0),
            blocks: None,
            isl: 5,
            overlap: 0,
            prefill_completed: true,
            output_blocks: 4,
        };
        let bodies = [
            Body::Events { first: 1, events: vec![event(), event()] },
            Body::Beat { last_seq: 9 },
            Body::Hello,
            Body::Snapshot { seq: 4, part: 2, last: true, requests: vec![state] },
        ];
        for body in bodies {
            let frame = Frame::new(3, 77, body);
            assert_eq!(Frame::decode(&frame.encode()).expect("decodes"), frame);
        }
    }

    #[test]
    fn a_free_is_small() {
        let free = SequenceEvent { data: SequenceEventData::Free, ..event() };
        let bytes =
            Frame::new(3, 77, Body::Events { first: 1_000_000, events: vec![free] }).encode();
        assert!(bytes.len() <= 40, "{} bytes", bytes.len());
    }

    #[test]
    fn garbage_and_other_versions_are_typed_errors() {
        for bytes in [&b""[..], b"\xff\x00", b"\x94\x01\x02", b"hello world"] {
            assert!(matches!(Frame::decode(bytes), Err(FrameError::Decode(_))), "{bytes:?}");
        }
        let mut frame = Frame::new(1, 1, Body::Hello);
        frame.version = 2;
        assert!(matches!(Frame::decode(&frame.encode()), Err(FrameError::Version(2))));
        // Every truncation of a valid frame is an error, never a panic.
        let bytes = Frame::new(3, 77, Body::Events { first: 5, events: vec![event()] }).encode();
        for end in 0..bytes.len() {
            assert!(Frame::decode(&bytes[..end]).is_err());
        }
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;
    use crate::sequences::SequenceEventData;

    fn free() -> SequenceEvent {
        SequenceEvent {
            router_id: 3,
            request_id: RequestId::from("r"),
            worker: Worker::new(1, 0),
            data: SequenceEventData::Free,
        }
    }

    fn state(output_blocks: u32, blocks: usize) -> RequestState {
        RequestState {
            request_id: "a".into(),
            worker: Worker::new(1, 0),
            blocks: Some(vec![SequenceHash(1); blocks]),
            isl: 5,
            overlap: 0,
            prefill_completed: true,
            output_blocks,
        }
    }

    fn refused(body: Body) -> bool {
        matches!(Frame::decode(&Frame::new(3, 1, body).encode()), Err(FrameError::Bound(_)))
    }

    #[test]
    fn every_size_a_peer_chooses_is_bounded_at_decode() {
        // Change numbers that would overflow `n + 1`, or count from 0.
        assert!(refused(Body::Events { first: u64::MAX, events: vec![free()] }));
        assert!(refused(Body::Events { first: MAX_SEQ, events: vec![free(), free()] }));
        assert!(refused(Body::Events { first: 0, events: vec![free()] }));
        assert!(refused(Body::Events { first: 1, events: vec![] }));
        assert!(refused(Body::Events { first: 1, events: vec![free(); MAX_FRAME_EVENTS + 1] }));
        assert!(refused(Body::Beat { last_seq: u64::MAX }));
        // Snapshot sizes: progress, blocks, parts, change number.
        let snapshot = |seq, part, requests| Body::Snapshot { seq, part, last: true, requests };
        assert!(refused(snapshot(1, 0, vec![state(u32::MAX, 1)])));
        assert!(refused(snapshot(1, 0, vec![state(0, MAX_REQUEST_BLOCKS + 1)])));
        assert!(refused(snapshot(1, MAX_SNAPSHOT_PARTS, vec![])));
        assert!(refused(snapshot(u64::MAX, 0, vec![])));
        // What a replica really sends passes.
        assert!(!refused(Body::Events { first: MAX_SEQ, events: vec![free()] }));
        assert!(!refused(snapshot(MAX_SEQ, 3, vec![state(MAX_OUTPUT_BLOCKS, 4)])));
    }
}

#[cfg(test)]
mod subject_tests {
    use super::Subjects;

    #[test]
    fn subjects_follow_the_documented_layout() {
        let s = Subjects::new("prod");
        assert_eq!(s.stream(7), "kvroute.prod.seq.7");
        assert_eq!(s.all_streams(), "kvroute.prod.seq.*");
        assert_eq!(s.hello(), "kvroute.prod.hello");
        assert_eq!(s.snapshot(7), "kvroute.prod.snapshot.7");
    }
}
