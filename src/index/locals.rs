//! [`Locals`]: a run's content hashes, as a window onto an allocation that a run's versions
//! share, so shortening a run or splitting it copies at most the smaller part.
//!
//! Holder changes, splits and truncations replace a run's whole state (readers must only ever see
//! states that existed), and copying the content hashes into each new state was most of what a
//! lane wrote to memory. A window keeps the allocation while it covers more than half of it and
//! is copied otherwise: an allocation never holds more than twice what its live window shows, and
//! only one live run uses it (of a split's two halves, at most one covers more than half).

use std::ops::{Deref, Range};

use crate::sync::{Arc, shared_slice};

/// See the [module docs](self).
#[derive(Clone)]
pub(crate) struct Locals {
    buffer: Arc<[u64]>,
    start: u32,
    len: u32,
}

impl Locals {
    /// A fresh allocation holding `values`.
    pub(crate) fn new(values: &[u64]) -> Self {
        // Never fails: runs hold at most MAX_RUN_BLOCKS (appends) or MAX_EVENT_BLOCKS (one
        // event's new branch) blocks, both below 2^32.
        let len = u32::try_from(values.len()).expect("a run of fewer than 2^32 blocks");
        Self { buffer: shared_slice(values), start: 0, len }
    }

    /// The part `range` of these hashes: the same allocation while it covers more than half of
    /// it, a copy otherwise.
    pub(crate) fn part(&self, range: Range<usize>) -> Self {
        let values = &self[range.clone()];
        if values.len() * 2 <= self.buffer.len() {
            return Self::new(values);
        }
        let start = self.start + range.start as u32;
        Self { buffer: self.buffer.clone(), start, len: values.len() as u32 }
    }

    /// Heap bytes of the allocation (all of it: only one live run uses it).
    pub(crate) fn allocated(&self) -> usize {
        2 * size_of::<usize>() + self.buffer.len() * size_of::<u64>()
    }
}

impl Deref for Locals {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        &self.buffer[self.start as usize..(self.start + self.len) as usize]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn parts_share_the_allocation_while_they_cover_more_than_half() {
        let values: Vec<u64> = (0..100).collect();
        let all = Locals::new(&values);
        let head = all.part(0..60);
        assert_eq!(&*head, &values[..60]);
        assert!(Arc::ptr_eq(&head.buffer, &all.buffer), "60 of 100 is shared");
        let tail = all.part(60..100);
        assert_eq!(&*tail, &values[60..]);
        assert!(!Arc::ptr_eq(&tail.buffer, &all.buffer), "40 of 100 is copied");
        assert_eq!(tail.allocated(), 2 * size_of::<usize>() + 40 * 8);
        // A part of a part counts against the whole allocation.
        let inner = head.part(10..55);
        assert_eq!(&*inner, &values[10..55]);
        assert!(!Arc::ptr_eq(&inner.buffer, &all.buffer), "45 of 100 is copied");
        let shared = head.part(5..60);
        assert_eq!(&*shared, &values[5..60]);
        assert!(Arc::ptr_eq(&shared.buffer, &all.buffer), "55 of 100 is shared");
        assert!(Locals::new(&[]).is_empty());
    }
}
