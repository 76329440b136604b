//! [`Version`]: an owned [`Run`] version, and [`VersionCache`], the lane's memory for them.
//!
//! Versions are what a lane allocates most: every holder change, split or append replaces a
//! run's version whole (see [`crate::index::run`]), and the old one is freed once readers let
//! go of it. Through `std::sync::Arc` each was a `malloc` and, some events later, a `free`; on
//! the `shared-fleet` shape those, with a boxed handle per retired version, were about a tenth
//! of a lane's instructions (callgrind: 160–190 per call). Here a version is a plain
//! allocation with no count (a table slot owns it, the writer retires it once, readers only
//! borrow it under their epoch guard), and the lane's [`VersionCache`] keeps the memory of
//! reclaimed versions by size to build the next ones in: taking and giving back one is a push
//! or pop on a short list, on memory the lane touched a few events ago.
//!
//! Memory always comes from the global allocator with the [`Layout`] of its size class, so a
//! version dropped anywhere (a table dropped on a reader's thread, a reclaimer's leftovers run
//! by the epoch) gives it back there, and the cache holds at most [`KEEP_PER_SIZE`] of each.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ops::Deref;
use std::ptr::NonNull;

use crate::index::locals::INLINE;
use crate::index::run::{Run, RunHead};

/// Reclaimed versions the cache keeps per size (inline hash count); more are freed.
pub(crate) const KEEP_PER_SIZE: usize = 256;

/// The layout of a version with `inline` hashes inline (at most [`INLINE`]).
pub(crate) fn layout_of(inline: usize) -> Layout {
    let hashes = Layout::array::<u64>(inline).expect("at most INLINE hashes");
    let (layout, _) = Layout::new::<RunHead>().extend(hashes).expect("a small version");
    layout.pad_to_align()
}

/// An owned version: dropping it drops its fields and frees its memory (see the
/// [module docs](self)).
pub(crate) struct Version(NonNull<RunHead>);

// SAFETY: a `Version` owns its run exclusively, like a `Box<Run>`, and `Run` is `Send + Sync`.
unsafe impl Send for Version {}
// SAFETY: as above; sharing a `Version` shares `&Run` only.
unsafe impl Sync for Version {}

impl Version {
    /// Takes ownership of the version `thin` points at.
    ///
    /// # Safety
    ///
    /// `thin` points at a version written whole into memory of [`layout_of`] its inline length,
    /// from the global allocator, that nothing else owns (see [`Self::into_raw`]).
    pub(crate) unsafe fn from_raw(thin: *mut RunHead) -> Self {
        Self(NonNull::new(thin).expect("a version's pointer is not null"))
    }

    /// Gives up ownership as the thin pointer a table slot keeps; [`Self::from_raw`] takes it
    /// back.
    pub(crate) fn into_raw(self) -> *mut RunHead {
        let thin = self.0.as_ptr();
        std::mem::forget(self);
        thin
    }

    /// Drops the version's fields, keeping its memory: the pointer and the inline length it
    /// was made for.
    fn into_memory(self) -> (NonNull<u8>, usize) {
        let inline = self.inline_len();
        let thin = self.into_raw();
        // SAFETY: `thin` owned a version written whole (see `from_raw`), given up by
        // `into_raw`: its fields are dropped once, here, and its memory is not read as a
        // version again. The fat pointer's provenance covers the whole version.
        unsafe { std::ptr::drop_in_place(Run::fat_mut(thin)) };
        (NonNull::new(thin.cast::<u8>()).expect("not null"), inline)
    }
}

impl Deref for Version {
    type Target = Run;

    #[inline]
    fn deref(&self) -> &Run {
        // SAFETY: the version is owned and alive while `self` is.
        unsafe { Run::from_thin(self.0.as_ptr()) }
    }
}

impl Drop for Version {
    fn drop(&mut self) {
        // The fields go through a copy of the pointer, which gives up ownership again.
        let (memory, inline) = Self(self.0).into_memory();
        // SAFETY: the memory came from the global allocator with this layout (see `from_raw`).
        unsafe { dealloc(memory.as_ptr(), layout_of(inline)) };
    }
}

/// The lane's reclaimed version memory, by inline length; see the [module docs](self).
pub(crate) struct VersionCache {
    free: [Vec<NonNull<u8>>; INLINE + 1],
}

// SAFETY: the cache owns the memory it lists exclusively (no version lives in it), so it may
// move to another thread like a `Vec<Box<[u8]>>` would.
unsafe impl Send for VersionCache {}

impl Default for VersionCache {
    fn default() -> Self {
        Self { free: std::array::from_fn(|_| Vec::new()) }
    }
}

