//! [`NatsStats`]: what the replica transport has done, read from any thread.

use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::fmt;

/// A snapshot of a [`NatsReplica`](super::NatsReplica)'s counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NatsStats {
    /// Whether the connection to the server is up now.
    pub connected: bool,
    /// Times the connection was lost.
    pub disconnects: u64,
    /// Times it was (re-)established, the first included.
    pub connects: u64,
    /// Own events sent to the peers.
    pub published: u64,
    /// Own events not sent because the connection was down (or the send failed): the replica
    /// runs on local state meanwhile; peers see the gap and fetch a snapshot once it is back.
    pub unsent: u64,
    /// Own events dropped before the transport saw them: its queue was full (or the
    /// transport had stopped). `route` never waits for the transport; these are not healed
    /// until the requests end or expire.
    pub dropped: u64,
    /// Peer events handed to the local tracker (snapshot differences included).
    pub applied: u64,
    /// Peer events received twice (dropped).
    pub duplicates: u64,
    /// Gaps found in a peer's stream (each healed by a snapshot).
    pub gaps: u64,
    /// Snapshots asked of peers.
    pub snapshots_requested: u64,
    /// Snapshots received and applied.
    pub snapshots_applied: u64,
    /// Snapshots of this replica's state sent to peers.
    pub snapshots_served: u64,
    /// Peers seen restarting (their old requests were freed here).
    pub peer_restarts: u64,
    /// Frames of a peer's earlier incarnation (dropped).
    pub stale: u64,
    /// Payloads that did not decode, or named the wrong sender (dropped).
    pub decode_errors: u64,
    /// Times a peer's buffered events overflowed while a snapshot was awaited.
    pub buffer_overflows: u64,
    /// Peer events the local tracker refused (its peer lanes were down or sync is off).
    pub sink_errors: u64,
    /// Peers heard from lately (within ten heartbeats, or two snapshot timeouts).
    pub peers: u64,
    /// Whether this replica holds the whole history of every peer heard from lately (no
    /// snapshot awaited).
    pub synced: bool,
}

impl fmt::Display for NatsStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {} peers, published {}, unsent {}, dropped {}, applied {}, gaps {}, \
             snapshots {}/{} (asked/applied), served {}, disconnects {}",
            if self.connected { "connected" } else { "disconnected" },
            self.peers,
            self.published,
            self.unsent,
            self.dropped,
            self.applied,
            self.gaps,
            self.snapshots_requested,
            self.snapshots_applied,
            self.snapshots_served,
            self.disconnects,
        )
    }
}

/// The live counters behind [`NatsStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) connected: AtomicBool,
    pub(crate) disconnects: AtomicU64,
    pub(crate) connects: AtomicU64,
    pub(crate) published: AtomicU64,
    pub(crate) unsent: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) applied: AtomicU64,
    pub(crate) duplicates: AtomicU64,
    pub(crate) gaps: AtomicU64,
    pub(crate) snapshots_requested: AtomicU64,
    pub(crate) snapshots_applied: AtomicU64,
    pub(crate) snapshots_served: AtomicU64,
    pub(crate) peer_restarts: AtomicU64,
    pub(crate) stale: AtomicU64,
    pub(crate) decode_errors: AtomicU64,
    pub(crate) buffer_overflows: AtomicU64,
    pub(crate) sink_errors: AtomicU64,
    pub(crate) peers: AtomicU64,
    pub(crate) synced: AtomicBool,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> NatsStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        NatsStats {
            connected: self.connected.load(Ordering::Relaxed),
            disconnects: read(&self.disconnects),
            connects: read(&self.connects),
            published: read(&self.published),
            unsent: read(&self.unsent),
            dropped: read(&self.dropped),
            applied: read(&self.applied),
            duplicates: read(&self.duplicates),
            gaps: read(&self.gaps),
            snapshots_requested: read(&self.snapshots_requested),
            snapshots_applied: read(&self.snapshots_applied),
            snapshots_served: read(&self.snapshots_served),
            peer_restarts: read(&self.peer_restarts),
            stale: read(&self.stale),
            decode_errors: read(&self.decode_errors),
            buffer_overflows: read(&self.buffer_overflows),
            sink_errors: read(&self.sink_errors),
            peers: read(&self.peers),
            synced: self.synced.load(Ordering::Relaxed),
        }
    }
}
