//! [`PeerSink`]: where the transport hands peers' events (a tracker or a router).

use crate::router::KvRouter;
use crate::sequences::{MultiWorkerSequences, PeerEventError, SequenceEvent};
use crate::sync::Arc;

/// Applies peer replicas' events locally: implemented by [`MultiWorkerSequences`] and
/// [`KvRouter`] (its load tracker), and by an `Arc` of either. Called on the transport thread;
/// it may wait briefly for room in a peer lane, never for the route path.
pub trait PeerSink: Send + Sync + 'static {
    /// Queues one peer event (see [`MultiWorkerSequences::apply_peer_event`]).
    fn apply_peer_event(&self, event: SequenceEvent) -> Result<(), PeerEventError>;
}

impl PeerSink for MultiWorkerSequences {
    fn apply_peer_event(&self, event: SequenceEvent) -> Result<(), PeerEventError> {
        MultiWorkerSequences::apply_peer_event(self, event)
    }
}

impl PeerSink for KvRouter {
    fn apply_peer_event(&self, event: SequenceEvent) -> Result<(), PeerEventError> {
        self.sequences().apply_peer_event(event)
    }
}

impl<T: PeerSink> PeerSink for Arc<T> {
    fn apply_peer_event(&self, event: SequenceEvent) -> Result<(), PeerEventError> {
        (**self).apply_peer_event(event)
    }
}
