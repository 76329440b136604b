//! [`Run`]: a chain of tree nodes that the same workers hold and that only branches at its end,
//! the unit a lane's tree is made of (queries walk them: see [`crate::index::walk`]).
//!
//! A [`Run`] is one immutable version: its identity and its [`RunState`] (content hashes, the
//! tail id of its last block, its holders) in one allocation, so a lookup reaches everything a
//! walk compares in one step from the table's slot. The lane replaces a run's version whole in
//! its slot, so a reader always sees a consistent run.
//!
//! What identifies a run is where it hangs (the [`RunState::tail_id`] of its parent's last
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

use crate::index::holder_sets::Holders;
use crate::index::locals::Locals;
use crate::sync::AtomicU32;

/// Identifies a run to its lane (an index into the lane's arena).
pub(crate) type RunId = u32;

/// One version of a run; see the [module docs](self).
pub(crate) struct Run {
    /// The lane's id for this run, so a lookup by key leads the writer to its bookkeeping
    /// (only the writer uses it, on the current version; atomic so it can renumber runs while
    /// readers hold them).
    pub(crate) id: AtomicU32,
    /// The tail id of the node this run hangs from ([`ROOT_TAIL`] for a root).
    pub(crate) parent_tail: u64,
    pub(crate) state: RunState,
}

/// The tail id roots hang from; lanes draw real ones from 1 up.
pub(crate) const ROOT_TAIL: u64 = 0;

impl Run {
    /// Whether this is the child with content `local` of the node tailed `parent_tail`.
    #[inline]
    pub(crate) fn is_child(&self, parent_tail: u64, local: u64) -> bool {
        self.parent_tail == parent_tail && self.first() == local
    }

    /// The content hash of the run's first block.
    #[inline]
    pub(crate) fn first(&self) -> u64 {
        self.state.locals[0]
    }
}

/// What changes between a run's versions.
pub(crate) struct RunState {
    /// The content hash of each block: inline in a short run, else shared between versions.
    pub(crate) locals: Locals,
    /// Identifies the last block as the parent of child runs (see the [module docs](self)):
    /// a split's tail keeps it (the children stay below that block), and a block that becomes
    /// a run's last gets a fresh one.
    pub(crate) tail_id: u64,
    /// The workers holding every block of the run: bits of the lane's slots, or a sorted list
    /// (see [`Holders`]); a list is shared like `locals` between versions that differ in
    /// content only (a split's two halves, a shortened run).
    pub(crate) members: Holders,
}
