//! [`LaneTrie`]: the writer's side of one lane's tree: the runs its workers' blocks form, and
//! where each block (node) sits in them.
//!
//! The tree is the reference tree with chains compressed: a [`Run`] is a chain of nodes with the
//! same holders that branches only at its last node. Holders change a run at a time, so when a
//! worker starts or stops holding part of a run, the run is split there first. A run with no
//! holders stays while it has children (it is the path to them) and goes, with any ancestors
//! left as bare paths, when its last child goes, exactly like the reference's pruning.
//!
//! Publication order keeps concurrent readers on states that existed: a split inserts the new
//! tail run into the table before it shortens the head, and every change swaps a whole new
//! version of the run (its [`Run`], state included) into its slot, except a change of holders
//! bits, which a reader loads in one step (see [`crate::index::runs::run`]).
//!
//! Runs are looked up by identity, not by key (see [`crate::index::runs::run`]): each block
//! that is a run's last carries a tail id drawn from a counter that never repeats, and a child run
//! records its parent's.
//!
//! Splits are undone: a run whose holders become its only child's is joined with it at the end
//! of the event (`joins.rs`), so a chain that workers keep caching and evicting stays as few
//! runs as its holders make it, however long it lives. After mass removals the lane renumbers
//! the live nodes and runs densely (`compaction.rs`).

use crate::event::{LocalBlockHash, Worker};
use crate::index::lane::chunked::ChunkedVec;
use crate::index::lane::node_ids::{NodeId, NodeIds};
use crate::index::runs::holder_sets::{HolderSets, Holders};
use crate::index::runs::locals::Locals;
use crate::index::runs::run::{ROOT_TAIL, Run, RunId, RunState};
use crate::index::runs::run_table::{RunReclaimer, RunTableWriter};
use crate::index::runs::versions::{Version, VersionCache, VersionPtr};
use crate::sync::Ordering;
use crate::sync::epoch::Guard;

mod compaction;
mod joins;
use joins::Superseded;

/// The parent of root runs.
const ROOT: NodeId = NodeId::MAX;

/// Reused buffers keep their allocation up to this many entries.
pub(crate) const BUFFER_KEEP: usize = 4096;

/// Appending to a run copies it; beyond this many blocks, and unless the appended part is at
/// least a quarter of the result, a new run is cheaper.
const COPY_APPEND_LIMIT: usize = 256;

/// The most blocks one run may hold: appending to a run that would grow past it starts a new
/// run instead, so run offsets (32-bit) never overflow, however long a worker's chain grows.
pub(crate) const MAX_RUN_BLOCKS: usize = 1 << 31;

/// How large a lane's tree may grow. Node and run ids and offsets are 32-bit (and each run has
/// a node), so a lane holds at most [`crate::index::MAX_LANE_BLOCKS`] nodes; tests shrink both
/// limits to reach them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TrieLimits {
    pub(crate) max_run_blocks: usize,
    pub(crate) max_nodes: usize,
}

impl Default for TrieLimits {
    fn default() -> Self {
        Self { max_run_blocks: MAX_RUN_BLOCKS, max_nodes: crate::index::MAX_LANE_BLOCKS }
    }
}

/// Where a node sits, and the name (engine hash) its first holder gave it.
#[derive(Clone, Copy, Debug, Default)]
struct NodePos {
    run: RunId,
    offset: u32,
    name: u64,
}

struct RunMeta {
    /// The current version, which the run's table slot owns (see [`RunMeta::run`]).
    run: VersionPtr,
    /// The node this run's first node hangs below (its parent run's last), or [`ROOT`]. A node,
    /// not a run: a split moves a run's last node to a new run, and its children need not know.
    parent: NodeId,
    /// How many runs hang below this run's last node.
    children: u32,
    /// The xor of their run ids: with one child, its id (so a join finds it without a list).
    child_xor: RunId,
    /// The node at each offset.
    ids: NodeIds,
}

/// Where one worker's walk down a lane's tree stands ([`LaneTrie::cursor`], [`LaneTrie::step`]):
/// a node with its run, its offset there and the run's version (kept alive by the walk's
/// guard), or the root; and, once asked, whether the worker holds that run (holders change a
/// run at a time, so the answer lasts until the walk leaves the run).
pub(crate) struct Cursor<'g> {
    worker: Worker,
    at: Option<(NodeId, RunId, u32, &'g Run)>,
    holds: Option<bool>,
}

