//! [`RequestIndex`]: which worker (shard, slot, record) each request in flight lives on,
//! sharded by request id.

use std::collections::HashMap;

use crossbeam_utils::CachePadded;

use super::RequestId;
use super::owners::Slot;
use super::requests::RecordId;
use crate::sync::Mutex;

/// Where a request lives: its worker's shard and slot, and its record in that worker's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    /// The worker shard.
    pub(crate) shard: u32,
    /// The worker's slot in that shard.
    pub(crate) slot: Slot,
    /// The request's record in the worker's table.
    pub(crate) record: RecordId,
}

/// One shard of the index: request id → location.
pub(crate) type IndexShard = HashMap<RequestId, Location, ahash::RandomState>;

/// Request id → [`Location`], in a power-of-two number of cache-padded, mutex-guarded shards
/// picked by a hash of the id, so that operations on different requests rarely meet.
///
/// An entry may be stale: a request dropped by expiry or worker removal keeps its entry until
/// it is cleaned up (right after, outside the worker lock). Whoever follows an entry checks that
/// the record it points to holds the *same allocation* of the id
/// ([`RequestId::same_allocation`]); an id reused later is a new allocation, so an entry can
/// never be mistaken for a newer request of the same name.
pub(crate) struct RequestIndex {
    shards: Box<[CachePadded<Mutex<IndexShard>>]>,
    hasher: ahash::RandomState,
    mask: usize,
}

impl RequestIndex {
    /// An empty index of `shards` shards (rounded up to a power of two, at least 1).
    pub(crate) fn new(shards: usize) -> Self {
        let count = shards.max(1).next_power_of_two();
        let shards = (0..count).map(|_| CachePadded::new(Mutex::new(IndexShard::default())));
        // Seeded randomly (ids are chosen by clients), but fixed under loom: a model must run
        // the same way every time it is replayed, and which shard an id lands in decides which
        // threads meet on an index lock.
        #[cfg(not(loom))]
        let hasher = ahash::RandomState::new();
        #[cfg(loom)]
        let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
        Self { shards: shards.collect(), hasher, mask: count - 1 }
    }

    /// The shard holding `id`.
    pub(crate) fn shard(&self, id: &str) -> &Mutex<IndexShard> {
        let at = self.hasher.hash_one(id) as usize & self.mask;
        &self.shards[at]
    }

    /// Removes the entry of `id` if it still names this very allocation of the id (not a newer
    /// request that reuses the name).
    pub(crate) fn remove_if_same(&self, id: &RequestId) {
        let mut shard = self.shard(id.as_str()).lock();
        if shard.get_key_value(id.as_str()).is_some_and(|(key, _)| key.same_allocation(id)) {
            shard.remove(id.as_str());
        }
    }

    /// How many entries (live or stale) the index holds.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn ids_land_in_one_shard_and_only_the_same_allocation_is_removed() {
        let index = RequestIndex::new(5);
        assert_eq!(index.shards.len(), 8);
        let first = RequestId::from("r");
        let location = Location { shard: 1, slot: 2, record: 3 };
        index.shard("r").lock().insert(first.clone(), location);
        assert!(std::ptr::eq(index.shard("r"), index.shard(first.as_str())));

        index.remove_if_same(&RequestId::from("r"));
        assert_eq!(index.len(), 1, "an equal but different allocation leaves the entry");
        index.remove_if_same(&first);
        assert_eq!(index.len(), 0);
        assert_eq!(RequestIndex::new(0).shards.len(), 1);
    }
}
