//! [`LocalIndexer`]: what an engine-side process keeps so routers can recover — its last
//! events in a ring and its own tree of what it holds.

use std::collections::VecDeque;

use crate::event::{KvEventData, RouterEvent, StorageTier, Worker};
use crate::index::ReferenceIndex;
use crate::sync::Mutex;

use super::source::{Dump, Recovered, RecoveryError, RecoverySource};

/// One engine stream's record: numbers its events from 1, keeps the last `capacity` of them
/// and its own index of what the stream holds, and answers recovery from them — a range still
/// in the ring as events, an older one as a dump of the tree.
#[derive(Debug)]
pub struct LocalIndexer {
    worker: Worker,
    tier: StorageTier,
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ring: VecDeque<RouterEvent>,
    tree: ReferenceIndex,
    last_id: u64,
}

/// A ring of no events was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroCapacity;

impl std::fmt::Display for ZeroCapacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a local indexer's ring must hold at least one event")
    }
}

impl std::error::Error for ZeroCapacity {}

/// The ring size engines usually keep: their last 1,024 events.
pub const DEFAULT_RING: usize = 1_024;

impl LocalIndexer {
    /// The record of `worker`'s stream in `tier`, keeping its last `capacity` events
    /// ([`DEFAULT_RING`] is the usual choice).
    pub fn new(worker: Worker, tier: StorageTier, capacity: usize) -> Result<Self, ZeroCapacity> {
        if capacity == 0 {
            return Err(ZeroCapacity);
        }
        Ok(Self { worker, tier, capacity, inner: Mutex::new(Inner::default()) })
    }

    /// Records the engine's next change and returns it as the event to publish.
    pub fn publish(&self, data: KvEventData) -> RouterEvent {
        let mut inner = self.inner.lock();
        inner.last_id += 1;
        let mut event = RouterEvent::new(self.worker, inner.last_id, data);
        event.tier = self.tier;
        // An inconsistent change is the engine's to report; the tree, like the routers' index,
        // skips what it cannot apply, so both agree on it.
        let _ = inner.tree.apply(&event);
        if inner.ring.len() == self.capacity {
            inner.ring.pop_front();
        }
        inner.ring.push_back(event.clone());
        event
    }

    /// The id of the last event published (0 before the first).
    pub fn last_event_id(&self) -> u64 {
        self.inner.lock().last_id
    }

    /// The stream's whole state as events, and the last id it covers.
    pub fn dump(&self) -> Dump {
        let inner = self.inner.lock();
        let mut events = inner.tree.dump_events();
        for event in &mut events {
            event.tier = self.tier;
        }
        Dump { events, last_event_id: inner.last_id }
    }

    fn check(&self, worker: Worker, tier: StorageTier) -> Result<(), RecoveryError> {
        if (worker, tier) == (self.worker, self.tier) {
            Ok(())
        } else {
            Err(RecoveryError::UnknownStream { worker, tier })
        }
    }
}

impl RecoverySource for LocalIndexer {
    fn events_since(
        &self,
        worker: Worker,
        tier: StorageTier,
        from_id: u64,
    ) -> Result<Recovered, RecoveryError> {
        self.check(worker, tier)?;
        let inner = self.inner.lock();
        let oldest = inner.ring.front().map_or(inner.last_id + 1, |e| e.event.event_id);
        if from_id < oldest {
            drop(inner);
            return Ok(Recovered::Dump(self.dump()));
        }
        let skip = (from_id - oldest) as usize;
        Ok(Recovered::Events(inner.ring.iter().skip(skip).cloned().collect()))
    }

    fn full_dump(&self, worker: Worker, tier: StorageTier) -> Result<Dump, RecoveryError> {
        self.check(worker, tier)?;
        Ok(self.dump())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::StoredBlock;

    fn store(local: u64) -> KvEventData {
        KvEventData::Stored { parent: None, blocks: vec![StoredBlock::new(local, local + 100)] }
    }

    #[test]
    fn serves_the_ring_and_dumps_what_fell_out_of_it() {
        let w = Worker::new(1, 0);
        let engine = LocalIndexer::new(w, StorageTier::Device, 3).unwrap();
        for local in 1..=5 {
            assert_eq!(engine.publish(store(local)).event.event_id, local);
        }
        let ids = |r: Recovered| match r {
            Recovered::Events(events) => events.iter().map(|e| e.event.event_id).collect(),
            Recovered::Dump(_) => vec![u64::MAX],
        };
        assert_eq!(ids(engine.events_since(w, StorageTier::Device, 4).unwrap()), [4, 5]);
        assert_eq!(ids(engine.events_since(w, StorageTier::Device, 3).unwrap()), [3, 4, 5]);
        assert_eq!(ids(engine.events_since(w, StorageTier::Device, 6).unwrap()), Vec::<u64>::new());
        // 2 fell out of the ring: the whole state instead.
        let Ok(Recovered::Dump(dump)) = engine.events_since(w, StorageTier::Device, 2) else {
            panic!("expected a dump")
        };
        assert_eq!(dump.last_event_id, 5);
        let mut rebuilt = ReferenceIndex::new();
        dump.events.iter().for_each(|e| rebuilt.apply(e).unwrap());
        assert_eq!(rebuilt.block_count(w), 5);
        let other = engine.full_dump(Worker::new(2, 0), StorageTier::Device);
        assert!(matches!(other, Err(RecoveryError::UnknownStream { .. })));
        assert_eq!(LocalIndexer::new(w, StorageTier::Device, 0).unwrap_err(), ZeroCapacity);
    }
}