impl VersionCache {
    /// Memory for a version with `inline` hashes inline, of [`layout_of`] that length, from
    /// the global allocator.
    #[inline]
    pub(crate) fn take(&mut self, inline: usize) -> NonNull<u8> {
        if let Some(memory) = self.free[inline].pop() {
            return memory;
        }
        let layout = layout_of(inline);
        // SAFETY: `layout` is never zero-sized (a version has fixed fields).
        let memory = unsafe { alloc(layout) };
        NonNull::new(memory).unwrap_or_else(|| handle_alloc_error(layout))
    }

    /// Drops `version`, keeping its memory for a later [`Self::take`] while there is room.
    pub(crate) fn recycle(&mut self, version: Version) {
        let (memory, inline) = version.into_memory();
        let free = &mut self.free[inline];
        if free.len() < KEEP_PER_SIZE {
            free.push(memory);
        } else {
            // SAFETY: the memory came from the global allocator with this layout.
            unsafe { dealloc(memory.as_ptr(), layout_of(inline)) };
        }
    }

    /// Heap bytes held: the kept memory and the lists.
    pub(crate) fn bytes(&self) -> usize {
        let kept = |(inline, free): (usize, &Vec<NonNull<u8>>)| {
            free.len() * layout_of(inline).size() + free.capacity() * size_of::<NonNull<u8>>()
        };
        self.free.iter().enumerate().map(kept).sum()
    }
}

impl Drop for VersionCache {
    fn drop(&mut self) {
        for (inline, free) in self.free.iter_mut().enumerate() {
            for memory in free.drain(..) {
                // SAFETY: the memory came from the global allocator with this layout.
                unsafe { dealloc(memory.as_ptr(), layout_of(inline)) };
            }
        }
    }
}

/// Where the writer finds a run's current version, which the run's table slot owns: a pointer
/// that owns nothing (see [`Self::get`]).
#[derive(Clone, Copy)]
pub(crate) struct VersionPtr(NonNull<RunHead>);

// SAFETY: only a pointer; what may be done through it is `get`'s contract, on any thread.
unsafe impl Send for VersionPtr {}

impl VersionPtr {
    /// Points at `version`.
    pub(crate) fn of(version: &Version) -> Self {
        Self(version.0)
    }

    /// The version pointed at.
    ///
    /// # Safety
    ///
    /// The version is still owned (by a table slot, or a reclaimer that has not handed it
    /// back) for `'a`.
    #[inline]
    pub(crate) unsafe fn get<'a>(self) -> &'a Run {
        // SAFETY: the caller's promise.
        unsafe { Run::from_thin(self.0.as_ptr()) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::event::Worker;
    use crate::index::holder_sets::Holders;
    use crate::index::locals::Locals;
    use crate::index::run::RunState;

    fn version(len: usize, cache: &mut VersionCache) -> Version {
        let locals: Vec<u64> = (1..=len as u64).collect();
        let members = Holders::listed(&[Worker::new(len as u64, 0), Worker::new(99, 0)]);
        let state = RunState { locals: Locals::new(&locals), tail_id: 1, members };
        Run::version(3, 0, state, cache)
    }

    /// Recycled memory makes the next version of its size, most recent first; the cache keeps
    /// at most `KEEP_PER_SIZE` per size and frees the rest, and drops its fields either way
    /// (miri checks for leaks: run under miri too, see the README).
    #[test]
    fn recycled_memory_is_reused_by_size_and_bounded() {
        let kept = if cfg!(miri) { 8 } else { KEEP_PER_SIZE };
        let mut cache = VersionCache::default();
        let versions: Vec<Version> = (0..kept + 3).map(|_| version(2, &mut cache)).collect();
        // Given back in order, the last one kept is the last that finds room.
        let last = Run::thin(&versions[(kept + 3).min(KEEP_PER_SIZE) - 1]);
        let long = version(30, &mut cache);
        assert_eq!(long.inline_len(), 0);
        for version in versions {
            cache.recycle(version);
        }
        let full = cache.free[2].len();
        assert_eq!(full, (kept + 3).min(KEEP_PER_SIZE));
        assert_eq!(cache.bytes(), full * layout_of(2).size() + cache.free[2].capacity() * 8);
        // Another size does not take it; the same size takes the last one kept.
        let other = version(5, &mut cache);
        assert_ne!(Run::thin(&other), last);
        let again = version(2, &mut cache);
        assert_eq!(Run::thin(&again), last);
        assert_eq!(again.locals(), &[1, 2]);
        assert!(again.members.view().holds(Worker::new(99, 0), None));
        cache.recycle(long);
        assert_eq!(cache.free[0].len(), 1);
        drop((other, again));
    }
}
