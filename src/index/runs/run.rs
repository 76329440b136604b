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
//! [`RunTable`](super::run_table::RunTable) under a key made of those two
//! ([`RunTable::key`](super::run_table::RunTable::key)): a walk that matched a run knows
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
//! the lane recycles ([`VersionCache`]). Versions are made in `versions.rs`, with that memory:
//! this file is the layout and what a version says.
//!
//! [`Version`]: super::versions::Version
//! [`VersionCache`]: super::versions::VersionCache

use std::ops::Range;

use crate::index::runs::holder_sets::{Holders, RunHolders};
use crate::index::runs::locals::Locals;
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

/// The fields of a version besides its inline hashes: what [`RunOf::new`] makes one of.
pub(crate) struct RunFields {
    pub(crate) id: u32,
    pub(crate) parent_tail: u64,
    pub(crate) tail_id: u64,
    pub(crate) members: Holders,
    pub(crate) shared: Option<Arc<[u64]>>,
    pub(crate) start: u32,
    pub(crate) len: u32,
}

impl<const N: usize> RunOf<[u64; N]> {
    /// A version with `fields` and `N` hashes inline, to be written into memory of its layout
    /// (versions are made in `versions.rs`, with the memory they live in).
    #[inline]
    pub(crate) fn new(fields: RunFields, inline: [u64; N]) -> Self {
        let RunFields { id, parent_tail, tail_id, members, shared, start, len } = fields;
        RunOf {
            id: AtomicU32::new(id),
            inline_len: N as u32,
            parent_tail,
            tail_id,
            members: RunHolders::from(members),
            shared,
            start,
            len,
            inline,
        }
    }
}

impl Run {
    /// This version's fields with `members` as its holders, and its inline hashes: the same
    /// version with other holders is made of them.
    pub(crate) fn parts_with(&self, members: Holders) -> (RunFields, &[u64]) {
        let fields = RunFields {
            id: self.id.load(Ordering::Relaxed),
            parent_tail: self.parent_tail,
            tail_id: self.tail_id,
            members,
            shared: self.shared.clone(),
            start: self.start,
            len: self.len,
        };
        (fields, &self.inline)
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
    ///
    /// [`layout_of`]: super::versions::layout_of
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

    /// This run's hashes followed by those of `tail` (its only child), for the version that
    /// joins them: a window onto an allocation one of them shares, when that allocation holds
    /// the other's hashes beside its own (a split that copied the smaller part out left them
    /// there), else made anew through `scratch`.
    pub(crate) fn joined(&self, tail: &Run, scratch: &mut Vec<u64>) -> Locals {
        let (head_len, tail_len) = (self.len(), tail.len());
        if let Some(shared) = &tail.shared {
            let start = tail.start as usize;
            if start >= head_len && shared[start - head_len..start] == *self.locals() {
                return Locals::window(shared, start - head_len..start + tail_len);
            }
        }
        if let Some(shared) = &self.shared {
            let (start, end) = (self.start as usize, (self.start + self.len) as usize);
            if shared.len() - end >= tail_len && shared[end..end + tail_len] == *tail.locals() {
                return Locals::window(shared, start..end + tail_len);
            }
        }
        scratch.clear();
        scratch.extend_from_slice(self.locals());
        scratch.extend_from_slice(tail.locals());
        Locals::new(scratch)
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
    ///
    /// [`Version::into_raw`]: super::versions::Version::into_raw
    pub(crate) fn thin(run: &Run) -> *mut RunHead {
        std::ptr::from_ref(run).cast::<RunHead>().cast_mut()
    }

    /// The version `thin` points at, whole.
    ///
    /// # Safety
    ///
    /// `thin` came from [`Version::into_raw`] or [`Self::thin`], and its version lives for `'a`.
    ///
    /// [`Version::into_raw`]: super::versions::Version::into_raw
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
    ///
    /// [`Version::into_raw`]: super::versions::Version::into_raw
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
