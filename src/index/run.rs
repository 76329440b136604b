//! [`Run`]: a chain of tree nodes that the same workers hold and that only branches at its end,
//! the unit a lane's tree is made of (queries walk them: see [`crate::index::walk`]).
//!
//! A [`Run`] is one version: its identity and its state (content hashes, the tail id of its
//! last block, its holders) in one allocation, so a lookup reaches everything a walk compares
//! in one step from the table's slot. The lane builds a version from a [`RunState`] and
//! replaces a run's version whole in its slot when its content changes, so a reader always
//! sees a consistent run. Only a holder change that keeps the holders a set of bits is made in
//! place, in the current version (see [`RunHolders`]): it leaves the content a reader compares
//! as it was, and saves the lane a version (most holder changes, where documents are shared).
//!
//! What identifies a run is where it hangs (the [`Run::tail_id`] of its parent's last
//! node, [`ROOT_TAIL`] for a root) and its first content hash, both fixed for the run's life.
//! Tail ids are drawn by the lane and never reused. A run is found in the lane's
//! [`RunTable`](crate::index::run_table::RunTable) under a key made of those two
//! ([`RunTable::key`](crate::index::run_table::RunTable::key)): a walk that matched a run knows
//! its tail id and the query's next content hash, so it finds the next run with one multiply
//! and no hashing of the chain, and a lane storing blocks hashes nothing per block. Our
//! sequence hashes, which a run's place stands for, are computed only for snapshots.
//!
//! A key only says where to look: the part a sender chooses (the content hash) is combined
//! with a secret mix of the tail id, so keys cannot be aimed at each other in bulk, but any
//! two may still be equal. Every lookup checks a run's identity, so colliding keys cost a
//! longer probe, never a wrong run.
//!
//! ## Layout
//!
//! A version is sized to its run: a short run's hashes follow its fixed fields inline, exactly
//! as many as it has, and a long run's (see [`Locals`]) are a window onto an allocation its
//! versions share, with nothing inline. Versions are the lane's most numerous allocation, and
//! most are short or long (a fixed inline array wasted most of its 88 bytes on both). So a
//! version is a dynamically sized [`RunOf<[u64]>`](RunOf), reached through a fat pointer; the
//! table's slots keep the thin pointer of its fixed part ([`RunHead`]), which records how many
//! hashes follow, and [`Run::from_thin`] makes it whole again. A slot owns its version as a
//! [`Version`], with no reference count (readers borrow it under their epoch guard), in memory
//! the lane recycles ([`VersionCache`]).

use std::alloc::Layout;
use std::ops::Range;

use crate::index::holder_sets::{Holders, RunHolders};
use crate::index::locals::{INLINE, Locals};
use crate::index::versions::{Version, VersionCache, layout_of};
use crate::sync::{Arc, AtomicU32, Ordering};

/// Identifies a run to its lane (an index into the lane's arena).
pub(crate) type RunId = u32;

/// One version of a run, with its inline hashes; see the [module docs](self).
pub(crate) type Run = RunOf<[u64]>;

/// The fixed part of a version, which a table slot points at (see the [module docs](self)).
pub(crate) type RunHead = RunOf<[u64; 0]>;

/// A version of a run with `H` as its inline hashes: `[u64]` for a version ([`Run`]), an array
/// while one is made, `[u64; 0]` for the fixed part alone ([`RunHead`]). `repr(C)`, so the
/// fixed fields are laid out alike in all of them.
#[repr(C)]
pub(crate) struct RunOf<H: ?Sized> {
    /// The lane's id for this run, so a lookup by key leads the writer to its bookkeeping
    /// (only the writer uses it, on the current version; atomic so it can renumber runs while
    /// readers hold them).
    pub(crate) id: AtomicU32,
    /// How many hashes `inline` holds: a [`Run`]'s pointer metadata.
    inline_len: u32,
    /// The tail id of the node this run hangs from ([`ROOT_TAIL`] for a root).
    pub(crate) parent_tail: u64,
    /// Identifies the last block as the parent of child runs (see the [module docs](self)):
    /// a split's tail keeps it (the children stay below that block), and a block that becomes
    /// a run's last gets a fresh one.
    pub(crate) tail_id: u64,
    /// The workers holding every block of the run: bits of the lane's slots, or a sorted list
    /// (see [`Holders`]); a list is shared like the hashes between versions that differ in
    /// content only (a split's two halves, a shortened run). Bits change in place (see
    /// [`RunHolders`]).
    pub(crate) members: RunHolders,
    /// A long run's hashes: `shared[start..start + len]`, an allocation versions share.
    shared: Option<Arc<[u64]>>,
    start: u32,
    /// How many blocks the run has.
    len: u32,
    inline: H,
}

