//! A router's restart file: its index (every tier) as events, and the recovery cursors that go
//! with it, so a restarted router is warm at once and recovery fetches only what it missed.
//!
//! Layout (little-endian): the magic `KVRSNAP1`, the payload's length (u64), the payload, and
//! the payload's XXH3-64 (u64). Payload: stream count (u32), per stream worker id (u64),
//! dp_rank (u32), tier (u8), cursor (u8 tag: 0 initial, 1 live, 2 invalidated) and its last id
//! (u64); event count (u64), per event worker id (u64), dp_rank (u32), tier (u8), event id
//! (u64), kind (u8: 0 stored, 1 removed, 2 cleared), then for stored a parent flag (u8) and
//! parent (u64), a block count (u32) and (content hash, engine hash) pairs; for removed a count
//! (u32) and engine hashes. A file is decoded and checked whole before anything is applied.

use std::fmt;
use std::io::{self, Read, Write};

use xxhash_rust::xxh3::xxh3_64;

use crate::event::{KvEventData, RouterEvent, StorageTier, StoredBlock, Worker};
use crate::event::{LocalBlockHash, SequenceHash};

use super::Cursor;
use super::state::StreamKey;

const MAGIC: &[u8; 8] = b"KVRSNAP1";

/// What a snapshot holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Every stream's cursor.
    pub cursors: Vec<(StreamKey, Cursor)>,
    /// Events that rebuild the index, every tier.
    pub events: Vec<RouterEvent>,
}

/// Why a snapshot could not be written or read. A file that fails to read leaves the router
/// untouched.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading or writing the file failed.
    Io(io::Error),
    /// The file does not start with the snapshot magic.
    NotASnapshot,
    /// The file ends early (`expected` more bytes than it has).
    Truncated,
    /// The payload does not match its checksum.
    Corrupt,
    /// The payload is well-formed bytes but not a valid snapshot; the text says where.
    Malformed(&'static str),
    /// Restoring needs a router that has not taken any event yet.
    NotEmpty,
    /// The index's lanes stopped while the snapshot was taken or applied.
    LaneDown,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "snapshot I/O: {e}"),
            Self::NotASnapshot => f.write_str("not a kvroute snapshot (bad magic)"),
            Self::Truncated => f.write_str("snapshot is truncated"),
            Self::Corrupt => f.write_str("snapshot checksum mismatch: the file is corrupt"),
            Self::Malformed(what) => write!(f, "malformed snapshot: {what}"),
            Self::NotEmpty => f.write_str("a snapshot restores only into a router with no state"),
            Self::LaneDown => f.write_str("the index's lanes stopped"),
        }
    }
}

impl std::error::Error for SnapshotError {}

impl From<io::Error> for SnapshotError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

impl Snapshot {
    /// Writes the snapshot to `out`.
    pub fn write_to(&self, mut out: impl Write) -> Result<(), SnapshotError> {
        let mut payload = Vec::new();
        put_u32(&mut payload, self.cursors.len() as u32);
        for &((worker, tier), cursor) in &self.cursors {
            put_worker(&mut payload, worker, tier);
            let (tag, last) = match cursor {
                Cursor::Initial => (0, 0),
                Cursor::Live(last) => (1, last),
                Cursor::InvalidatedByBarrier => (2, 0),
            };
            payload.push(tag);
            put_u64(&mut payload, last);
        }
        put_u64(&mut payload, self.events.len() as u64);
        for event in &self.events {
            put_worker(&mut payload, event.worker(), event.tier);
            put_u64(&mut payload, event.event.event_id);
            match &event.event.data {
                KvEventData::Stored { parent, blocks } => {
                    payload.push(0);
                    payload.push(u8::from(parent.is_some()));
                    put_u64(&mut payload, parent.map_or(0, |p| p.0));
                    put_u32(&mut payload, blocks.len() as u32);
                    for block in blocks {
                        put_u64(&mut payload, block.local.0);
                        put_u64(&mut payload, block.hash.0);
                    }
                }
                KvEventData::Removed { blocks } => {
                    payload.push(1);
                    put_u32(&mut payload, blocks.len() as u32);
                    blocks.iter().for_each(|hash| put_u64(&mut payload, hash.0));
                }
                KvEventData::Cleared => payload.push(2),
            }
        }
        out.write_all(MAGIC)?;
        out.write_all(&(payload.len() as u64).to_le_bytes())?;
        out.write_all(&payload)?;
        out.write_all(&xxh3_64(&payload).to_le_bytes())?;
        out.flush()?;
        Ok(())
    }

