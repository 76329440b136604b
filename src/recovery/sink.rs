//! Where recovered streams go: an index that takes events in order.

use crate::event::{KvEventData, RouterEvent, StorageTier, Worker};
use crate::index::{EventPool, ReferenceIndex, TieredIndex};
use crate::pool::LaneDown;
use crate::sync::Mutex;

/// An index recovery feeds. Events of one stream must be applied in the order submitted
/// (every kvroute index keeps a stream's order); `submit` may wait for room.
pub trait EventSink {
    /// Applies (or enqueues) `event`. An event the index rejects is counted by the index, not
    /// an error here; only an index that can take nothing more fails.
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown>;

    /// Drops everything the index holds for `worker` in `tier` (before a full restore).
    fn clear(&self, worker: Worker, tier: StorageTier) -> Result<(), LaneDown> {
        let mut event = RouterEvent::new(worker, 0, KvEventData::Cleared);
        event.tier = tier;
        self.submit(event)
    }
}

/// An engine's event longer than one event may be goes in as pieces the pool takes.
impl EventSink for EventPool {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        self.apply_split(event)
    }
}

/// An engine's event longer than one event may be goes in as pieces its tier takes.
impl EventSink for TieredIndex {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        self.apply_split(event)
    }
}

/// The reference index behind a lock (tests and tools).
impl EventSink for Mutex<ReferenceIndex> {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        // A rejected event leaves the reference unchanged, as it does a pool.
        let _ = self.lock().apply(&event);
        Ok(())
    }
}

/// The reference index behind a standard lock (tools outside the crate).
impl EventSink for std::sync::Mutex<ReferenceIndex> {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        // A poisoned lock still holds a consistent reference: it applies whole events.
        let mut index = self.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = index.apply(&event);
        Ok(())
    }
}

impl<S: EventSink + ?Sized> EventSink for &S {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        (**self).submit(event)
    }
}

impl<S: EventSink + ?Sized> EventSink for std::sync::Arc<S> {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        (**self).submit(event)
    }
}