/// What the lane makes a version of: a run's state as it changes between versions.
pub(crate) struct RunState {
    /// The content hash of each block.
    pub(crate) locals: Locals,
    /// See [`Run::tail_id`].
    pub(crate) tail_id: u64,
    /// See [`Run::members`].
    pub(crate) members: Holders,
}

/// The tail id roots hang from; lanes draw real ones from 1 up.
pub(crate) const ROOT_TAIL: u64 = 0;

/// The fields of a version besides its inline hashes.
struct Fixed {
    id: u32,
    parent_tail: u64,
    tail_id: u64,
    members: Holders,
    shared: Option<Arc<[u64]>>,
    start: u32,
    len: u32,
}

/// A version with `fixed` and `inline` (`N` hashes), in memory from `cache`.
fn sized<const N: usize>(fixed: Fixed, inline: &[u64], cache: &mut VersionCache) -> Version {
    let Fixed { id, parent_tail, tail_id, members, shared, start, len } = fixed;
    let mut hashes = [0; N];
    hashes.copy_from_slice(inline);
    debug_assert_eq!(Layout::new::<RunOf<[u64; N]>>(), layout_of(N));
    let memory = cache.take(N).cast::<RunOf<[u64; N]>>();
    // SAFETY: `take` gives memory of `layout_of(N)`, the layout of `RunOf<[u64; N]>`, that
    // nothing else uses; it is written whole here.
    unsafe {
        memory.as_ptr().write(RunOf {
            id: AtomicU32::new(id),
            inline_len: N as u32,
            parent_tail,
            tail_id,
            members: RunHolders::from(members),
            shared,
            start,
            len,
            inline: hashes,
        });
    }
    // SAFETY: written whole above, into memory of `layout_of` its inline length from the global
    // allocator (`take`), owned by nothing else; `repr(C)` puts its fixed fields where a
    // `RunHead`'s are.
    unsafe { Version::from_raw(memory.as_ptr().cast::<RunHead>()) }
}

