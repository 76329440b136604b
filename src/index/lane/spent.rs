//! What a lane hands back to the producers ([`SpentList`]): the block lists of the events it
//! has applied, to be freed by a thread that applies events rather than on the lane.
//!
//! An event's block list was allocated by the thread that built it. With glibc's allocator,
//! freeing it on a lane takes the lock of the allocating thread's arena, which that thread holds
//! while it allocates the next events: on the 2-core comparison, nearly every time a lane
//! slept during an ingest it was waiting for that lock in such a free (`perf record -e
//! sched:sched_switch -g`: about a thousand times per lane per `--dup 4` ingest, each a futex
//! wait, a context switch and a wakeup). Handed back ([`Handback`](super::handback::Handback)), the lists
//! are freed by a producer, usually where they were allocated: uncontended, and into caches its
//! next allocations reuse.
//!
//! Memory stays bounded: a lane hands its lists over every [`SPENT_BATCH`] events and whenever
//! its queue runs dry, into room for [`HANDED_MAX`]. Every `apply` frees a few of what was
//! handed over (more than the lanes hand back per event, so that the producer's next
//! allocations reuse what it just freed), `flush` frees all of it, and so does a producer
//! waiting for room in a lane's queue, which is woken to do so (`Lane::wants_producer` in
//! `pool/lanes.rs`). So at most twice [`HANDED_MAX`] lists per lane wait: a batch in a
//! producer's hands and the next one handed over. Lists that find no room (no producer has
//! run for a while: two cores, three threads) are freed on the lane, as without this.

use crate::event::{KvEventData, RouterEvent, SequenceHash, StoredBlock};

/// Events a lane applies before handing their lists over.
pub(crate) const SPENT_BATCH: usize = 256;

/// Lists handed over for a producer to free, at most (per lane, in each of the handback's two
/// buffers): 64 KiB of [`SpentList`]s per buffer.
pub(crate) const HANDED_MAX: usize = 8 * SPENT_BATCH;

/// An applied event's block list, kept only to be freed.
#[derive(Debug)]
pub(crate) enum SpentList {
    Stored(#[allow(dead_code)] Vec<StoredBlock>),
    Removed(#[allow(dead_code)] Vec<SequenceHash>),
}

impl SpentList {
    /// The heap allocation of `event`, if it has one.
    pub(crate) fn of(event: RouterEvent) -> Option<Self> {
        match event.event.data {
            KvEventData::Stored { blocks, .. } if blocks.capacity() > 0 => {
                Some(Self::Stored(blocks))
            }
            KvEventData::Removed { blocks } if blocks.capacity() > 0 => Some(Self::Removed(blocks)),
            _ => None,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::event::Worker;

    #[test]
    fn a_spent_list_is_the_events_allocation_only() {
        assert!(size_of::<SpentList>() <= 32, "HANDED_MAX's docs count 32 bytes a list");
        let worker = Worker::new(1, 0);
        let blocks = vec![StoredBlock::new(1, 2)];
        let pointer = blocks.as_ptr();
        match SpentList::of(RouterEvent::stored(worker, 0, None, blocks)) {
            Some(SpentList::Stored(kept)) => assert_eq!(kept.as_ptr(), pointer),
            other => panic!("expected the stored list, got {other:?}"),
        }
        let removed = RouterEvent::removed(worker, 1, vec![SequenceHash(3)]);
        assert!(matches!(SpentList::of(removed), Some(SpentList::Removed(_))));
        assert!(SpentList::of(RouterEvent::removed(worker, 2, Vec::new())).is_none());
        assert!(SpentList::of(RouterEvent::cleared(worker, 3)).is_none());
    }
}
