//! [`Version`]: an owned [`Run`] version, and [`VersionCache`], the lane's memory for them.
//!
//! Versions are what a lane allocates most: every holder change, split or append replaces a
//! run's version whole (see [`super::run`]), and the old one is freed once readers let
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

use crate::index::runs::holder_sets::Holders;
use crate::index::runs::locals::{INLINE, Locals};
use crate::index::runs::run::{Run, RunFields, RunHead, RunOf, RunState};

/// Reclaimed versions the cache keeps per size (inline hash count); more are freed.
pub(crate) const KEEP_PER_SIZE: usize = 256;

/// The layout of a version with `inline` hashes inline (at most [`INLINE`]).
pub(crate) fn layout_of(inline: usize) -> Layout {
    let hashes = Layout::array::<u64>(inline).expect("at most INLINE hashes");
    let (layout, _) = Layout::new::<RunHead>().extend(hashes).expect("a small version");
    layout.pad_to_align()
}

impl Run {
    /// A version of the lane's run `id`, hanging from `parent_tail`, in `state`, in memory from
    /// `cache`.
    pub(crate) fn version(
        id: u32,
        parent_tail: u64,
        state: RunState,
        cache: &mut VersionCache,
    ) -> Version {
        let RunState { locals, tail_id, members } = state;
        let fields = |shared, start, len| RunFields {
            id,
            parent_tail,
            tail_id,
            members,
            shared,
            start,
            len,
        };
        match locals {
            Locals::Shared { buffer, start, len } => {
                made(fields(Some(buffer), start, len), &[], cache)
            }
            Locals::Inline { len, hashes } => {
                made(fields(None, 0, u32::from(len)), &hashes[..usize::from(len)], cache)
            }
        }
    }

    /// This version with `members` as its holders (the same run, hashes and tail id), in
    /// memory from `cache`.
    pub(crate) fn with_members(&self, members: Holders, cache: &mut VersionCache) -> Version {
        let (fields, inline) = self.parts_with(members);
        made(fields, inline, cache)
    }
}

/// A version with `fields` and `inline` (`N` hashes), in memory from `cache`.
fn sized<const N: usize>(fields: RunFields, inline: &[u64], cache: &mut VersionCache) -> Version {
    let mut hashes = [0; N];
    hashes.copy_from_slice(inline);
    debug_assert_eq!(Layout::new::<RunOf<[u64; N]>>(), layout_of(N));
    let memory = cache.take(N).cast::<RunOf<[u64; N]>>();
    // SAFETY: `take` gives memory of `layout_of(N)`, the layout of `RunOf<[u64; N]>`, that
    // nothing else uses; it is written whole here.
    unsafe { memory.as_ptr().write(RunOf::new(fields, hashes)) };
    // SAFETY: written whole above, into memory of `layout_of` its inline length from the global
    // allocator (`take`), owned by nothing else; `repr(C)` puts its fixed fields where a
    // `RunHead`'s are.
    unsafe { Version::from_raw(memory.as_ptr().cast::<RunHead>()) }
}