impl Cursor<'_> {
    /// The node, `None` at the root.
    pub(crate) fn node(&self) -> Option<NodeId> {
        self.at.map(|(node, ..)| node)
    }
}

/// See the [module docs](self).
pub(crate) struct LaneTrie {
    table: RunTableWriter,
    runs: ChunkedVec<Option<RunMeta>>,
    free_runs: Vec<RunId>,
    nodes: ChunkedVec<NodePos>,
    free_nodes: Vec<NodeId>,
    /// Reused buffers: for [`Self::release`], and for a run's content hashes with a branch
    /// appended.
    spots: Vec<(RunId, u32)>,
    joined: Vec<u64>,
    /// Runs whose holders or children changed in this event: joined with a neighbour at its
    /// end where they have become one run's worth (see `joins.rs`).
    may_join: Vec<RunId>,
    /// Runs joined into their parent that stay in the table for readers that loaded the
    /// parent's old version, until they are gone.
    superseded: Superseded,
    /// Makes the runs' holder sets (and hands out the lane's holder slots).
    holder_sets: HolderSets,
    /// What this lane unlinked and readers may still hold.
    retired: RunReclaimer,
    /// The memory of reclaimed versions, to build new ones in.
    versions: VersionCache,
    /// The next tail id to give out (never reused; [`ROOT_TAIL`] is below the first).
    next_tail: u64,
    /// The live runs' heap bytes ([`run_heap_bytes`]), kept as runs change so that
    /// [`Self::bytes`] need not walk them.
    run_bytes: usize,
    limits: TrieLimits,
}

/// What a run's version holds on the heap: itself, its shared hashes and its own holder list.
fn version_bytes(run: &Run) -> usize {
    run.bytes() + run.members.own_bytes()
}

/// What a run holds on the heap besides its record: its version and its node id list.
fn run_heap_bytes(meta: &RunMeta) -> usize {
    version_bytes(meta.run()) + meta.ids.heap_bytes()
}

impl RunMeta {
    /// The run's current version.
    #[inline]
    fn run(&self) -> &Run {
        // SAFETY: a record always points at the version its run's table slot owns: `add_run`
        // records the version it publishes, `put_version` the one it swaps in, and
        // `remove_run` and `reset` drop the record with (or after) unlinking the run. An
        // unlinked version is handed back for reuse only by a later `reclaim_with` in
        // `end_event` or `reclaim`, which take the trie by `&mut`: no borrow of a record
        // lives that long.
        unsafe { self.run.get() }
    }
}

impl LaneTrie {
    /// A tree with the real limits (the lanes pass theirs to [`Self::with_limits`]).
    #[cfg(any(test, loom))]
    pub(crate) fn new(table: RunTableWriter) -> Self {
        Self::with_limits(table, TrieLimits::default())
    }

    pub(crate) fn with_limits(table: RunTableWriter, limits: TrieLimits) -> Self {
        Self {
            table,
            runs: ChunkedVec::default(),
            free_runs: Vec::new(),
            nodes: ChunkedVec::default(),
            free_nodes: Vec::new(),
            spots: Vec::new(),
            joined: Vec::new(),
            may_join: Vec::new(),
            superseded: Superseded::default(),
            holder_sets: HolderSets::default(),
            retired: RunReclaimer::default(),
            versions: VersionCache::default(),
            next_tail: ROOT_TAIL + 1,
            run_bytes: 0,
            limits,
        }
    }

    /// How many more nodes the tree may take ([`TrieLimits::max_nodes`] less the live ones).
    pub(crate) fn room(&self) -> usize {
        let live = self.nodes.len() - self.free_nodes.len();
        self.limits.max_nodes.saturating_sub(live)
    }

    /// The most nodes the tree takes.
    pub(crate) fn capacity(&self) -> usize {
        self.limits.max_nodes
    }

