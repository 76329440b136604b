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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Worker;
    use crate::sequences::SequenceEventData;

    #[test]
    fn a_full_or_closed_outbox_drops_and_counts_without_waiting() {
        let (outbox, mut receiver) = mpsc::channel(2);
        let counters = Arc::new(Counters::default());
        let publisher = NatsPublisher { outbox, counters: counters.clone() };
        let event = |id: &str| SequenceEvent {
            router_id: 1,
            request_id: id.into(),
            worker: Worker::new(1, 0),
            data: SequenceEventData::Free,
        };
        for id in ["a", "b", "c", "d"] {
            publisher.publish(event(id));
        }
        assert_eq!(counters.snapshot().dropped, 2);
        assert_eq!(receiver.try_recv().map(|e| e.request_id), Ok("a".into()));
        drop(receiver);
        publisher.publish(event("e"));
        assert_eq!(counters.snapshot().dropped, 3);
    }
}
