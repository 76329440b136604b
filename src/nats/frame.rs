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
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(reason) => write!(f, "not a kvroute replica frame: {reason}"),
            Self::Version(v) => write!(f, "replica frame format {v}, this build reads 1"),
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
        Ok(frame)
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
