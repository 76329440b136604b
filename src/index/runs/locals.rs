//! [`Locals`]: a run's content hashes as the lane makes a version of the run from them: up to
//! [`INLINE`] of them go inside the version itself (just as many: see
//! [`super::run`]), more are a window onto an allocation that a run's versions share, so
//! shortening a run or splitting it copies at most the smaller part.
//!
//! Short runs keep their hashes inline because a query's walk compares them right after it
//! reaches the run: inline, they are in the lines it has just loaded (or the next one), not one
//! more dependent cache miss away. Most runs are short where many documents or prompts are
//! reused (a few to a dozen blocks between branches), and copying a few hashes into each new
//! version costs less than the allocation it saves.
//!
//! Splits, truncations and holder changes to or from a list replace a run's whole state (readers
//! must only ever see states that existed), and copying a long run's content hashes into each
//! new state was most of what a lane wrote to memory. A window keeps the allocation while it
//! covers more than half of it and is copied otherwise: an allocation never holds more than
//! twice what its live window shows, and only one live run uses it (of a split's two halves, at
//! most one covers more than half).

use std::ops::{Deref, Range};

use crate::sync::{Arc, shared_slice};

/// Runs of up to this many blocks keep their hashes inline.
pub(crate) const INLINE: usize = 11;

/// See the [module docs](self).
#[derive(Clone)]
pub(crate) enum Locals {
    Inline { len: u8, hashes: [u64; INLINE] },
    Shared { buffer: Arc<[u64]>, start: u32, len: u32 },
}

impl Locals {
    /// `values`, inline or in a fresh allocation.
    pub(crate) fn new(values: &[u64]) -> Self {
        if values.len() <= INLINE {
            let mut hashes = [0; INLINE];
            hashes[..values.len()].copy_from_slice(values);
            return Self::Inline { len: values.len() as u8, hashes };
        }
        // Never fails: runs hold at most MAX_RUN_BLOCKS (appends) or MAX_EVENT_BLOCKS (one
        // event's new branch) blocks, both below 2^32.
        let len = u32::try_from(values.len()).expect("a run of fewer than 2^32 blocks");
        Self::Shared { buffer: shared_slice(values), start: 0, len }
    }

    /// The part `range` of these hashes: inline if short enough, else the same allocation
    /// while it covers more than half of it, else a copy.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn part(&self, range: Range<usize>) -> Self {
        match self {
            Self::Inline { .. } => Self::new(&self[range]),
            Self::Shared { buffer, start, .. } => {
                let start = *start as usize;
                Self::window(buffer, start + range.start..start + range.end)
            }
        }
    }

    /// The hashes `buffer[range]`: inline if short enough, else `buffer` itself while the
    /// range covers more than half of it, else a copy.
    pub(crate) fn window(buffer: &Arc<[u64]>, range: Range<usize>) -> Self {
        if range.len() > INLINE && range.len() * 2 > buffer.len() {
            // Within `buffer`, so below 2^32 (see `new`).
            let (start, len) = (range.start as u32, range.len() as u32);
            return Self::Shared { buffer: buffer.clone(), start, len };
        }
        Self::new(&buffer[range])
    }

    /// Heap bytes of the allocation, if any (all of it: only one live run uses it).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn allocated(&self) -> usize {
        match self {
            Self::Inline { .. } => 0,
            Self::Shared { buffer, .. } => 2 * size_of::<usize>() + buffer.len() * size_of::<u64>(),
        }
    }
}

impl Deref for Locals {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        match self {
            Self::Inline { len, hashes } => &hashes[..*len as usize],
            Self::Shared { buffer, start, len } => &buffer[*start as usize..(start + len) as usize],
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The allocation behind `locals`, if not inline.
    fn buffer(locals: &Locals) -> Option<&Arc<[u64]>> {
        match locals {
            Locals::Inline { .. } => None,
            Locals::Shared { buffer, .. } => Some(buffer),
        }
    }

    fn shares(a: &Locals, b: &Locals) -> bool {
        matches!((buffer(a), buffer(b)), (Some(a), Some(b)) if Arc::ptr_eq(a, b))
    }

    #[test]
    fn parts_share_the_allocation_while_they_cover_more_than_half() {
        let values: Vec<u64> = (0..100).collect();
        let all = Locals::new(&values);
        let head = all.part(0..60);
        assert_eq!(&*head, &values[..60]);
        assert!(shares(&head, &all), "60 of 100 is shared");
        let tail = all.part(60..100);
        assert_eq!(&*tail, &values[60..]);
        assert!(buffer(&tail).is_some() && !shares(&tail, &all), "40 of 100 is copied");
        assert_eq!(tail.allocated(), 2 * size_of::<usize>() + 40 * 8);
        // A part of a part counts against the whole allocation.
        let inner = head.part(10..55);
        assert_eq!(&*inner, &values[10..55]);
        assert!(!shares(&inner, &all), "45 of 100 is copied");
        let shared = head.part(5..60);
        assert_eq!(&*shared, &values[5..60]);
        assert!(shares(&shared, &all), "55 of 100 is shared");
        assert!(Locals::new(&[]).is_empty());
    }

    #[test]
    fn short_runs_and_parts_are_inline() {
        let values: Vec<u64> = (0..100).collect();
        for len in 0..=INLINE + 1 {
            let locals = Locals::new(&values[..len]);
            assert_eq!(&*locals, &values[..len]);
            assert_eq!(buffer(&locals).is_none(), len <= INLINE, "{len}");
            assert_eq!(locals.allocated() == 0, len <= INLINE, "{len}");
        }
        let all = Locals::new(&values);
        for (start, end) in [(0, INLINE), (93, 100), (50, 50 + INLINE), (0, 0)] {
            let part = all.part(start..end);
            assert_eq!(&*part, &values[start..end]);
            assert!(buffer(&part).is_none(), "{start}..{end} is inline");
        }
        // A part of an inline run, and a part longer than inline of a short allocation.
        let short = Locals::new(&values[..INLINE]);
        assert_eq!(&*short.part(2..5), &values[2..5]);
        let just_over = Locals::new(&values[..INLINE + 1]);
        assert_eq!(&*just_over.part(0..INLINE), &values[..INLINE]);
        assert!(buffer(&just_over.part(0..INLINE)).is_none());
    }
}