    /// Reads and checks a whole snapshot from `input`.
    pub fn read_from(mut input: impl Read) -> Result<Self, SnapshotError> {
        let mut bytes = Vec::new();
        input.read_to_end(&mut bytes)?;
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err(if MAGIC.starts_with(&bytes) && bytes.len() < MAGIC.len() {
                SnapshotError::Truncated
            } else {
                SnapshotError::NotASnapshot
            });
        }
        let mut reader = Reader(&bytes[MAGIC.len()..]);
        let len = usize::try_from(reader.u64()?).map_err(|_| SnapshotError::Truncated)?;
        let payload = reader.take(len)?;
        let checksum = reader.u64()?;
        if !reader.0.is_empty() {
            return Err(SnapshotError::Malformed("bytes after the checksum"));
        }
        if xxh3_64(payload) != checksum {
            return Err(SnapshotError::Corrupt);
        }
        let mut r = Reader(payload);
        let streams = r.u32()? as usize;
        let mut cursors = Vec::with_capacity(streams.min(payload.len()));
        for _ in 0..streams {
            let key = r.worker()?;
            let cursor = match (r.u8()?, r.u64()?) {
                (0, _) => Cursor::Initial,
                (1, last) => Cursor::Live(last),
                (2, _) => Cursor::InvalidatedByBarrier,
                _ => return Err(SnapshotError::Malformed("unknown cursor tag")),
            };
            cursors.push((key, cursor));
        }
        let count = r.u64()?;
        let mut events = Vec::with_capacity((count as usize).min(payload.len()));
        for _ in 0..count {
            let (worker, tier) = r.worker()?;
            let id = r.u64()?;
            let data = match r.u8()? {
                0 => {
                    let has_parent = r.u8()? != 0;
                    let parent = r.u64()?;
                    let n = r.u32()? as usize;
                    let mut blocks = Vec::with_capacity(n.min(r.0.len() / 16));
                    for _ in 0..n {
                        let local = LocalBlockHash(r.u64()?);
                        blocks.push(StoredBlock { local, hash: SequenceHash(r.u64()?) });
                    }
                    KvEventData::Stored {
                        parent: has_parent.then_some(SequenceHash(parent)),
                        blocks,
                    }
                }
                1 => {
                    let n = r.u32()? as usize;
                    let mut blocks = Vec::with_capacity(n.min(r.0.len() / 8));
                    for _ in 0..n {
                        blocks.push(SequenceHash(r.u64()?));
                    }
                    KvEventData::Removed { blocks }
                }
                2 => KvEventData::Cleared,
                _ => return Err(SnapshotError::Malformed("unknown event kind")),
            };
            let mut event = RouterEvent::new(worker, id, data);
            event.tier = tier;
            events.push(event);
        }
        if !r.0.is_empty() {
            return Err(SnapshotError::Malformed("bytes after the last event"));
        }
        Ok(Self { cursors, events })
    }
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_worker(out: &mut Vec<u8>, worker: Worker, tier: StorageTier) {
    put_u64(out, worker.id.0);
    put_u32(out, worker.dp_rank.0);
    out.push(StorageTier::ALL.iter().position(|&t| t == tier).unwrap_or(0) as u8);
}

/// Bounds-checked little-endian reads: running out is [`SnapshotError::Truncated`].
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        if self.0.len() < n {
            return Err(SnapshotError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn worker(&mut self) -> Result<StreamKey, SnapshotError> {
        let id = self.u64()?;
        let dp_rank = self.u32()?;
        let tier = *StorageTier::ALL
            .get(self.u8()? as usize)
            .ok_or(SnapshotError::Malformed("unknown storage tier"))?;
        Ok((Worker::new(id, dp_rank), tier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        let w = Worker::new(3, 1);
        let mut host = RouterEvent::removed(w, 9, vec![SequenceHash(7)]);
        host.tier = StorageTier::HostPinned;
        Snapshot {
            cursors: vec![
                ((w, StorageTier::Device), Cursor::Live(41)),
                ((w, StorageTier::HostPinned), Cursor::InvalidatedByBarrier),
            ],
            events: vec![
                RouterEvent::stored(
                    w,
                    0,
                    None,
                    vec![StoredBlock::new(1, 2), StoredBlock::new(3, 4)],
                ),
                RouterEvent::stored(w, 0, Some(SequenceHash(4)), vec![StoredBlock::new(5, 6)]),
                host,
                RouterEvent::cleared(Worker::new(8, 0), 2),
            ],
        }
    }

    #[test]
    fn round_trips() {
        let mut bytes = Vec::new();
        sample().write_to(&mut bytes).unwrap();
        assert_eq!(Snapshot::read_from(&bytes[..]).unwrap(), sample());
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_an_error() {
        let mut bytes = Vec::new();
        sample().write_to(&mut bytes).unwrap();
        for len in 0..bytes.len() {
            assert!(Snapshot::read_from(&bytes[..len]).is_err(), "truncated to {len}");
        }
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(Snapshot::read_from(&bad[..]).is_err(), "byte {at} flipped");
        }
        assert!(matches!(
            Snapshot::read_from(&b"hello world"[..]),
            Err(SnapshotError::NotASnapshot)
        ));
        assert!(matches!(Snapshot::read_from(&bytes[..20]), Err(SnapshotError::Truncated)));
    }
}
