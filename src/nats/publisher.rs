//! [`NatsPublisher`]: the route path's end of the replica transport.

use std::fmt;

use tokio::sync::mpsc;

use super::stats::Counters;
use crate::sequences::{SequenceEvent, SequencePublisher};
use crate::sync::Arc;

/// Hands this replica's events to the transport thread through a bounded queue, never waiting:
/// if the queue is full or the transport has stopped, the event is dropped and counted
/// ([`NatsStats::dropped`](super::NatsStats::dropped)). Give it to
/// [`KvRouterBuilder::publisher`](crate::router::KvRouterBuilder::publisher) or
/// [`SequencesBuilder::replica`](crate::sequences::SequencesBuilder::replica).
#[derive(Clone)]
pub struct NatsPublisher {
    pub(crate) outbox: mpsc::Sender<SequenceEvent>,
    pub(crate) counters: Arc<Counters>,
}

impl SequencePublisher for NatsPublisher {
    fn publish(&self, event: SequenceEvent) {
        if self.outbox.try_send(event).is_err() {
            Counters::bump(&self.counters.dropped);
        }
    }
}

impl fmt::Debug for NatsPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsPublisher").field("room", &self.outbox.capacity()).finish()
    }
}