/// A version with `fields` and `inline` (at most [`INLINE`] hashes), in memory from `cache`.
fn made(fields: RunFields, inline: &[u64], cache: &mut VersionCache) -> Version {
    // One arm per length an inline run can have.
    const _: () = assert!(INLINE == 11, "one arm per inline length below");
    match inline.len() {
        0 => sized::<0>(fields, inline, cache),
        1 => sized::<1>(fields, inline, cache),
        2 => sized::<2>(fields, inline, cache),
        3 => sized::<3>(fields, inline, cache),
        4 => sized::<4>(fields, inline, cache),
        5 => sized::<5>(fields, inline, cache),
        6 => sized::<6>(fields, inline, cache),
        7 => sized::<7>(fields, inline, cache),
        8 => sized::<8>(fields, inline, cache),
        9 => sized::<9>(fields, inline, cache),
        10 => sized::<10>(fields, inline, cache),
        _ => sized::<11>(fields, inline, cache),
    }
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
    use crate::sync::Ordering;

    fn state(locals: Locals) -> RunState {
        RunState { locals, tail_id: 9, members: Holders::listed(&[Worker::new(3, 0)]) }
    }

    /// A version holds just as many hashes inline as its run has (none when they are shared),
    /// and comes back whole from its thin pointer. Run under miri too (see the README).
    #[test]
    fn versions_are_sized_to_their_run() {
        let values: Vec<u64> = (100..140).collect();
        let mut cache = VersionCache::default();
        for len in 1..=values.len() {
            let run = Run::version(7, 5, state(Locals::new(&values[..len])), &mut cache);
            assert_eq!(run.locals(), &values[..len]);
            assert_eq!((run.len(), run.first(), run.tail_id, run.parent_tail), (len, 100, 9, 5));
            assert_eq!(run.is_inline(), len <= INLINE, "{len}");
            let inline = if len <= INLINE { len } else { 0 };
            assert_eq!(run.inline_len(), inline);
            assert_eq!(size_of_val(&*run), size_of::<RunHead>() + inline * 8, "{len}");
            assert_eq!(Layout::for_value(&*run), layout_of(inline), "{len}");
            let shared = if len <= INLINE { 0 } else { 16 + len * 8 };
            assert_eq!(run.bytes(), size_of_val(&*run) + shared);
            // Through the thin pointer a slot keeps, and back to an owner.
            let at = Run::thin(&run);
            let thin = run.into_raw();
            assert_eq!(thin, at);
            // SAFETY: `thin` owns its version until it is taken back below.
            let seen = unsafe { Run::from_thin(thin) };
            assert_eq!((seen.locals(), seen.tail_id), (&values[..len], 9));
            // SAFETY: from `into_raw`, taken back once.
            let run = unsafe { Version::from_raw(thin) };
            // A holder change keeps everything else, a long run's hashes where they are.
            let other = run.with_members(Holders::listed(&[Worker::new(4, 0)]), &mut cache);
            assert_eq!((other.locals(), other.tail_id, other.parent_tail), (run.locals(), 9, 5));
            assert_eq!(
                (other.id.load(Ordering::Relaxed), size_of_val(&*other)),
                (7, size_of_val(&*run))
            );
            assert_eq!(other.locals().as_ptr() == run.locals().as_ptr(), len > INLINE, "{len}");
            assert!(other.members.view().holds(Worker::new(4, 0), None));
            // Recycled memory makes the next version of its size; dropped, the other is freed.
            let memory = Run::thin(&run);
            cache.recycle(run);
            let again = Run::version(8, 5, state(Locals::new(&values[..len])), &mut cache);
            assert_eq!(Run::thin(&again), memory, "{len}");
            assert_eq!((again.id.load(Ordering::Relaxed), again.locals()), (8, &values[..len]));
            drop(other);
            cache.recycle(again);
        }
        assert!(cache.bytes() > 0);
    }

    /// A part of a version is inline when short, shares a long run's allocation while it
    /// covers more than half of it, and is a copy otherwise.
    #[test]
    fn parts_of_a_version_share_or_copy_its_hashes() {
        let values: Vec<u64> = (0..100).collect();
        let mut cache = VersionCache::default();
        let long = Run::version(1, 0, state(Locals::new(&values)), &mut cache);
        let short = Run::version(1, 0, state(Locals::new(&values[..8])), &mut cache);
        let buffer = |locals: &Locals| match locals {
            Locals::Inline { .. } => None,
            Locals::Shared { buffer, .. } => Some(buffer.as_ptr()),
        };
        let all = long.part(0..long.len());
        assert_eq!(&*all, &values[..]);
        assert_eq!(buffer(&all), Some(long.locals().as_ptr()));
        let head = long.part(0..60);
        assert_eq!((&*head, buffer(&head)), (&values[..60], Some(long.locals().as_ptr())));
        let tail = long.part(60..100);
        assert_eq!(&*tail, &values[60..]);
        assert!(buffer(&tail).is_some_and(|at| at != long.locals().as_ptr()), "a copy");
        let few = long.part(50..55);
        assert_eq!((&*few, buffer(&few)), (&values[50..55], None));
        let some = short.part(2..6);
        assert_eq!((&*some, buffer(&some)), (&values[2..6], None));
        // A version made from a shared part reads through the same allocation.
        let from_head = Run::version(2, 0, state(head), &mut cache);
        assert_eq!(from_head.locals().as_ptr(), long.locals().as_ptr());
        assert_eq!(from_head.locals(), &values[..60]);
    }

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
