//! [`RequestTable`]: one worker's requests in flight, in stable slots, oldest first.

use std::time::Instant;

use super::RequestId;
use super::children::NodeId;

/// A request's slot in its worker's table; stable while the request lives, reused after.
pub(crate) type RecordId = u32;

const NIL: u32 = u32::MAX;

/// One request in flight.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    /// Its id (the same allocation as the id in any index pointing here).
    pub(crate) id: RequestId,
    /// The trie node its block sequence ends at.
    pub(crate) tail: NodeId,
    /// When it was added, for expiry.
    pub(crate) started_at: Instant,
    /// Prefill tokens still counted in the worker's active tokens (0 once prefill completed).
    pub(crate) prefill_tokens: usize,
    /// Blocks it has decoded so far, each pinned on the worker.
    pub(crate) output_blocks: usize,
}

#[derive(Debug)]
struct Entry {
    record: Option<Record>,
    /// Live: the next older request (or NIL). Vacant: unused.
    older: u32,
    /// Live: the next newer request (or NIL). Vacant: the next vacant slot (or NIL).
    newer: u32,
}

/// A slab of [`Record`]s threaded by a doubly linked list in insertion order, so the oldest
/// request is found in O(1) (for lazy expiry) and any request is removed in O(1).
#[derive(Debug)]
pub(crate) struct RequestTable {
    entries: Vec<Entry>,
    vacant: u32,
    oldest: u32,
    newest: u32,
    len: usize,
}

impl Default for RequestTable {
    fn default() -> Self {
        Self { entries: Vec::new(), vacant: NIL, oldest: NIL, newest: NIL, len: 0 }
    }
}

impl RequestTable {
    /// How many requests are in flight.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `record` as the newest request.
    pub(crate) fn insert(&mut self, record: Record) -> RecordId {
        let entry = Entry { record: Some(record), older: self.newest, newer: NIL };
        let id = if self.vacant == NIL {
            let id = u32::try_from(self.entries.len())
                .ok()
                .filter(|&id| id != NIL)
                .expect("more than u32::MAX - 1 requests on one worker");
            self.entries.push(entry);
            id
        } else {
            let id = self.vacant;
            self.vacant = self.entries[id as usize].newer;
            self.entries[id as usize] = entry;
            id
        };
        if self.newest == NIL {
            self.oldest = id;
        } else {
            self.entries[self.newest as usize].newer = id;
        }
        self.newest = id;
        self.len += 1;
        id
    }

    /// The request in slot `id`, if one lives there.
    pub(crate) fn get(&self, id: RecordId) -> Option<&Record> {
        self.entries.get(id as usize)?.record.as_ref()
    }

    /// The request in slot `id`, if one lives there.
    pub(crate) fn get_mut(&mut self, id: RecordId) -> Option<&mut Record> {
        self.entries.get_mut(id as usize)?.record.as_mut()
    }

    /// Takes the request out of slot `id`.
    pub(crate) fn remove(&mut self, id: RecordId) -> Option<Record> {
        let entry = self.entries.get_mut(id as usize)?;
        let record = entry.record.take()?;
        let (older, newer) = (entry.older, entry.newer);
        entry.newer = self.vacant;
        self.vacant = id;
        if older == NIL {
            self.oldest = newer;
        } else {
            self.entries[older as usize].newer = newer;
        }
        if newer == NIL {
            self.newest = older;
        } else {
            self.entries[newer as usize].older = older;
        }
        self.len -= 1;
        Some(record)
    }

    /// Reads the entries [`Self::insert`] (after expiry's look at the oldest) and
    /// [`Self::remove`] of `id` would touch; see `BlockTrie::warm_insert`.
    pub(crate) fn warm(&self, id: Option<RecordId>) -> usize {
        let at = |i: u32| {
            self.entries.get(i as usize).map_or(0, |e| e.older as usize ^ e.newer as usize)
        };
        let mut sum = at(self.oldest) + at(self.newest) + at(self.vacant);
        if let Some(entry) = id.and_then(|id| self.entries.get(id as usize)) {
            sum += at(entry.older) + at(entry.newer);
            sum += entry.record.as_ref().map_or(0, |r| r.tail as usize);
        }
        sum
    }

    /// The oldest request.
    pub(crate) fn oldest(&self) -> Option<(RecordId, &Record)> {
        let record = self.entries.get(self.oldest as usize)?.record.as_ref()?;
        Some((self.oldest, record))
    }

    /// Every request, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (RecordId, &Record)> + '_ {
        let mut next = self.oldest;
        std::iter::from_fn(move || {
            let id = next;
            let entry = self.entries.get(id as usize)?;
            next = entry.newer;
            Some((id, entry.record.as_ref()?))
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn record(name: &str) -> Record {
        Record {
            id: RequestId::from(name),
            tail: 0,
            started_at: Instant::now(),
            prefill_tokens: 0,
            output_blocks: 0,
        }
    }

    fn names(table: &RequestTable) -> Vec<String> {
        table.iter().map(|(_, r)| r.id.to_string()).collect()
    }

    #[test]
    fn keeps_insertion_order_across_removals_and_slot_reuse() {
        let mut table = RequestTable::default();
        let a = table.insert(record("a"));
        let b = table.insert(record("b"));
        let c = table.insert(record("c"));
        assert_eq!(names(&table), ["a", "b", "c"]);
        assert_eq!(table.remove(b).map(|r| r.id.to_string()), Some("b".into()));
        assert_eq!(table.remove(b).map(|r| r.id), None, "a vacant slot yields nothing");
        assert_eq!(names(&table), ["a", "c"]);
        let d = table.insert(record("d"));
        assert_eq!(d, b, "the vacant slot is reused");
        assert_eq!(names(&table), ["a", "c", "d"]);
        assert_eq!(table.oldest().map(|(id, _)| id), Some(a));
        table.remove(a);
        assert_eq!(table.oldest().map(|(id, _)| id), Some(c));
        table.remove(d);
        table.remove(c);
        assert_eq!(table.len(), 0);
        assert!(table.oldest().is_none());
        assert_eq!(names(&table), Vec::<String>::new());
        assert!(table.get(99).is_none());
        assert!(table.get_mut(a).is_none());
    }
}