/// A version with `fixed` and `inline` (at most [`INLINE`] hashes), in memory from `cache`.
fn made(fixed: Fixed, inline: &[u64], cache: &mut VersionCache) -> Version {
    // One arm per length an inline run can have.
    const _: () = assert!(INLINE == 11, "one arm per inline length below");
    match inline.len() {
        0 => sized::<0>(fixed, inline, cache),
        1 => sized::<1>(fixed, inline, cache),
        2 => sized::<2>(fixed, inline, cache),
        3 => sized::<3>(fixed, inline, cache),
        4 => sized::<4>(fixed, inline, cache),
        5 => sized::<5>(fixed, inline, cache),
        6 => sized::<6>(fixed, inline, cache),
        7 => sized::<7>(fixed, inline, cache),
        8 => sized::<8>(fixed, inline, cache),
        9 => sized::<9>(fixed, inline, cache),
        10 => sized::<10>(fixed, inline, cache),
        _ => sized::<11>(fixed, inline, cache),
    }
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
        let fixed =
            |shared, start, len| Fixed { id, parent_tail, tail_id, members, shared, start, len };
        match locals {
            Locals::Shared { buffer, start, len } => {
                made(fixed(Some(buffer), start, len), &[], cache)
            }
            Locals::Inline { len, hashes } => {
                made(fixed(None, 0, u32::from(len)), &hashes[..usize::from(len)], cache)
            }
        }
    }

    /// This version with `members` as its holders (the same run, hashes and tail id), in
    /// memory from `cache`.
    pub(crate) fn with_members(&self, members: Holders, cache: &mut VersionCache) -> Version {
        let fixed = Fixed {
            id: self.id.load(Ordering::Relaxed),
            parent_tail: self.parent_tail,
            tail_id: self.tail_id,
            members,
            shared: self.shared.clone(),
            start: self.start,
            len: self.len,
        };
        made(fixed, &self.inline, cache)
    }

    /// The content hash of each block.
    #[inline]
    pub(crate) fn locals(&self) -> &[u64] {
        match &self.shared {
            None => &self.inline,
            Some(shared) => &shared[self.start as usize..(self.start + self.len) as usize],
        }
    }

    /// How many blocks the run has.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// How many hashes are inside the version (its size: see [`layout_of`]).
    #[inline]
    pub(crate) fn inline_len(&self) -> usize {
        self.inline_len as usize
    }

    /// Whether the hashes are inside the version (else in an allocation versions share).
    #[inline]
    pub(crate) fn is_inline(&self) -> bool {
        self.shared.is_none()
    }

    /// The hashes of blocks `range`, to make another version with (see [`Locals::part`]).
    pub(crate) fn part(&self, range: Range<usize>) -> Locals {
        match &self.shared {
            None => Locals::new(&self.inline[range]),
            Some(shared) => {
                let (start, len) = (self.start as usize + range.start, range.len());
                Locals::window(shared, start..start + len)
            }
        }
    }

    /// Bytes of the version's allocation and of its shared hashes' (all of those: only one
    /// live run uses them, see [`Locals`]).
    pub(crate) fn bytes(&self) -> usize {
        let shared = self
            .shared
            .as_ref()
            .map_or(0, |shared| 2 * size_of::<usize>() + size_of_val::<[u64]>(shared));
        size_of_val(self) + shared
    }

    /// Whether this is the child with content `local` of the node tailed `parent_tail`.
    #[inline]
    pub(crate) fn is_child(&self, parent_tail: u64, local: u64) -> bool {
        self.parent_tail == parent_tail && self.first() == local
    }

    /// The content hash of the run's first block.
    #[inline]
    pub(crate) fn first(&self) -> u64 {
        self.locals()[0]
    }

    /// The thin pointer of `run`, as [`Version::into_raw`] gives it.
    pub(crate) fn thin(run: &Run) -> *mut RunHead {
        std::ptr::from_ref(run).cast::<RunHead>().cast_mut()
    }

    /// The version `thin` points at, whole.
    ///
    /// # Safety
    ///
    /// `thin` came from [`Version::into_raw`] or [`Self::thin`], and its version lives for `'a`.
    #[inline]
    pub(crate) unsafe fn from_thin<'a>(thin: *const RunHead) -> &'a Run {
        // SAFETY: the caller's promise: `thin` points at a live version, which `fat` makes whole.
        unsafe { &*fat(thin) }
    }

    /// The version `thin` points at, whole, as a pointer that may drop it.
    ///
    /// # Safety
    ///
    /// `thin` came from [`Version::into_raw`], and its version is live.
    pub(crate) unsafe fn fat_mut(thin: *mut RunHead) -> *mut Run {
        // SAFETY: the caller's promise.
        unsafe { fat(thin) }.cast_mut()
    }
}

/// The fat pointer of the version `thin` points at.
///
/// # Safety
///
/// `thin` points at a live version.
#[inline]
unsafe fn fat(thin: *const RunHead) -> *const Run {
    // SAFETY: `RunOf` is `repr(C)`, so a version's fixed fields lie where a `RunHead`'s do, and
    // the caller's version is live: its `inline_len` can be read through `thin`, whose
    // provenance (from the version's `Arc`) covers all of the version.
    let inline_len = unsafe { (*thin).inline_len } as usize;
    // A `Run`'s metadata is its inline slice's length, as for a slice of that length.
    std::ptr::slice_from_raw_parts(thin.cast::<u64>(), inline_len) as *const Run
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::event::Worker;

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
}