    /// The longest run's length, for tests.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn longest_run(&self) -> usize {
        self.runs.iter().flatten().map(|meta| meta.ids.len()).max().unwrap_or(0)
    }

    /// A tail id no run has had.
    fn fresh_tail(&mut self) -> u64 {
        self.next_tail += 1;
        self.next_tail - 1
    }

    /// Closes the event's batch of retired values (freed once readers pinned now are gone), and
    /// frees earlier batches that are safe.
    pub(crate) fn end_event(&mut self, guard: &Guard) {
        self.join_where_due(guard);
        self.retired.seal(guard);
        self.reclaim();
    }

    /// Starts over with no runs, after a panic left this tree in an unknown state: unlinks
    /// every run from the table, whatever the tree says, and drops the tree. Tail ids go on
    /// from where they were, so a reader still on an old run never takes a new run for its
    /// child; the retired values stay with the reclaimer, freed as readers allow.
    pub(crate) fn reset(&mut self) {
        let guard = crate::sync::epoch::pin();
        // The table's slots own every version, superseded ones included.
        self.table.clear(&guard, &mut self.retired);
        self.superseded = Superseded::default();
        self.may_join = Vec::new();
        self.retired.seal(&guard);
        self.reclaim();
        self.runs = ChunkedVec::default();
        self.free_runs = Vec::new();
        self.nodes = ChunkedVec::default();
        self.free_nodes = Vec::new();
        self.holder_sets.forget_all(&mut self.retired);
        self.run_bytes = 0;
        self.joined = Vec::new();
        self.spots = Vec::new();
    }

    /// Gives back the reused buffers an unusually large event grew.
    pub(crate) fn trim_buffers(&mut self) {
        shed(&mut self.spots);
        shed(&mut self.joined);
        shed(&mut self.may_join);
    }

    /// Forgets what the trie keeps for `worker` itself (it holds nothing any more).
    pub(crate) fn forget_worker(&mut self, worker: Worker) {
        self.holder_sets.forget(worker, &mut self.retired);
    }

    /// Frees the retired batches that are safe (when idle), keeping their versions' memory.
    pub(crate) fn reclaim(&mut self) {
        self.retired.reclaim_with(|version| self.versions.recycle(version));
        self.unlink_superseded();
    }

    fn meta(&self, run: RunId) -> &RunMeta {
        self.runs[run as usize].as_ref().expect("live run")
    }

    fn meta_mut(&mut self, run: RunId) -> &mut RunMeta {
        self.runs[run as usize].as_mut().expect("live run")
    }

    /// The current version of `run`; `guard` keeps it alive after a later change retires it.
    pub(super) fn state<'g>(&self, run: RunId, _guard: &'g Guard) -> &'g Run {
        // SAFETY: the record points at the version its table slot owns (see `RunMeta::run`).
        // Once unlinked, a version goes to `retired`, which hands it back only after every
        // guard pinned before the unlinking is gone, `_guard` included.
        unsafe { self.meta(run).run.get() }
    }

    /// Live nodes.
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len() - self.free_nodes.len()
    }

    /// Live runs.
    pub(crate) fn run_count(&self) -> usize {
        self.runs.len() - self.free_runs.len()
    }

    /// The run `node` is in and its offset there.
    pub(super) fn position(&self, node: NodeId) -> (RunId, usize) {
        let pos = self.nodes[node as usize];
        (pos.run, pos.offset as usize)
    }

    /// The name (engine hash) `node`'s first holder gave it.
    #[inline]
    pub(crate) fn name(&self, node: NodeId) -> u64 {
        self.nodes[node as usize].name
    }

    /// The content hash of `node`.
    pub(crate) fn local(&self, node: NodeId, guard: &Guard) -> LocalBlockHash {
        let pos = self.nodes[node as usize];
        LocalBlockHash(self.state(pos.run, guard).locals()[pos.offset as usize])
    }

    /// The parent of `node`, `None` for a root block.
    pub(crate) fn parent(&self, node: NodeId) -> Option<NodeId> {
        let pos = self.nodes[node as usize];
        let meta = self.meta(pos.run);
        if pos.offset > 0 {
            return Some(meta.ids.get(pos.offset as usize - 1));
        }
        (meta.parent != ROOT).then_some(meta.parent)
    }

    /// The run `run` hangs below, `None` for a root run.
    pub(super) fn parent_run(&self, run: RunId) -> Option<RunId> {
        let parent = self.meta(run).parent;
        (parent != ROOT).then(|| self.nodes[parent as usize].run)
    }

    /// `worker`'s walk, at `node` (the root if `None`), for [`Self::step`].
    #[inline]
    pub(crate) fn cursor<'g>(
        &self,
        worker: Worker,
        node: Option<NodeId>,
        guard: &'g Guard,
    ) -> Cursor<'g> {
        let at = node.map(|node| {
            let pos = self.nodes[node as usize];
            (node, pos.run, pos.offset, self.state(pos.run, guard))
        });
        Cursor { worker, at, holds: None }
    }

    /// Moves `cursor` to the child of its node with content `local` and returns it, if it
    /// exists (else the cursor stays). Inside a run that reads the run's version at hand, not
    /// the node's position and the run's record again.
    #[inline]
    pub(crate) fn step<'g>(
        &self,
        cursor: &mut Cursor<'g>,
        local: u64,
        guard: &'g Guard,
    ) -> Option<NodeId> {
        let parent_tail = match cursor.at {
            None => ROOT_TAIL,
            Some((_, run, offset, state)) => {
                let offset = offset as usize + 1;
                if offset < state.len() {
                    if state.locals()[offset] != local {
                        return None;
                    }
                    let node = self.meta(run).ids.get(offset);
                    cursor.at = Some((node, run, offset as u32, state));
                    return Some(node);
                }
                state.tail_id
            }
        };
        let table = self.table.table();
        let key = table.key(parent_tail, local);
        let run = table.get(key, guard, |run| run.is_child(parent_tail, local))?;
        let run = run.id.load(Ordering::Relaxed);
        let node = self.meta(run).ids.get(0);
        (cursor.at, cursor.holds) = (Some((node, run, 0, self.state(run, guard))), None);
        Some(node)
    }

    /// Whether the cursor's worker holds the node it is at (not the root).
    #[inline]
    pub(crate) fn holds_at(&self, cursor: &mut Cursor<'_>) -> bool {
        let Some((_, _, _, state)) = cursor.at else { return false };
        *cursor.holds.get_or_insert_with(|| {
            let worker = cursor.worker;
            state.members.view().holds(worker, self.holder_sets.slot_of(worker))
        })
    }

    /// Makes `worker` a holder of `path`: consecutive nodes of one branch (skipping ones it
    /// holds), none of which it holds.
    #[inline]
    pub(crate) fn add_holder(&mut self, worker: Worker, path: &[NodeId], guard: &Guard) {
        let mut at = 0;
        while at < path.len() {
            let pos = self.nodes[path[at] as usize];
            let mut end = at + 1;
            while end < path.len() && self.nodes[path[end] as usize].run == pos.run {
                end += 1;
            }
            let first = pos.offset;
            let last = first + (end - at) as u32 - 1;
            let run = self.isolate(pos.run, first, last, guard);
            let members = self.state(run, guard).members.view();
            let members = self.holder_sets.adding(members, worker, self.table.table().names());
            self.set_members(run, members, guard);
            at = end;
        }
    }

    /// Adds a branch held by `worker` below `at` (the root if `None`), which `worker` holds if
    /// it is a node, as the nodes `ids` (from [`Self::reserve_node`]).
    #[inline]
    pub(crate) fn append(
        &mut self,
        worker: Worker,
        at: Option<NodeId>,
        locals: &[u64],
        ids: &[NodeId],
        guard: &Guard,
    ) {
        debug_assert_eq!(locals.len(), ids.len(), "one reserved node per block");
        if locals.is_empty() {
            return;
        }
        // The run that ends at `at`, once split there.
        let parent = at.map(|node| {
            let pos = self.nodes[node as usize];
            if pos.offset as usize + 1 < self.meta(pos.run).ids.len() {
                self.split(pos.run, pos.offset + 1, guard);
            }
            pos.run
        });
        if let Some(parent) = parent
            && self.extends_in_place(parent, worker, locals.len(), guard)
        {
            let state = self.state(parent, guard);
            let offset = state.len();
            let mut joined = std::mem::take(&mut self.joined);
            joined.clear();
            joined.extend_from_slice(state.locals());
            joined.extend_from_slice(locals);
            for (step, &node) in ids.iter().enumerate() {
                let pos = &mut self.nodes[node as usize];
                (pos.run, pos.offset) = (parent, (offset + step) as u32);
            }
            let members = state.members.get();
            // A new last block: children of the old one (none yet) must not find it.
            let tail_id = self.fresh_tail();
            self.change_ids(parent, |run_ids| run_ids.extend(ids));
            let locals = Locals::new(&joined);
            self.joined = joined;
            self.publish(parent, RunState { locals, tail_id, members }, guard);
        } else {
            let state = RunState {
                locals: Locals::new(locals),
                tail_id: self.fresh_tail(),
                members: self.holder_sets.solo(worker, self.table.table().names()),
            };
            let parent_tail = match parent {
                None => ROOT_TAIL,
                Some(parent) => self.state(parent, guard).tail_id,
            };
            let ids = NodeIds::new(ids);
            self.add_run(at.unwrap_or(ROOT), parent_tail, state, ids, (0, 0), guard);
        }
    }

    /// Whether a branch of `len` blocks held by `worker` alone is best appended to `run`.
    fn extends_in_place(&self, run: RunId, worker: Worker, len: usize, guard: &Guard) -> bool {
        let meta = self.meta(run);
        let state = self.state(run, guard);
        let have = state.len();
        meta.children == 0
            && state.members.view().is_only(worker, self.holder_sets.slot_of(worker))
            && (have + len <= COPY_APPEND_LIMIT || have <= 4 * len)
            && have + len <= self.limits.max_run_blocks
    }

    /// Drops `worker` as a holder of `nodes`, all of which it holds.
    pub(crate) fn release(&mut self, worker: Worker, nodes: &[NodeId], guard: &Guard) {
        // Engines list evicted blocks in chain order (tail first), which makes few stretches:
        // release them in that order, reading each node's position as it is reached (earlier
        // stretches may have split its run). Once that makes many (more than one per four
        // nodes, or eight), the rest are sorted into stretches instead.
        let limit = nodes.len().max(32) / 4;
        let mut at = 0;
        for _ in 0..limit {
            if at == nodes.len() {
                return;
            }
            let (run, first, last, end) = self.stretch_at(nodes, at);
            self.release_stretch(worker, run, first, last, guard);
            at = end;
        }
        self.release_sorted(worker, &nodes[at..], guard);
    }

    /// [`Self::release`] for nodes in any order: sorted into stretches first.
    fn release_sorted(&mut self, worker: Worker, nodes: &[NodeId], guard: &Guard) {
        let mut spots = std::mem::take(&mut self.spots);
        spots.clear();
        spots.extend(nodes.iter().map(|&node| {
            let pos = self.nodes[node as usize];
            (pos.run, pos.offset)
        }));
        // Per run from its last offset down, so splitting off a released stretch leaves the
        // offsets still to do where they were.
        spots.sort_unstable_by(|a, b| b.cmp(a));
        let mut at = 0;
        while at < spots.len() {
            let (run, last) = spots[at];
            let mut first = last;
            at += 1;
            while at < spots.len() && spots[at] == (run, first.wrapping_sub(1)) {
                first -= 1;
                at += 1;
            }
            self.release_stretch(worker, run, first, last, guard);
        }
        self.spots = spots;
    }

    /// The stretch of consecutive offsets in one run that `nodes[at..]` starts with (listed in
    /// either direction): its run, first and last offsets, and where the next stretch starts.
    fn stretch_at(&self, nodes: &[NodeId], at: usize) -> (RunId, u32, u32, usize) {
        let start = self.nodes[nodes[at] as usize];
        let (mut first, mut last) = (start.offset, start.offset);
        let mut end = at + 1;
        while let Some(&node) = nodes.get(end) {
            let pos = self.nodes[node as usize];
            if pos.run != start.run {
                break;
            }
            if pos.offset + 1 == first {
                first -= 1;
            } else if pos.offset == last + 1 {
                last += 1;
            } else {
                break;
            }
            end += 1;
        }
        (start.run, first, last, end)
    }

    fn release_stretch(&mut self, worker: Worker, run: RunId, first: u32, last: u32, g: &Guard) {
        let state = self.state(run, g);
        let len = state.len() as u32;
        let last_holder = state.members.view().len() == 1;
        if last + 1 == len && last_holder && self.meta(run).children == 0 {
            // Nothing holds or hangs below the stretch any more: cut it off.
            if first == 0 {
                self.remove_run(run, g);
            } else {
                self.truncate(run, first, g);
            }
            return;
        }
        // The isolated part keeps the run's holders.
        let names = self.table.table().names();
        let members = self.holder_sets.removing(state.members.view(), worker, names);
        let run = self.isolate(run, first, last, g);
        self.set_members(run, members, g);
    }

    /// Splits `run` so that offsets `first..=last` form a run of their own; returns it.
    fn isolate(&mut self, run: RunId, first: u32, last: u32, guard: &Guard) -> RunId {
        if last as usize + 1 < self.meta(run).ids.len() {
            self.split(run, last + 1, guard);
        }
        if first > 0 { self.split(run, first, guard) } else { run }
    }

    /// Splits `run` before `offset` (inside it): the nodes from `offset` on move to a new run
    /// that takes over the children. Returns the new run.
    fn split(&mut self, run: RunId, offset: u32, guard: &Guard) -> RunId {
        let state = self.state(run, guard);
        let at = offset as usize;
        let ids = self.cut_ids(run, at);
        let meta = self.meta_mut(run);
        let head_last = meta.ids.last();
        // The tail takes the children (they hang below its last node), and the head has one.
        let children = std::mem::take(&mut meta.children);
        let child_xor = std::mem::take(&mut meta.child_xor);
        // The tail keeps the last block's tail id (the children stay below it); the head's
        // new last block gets a fresh one, which the tail hangs from.
        let tail = RunState {
            locals: state.part(at..state.len()),
            tail_id: state.tail_id,
            members: state.members.get(),
        };
        let head_tail = self.fresh_tail();
        // The tail is findable before the head stops covering it.
        let new = self.add_run(head_last, head_tail, tail, ids, (children, child_xor), guard);
        let head = RunState {
            locals: state.part(0..at),
            tail_id: head_tail,
            members: state.members.get(),
        };
        self.publish(run, head, guard);
        new
    }

    /// Shortens `run` (no children) to its first `len` nodes.
    fn truncate(&mut self, run: RunId, len: u32, guard: &Guard) {
        let state = self.state(run, guard);
        let at = len as usize;
        let dropped = self.cut_ids(run, at);
        let head = RunState {
            locals: state.part(0..at),
            // A new last block (see `append`).
            tail_id: self.fresh_tail(),
            members: state.members.get(),
        };
        self.publish(run, head, guard);
        dropped.copy_into(&mut self.free_nodes);
    }

    /// Changes the node ids of `run` by `change`, keeping [`Self::run_bytes`].
    fn change_ids<R>(&mut self, run: RunId, change: impl FnOnce(&mut NodeIds) -> R) -> R {
        let ids = &mut self.runs[run as usize].as_mut().expect("live run").ids;
        let before = ids.heap_bytes();
        let changed = change(ids);
        self.run_bytes = self.run_bytes + ids.heap_bytes() - before;
        changed
    }

    /// Cuts the node ids of `run` before offset `at`; returns the ids cut off.
    fn cut_ids(&mut self, run: RunId, at: usize) -> NodeIds {
        self.change_ids(run, |ids| {
            let cut = ids.split_off(at);
            ids.shrink();
            cut
        })
    }

    /// Replaces the state of `run` with a new version in its slot; the old one is retired.
    fn publish(&mut self, run: RunId, state: RunState, guard: &Guard) {
        let parent_tail = self.meta(run).run().parent_tail;
        let next = Run::version(run, parent_tail, state, &mut self.versions);
        self.put_version(run, next, guard);
    }

    /// Puts `next`, a new version of `run`, in its slot; the old one is retired.
    fn put_version(&mut self, run: RunId, next: Version, guard: &Guard) {
        let meta = self.runs[run as usize].as_mut().expect("live run");
        let current = meta.run();
        self.run_bytes = self.run_bytes + version_bytes(&next) - version_bytes(current);
        let key = self.table.table().key_of(current);
        let at = VersionPtr::of(&next);
        self.table.replace(key, current, next, guard, &mut self.retired);
        meta.run = at;
    }

    /// Makes `members` the holders of `run`: in place when both they and the old ones are bits
    /// (a reader sees the run as it was before or after), else in a new version.
    fn set_members(&mut self, run: RunId, members: Holders, guard: &Guard) {
        self.may_join.push(run);
        let meta = self.runs[run as usize].as_ref().expect("live run");
        if meta.run().members.set_in_place(&members) {
            return;
        }
        let next = meta.run().with_members(members, &mut self.versions);
        self.put_version(run, next, guard);
    }

    /// A node id for a block about to be appended, which its first holder names `name` (so
    /// the name can be entered first); give it to [`Self::append`], or back through
    /// [`Self::unreserve`].
    #[inline]
    pub(crate) fn reserve_node(&mut self, name: u64) -> NodeId {
        self.alloc_node(NodePos { name, ..NodePos::default() })
    }

    /// Returns reserved node ids that will not be used.
    pub(crate) fn unreserve(&mut self, ids: &[NodeId]) {
        self.free_nodes.extend_from_slice(ids);
    }

    #[inline]
    fn alloc_node(&mut self, pos: NodePos) -> NodeId {
        match self.free_nodes.pop() {
            Some(node) => {
                self.nodes[node as usize] = pos;
                node
            }
            None => self.nodes.push(pos) as NodeId,
        }
    }

    /// Registers and publishes a run below the node `parent` (or [`ROOT`]), whose tail id is
    /// `parent_tail` (then, or once the caller publishes it), with `children` runs below its
    /// last node (their count and [`RunMeta::child_xor`]).
    #[allow(clippy::too_many_arguments)] // the parts of one run, each built by the caller
    fn add_run(
        &mut self,
        parent: NodeId,
        parent_tail: u64,
        state: RunState,
        ids: NodeIds,
        (children, child_xor): (u32, RunId),
        guard: &Guard,
    ) -> RunId {
        let id = match self.free_runs.pop() {
            Some(id) => id,
            None => self.runs.push(None) as RunId,
        };
        ids.iter().enumerate().for_each(|(offset, node)| {
            let pos = &mut self.nodes[node as usize];
            (pos.run, pos.offset) = (id, offset as u32);
        });
        let run = Run::version(id, parent_tail, state, &mut self.versions);
        let key = self.table.table().key_of(&run);
        let at = VersionPtr::of(&run);
        self.table.insert(key, run, guard, &mut self.retired);
        let meta = RunMeta { run: at, parent, children, child_xor, ids };
        self.run_bytes += run_heap_bytes(&meta);
        self.runs[id as usize] = Some(meta);
        if parent != ROOT {
            let parent = self.meta_mut(self.nodes[parent as usize].run);
            parent.children += 1;
            parent.child_xor ^= id;
        }
        id
    }

    /// Unlinks `run` (no holders, no children), then any ancestor left as a bare path.
    fn remove_run(&mut self, mut run: RunId, guard: &Guard) {
        loop {
            let meta = self.runs[run as usize].take().expect("live run");
            self.run_bytes -= run_heap_bytes(&meta);
            self.free_runs.push(run);
            let key = self.table.table().key_of(meta.run());
            self.table.remove(key, meta.run(), guard, &mut self.retired);
            meta.ids.copy_into(&mut self.free_nodes);
            if meta.parent == ROOT {
                return;
            }
            let parent = self.nodes[meta.parent as usize].run;
            let parent_meta = self.meta_mut(parent);
            parent_meta.children -= 1;
            parent_meta.child_xor ^= run;
            let siblings = parent_meta.children;
            if siblings > 0 || !self.state(parent, guard).members.view().is_empty() {
                // One child left may now be the rest of the parent's run.
                self.may_join.push(parent);
                return;
            }
            run = parent;
        }
    }

    /// [`Self::run_bytes`] counted afresh: a walk over every run.
    fn walked_run_bytes(&self) -> usize {
        self.runs.iter().flatten().map(run_heap_bytes).sum()
    }

    /// Heap bytes: the runs (shared and private parts), the node positions and the table. Cheap
    /// (no walk over the runs), so the lane can publish it exactly whenever it is idle.
    pub(crate) fn bytes(&self, guard: &Guard) -> usize {
        // Debug builds check the kept count against a walk while that is cheap.
        if cfg!(debug_assertions) && self.runs.len() <= 4096 {
            assert_eq!(self.run_bytes, self.walked_run_bytes(), "kept run bytes");
        }
        self.run_bytes
            + self.holder_sets.bytes()
            + self.runs.bytes()
            + (self.free_runs.capacity() + self.free_nodes.capacity()) * 4
            + self.nodes.bytes()
            + self.table.table().bytes(guard)
            + self.versions.bytes()
    }
}

/// Gives a reused buffer's allocation back if an unusually large event grew it past
/// [`BUFFER_KEEP`].
pub(crate) fn shed<T>(buffer: &mut Vec<T>) {
    if buffer.capacity() > BUFFER_KEEP {
        *buffer = Vec::new();
    }
}
