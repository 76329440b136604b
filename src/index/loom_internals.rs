//! Internals the loom models in `tests/loom.rs` drive directly (only under `cfg(loom)`): one
//! lane's tree with its writer operations, and the lock-free walk readers take over it.

use crate::event::{LocalBlockHash, Worker};
use crate::index::lane::lane_trie::LaneTrie;
use crate::index::runs::holder_sets::Holders;
use crate::index::runs::locals::Locals;
use crate::index::runs::run::{Run, RunState};
use crate::index::runs::run_table::{RunReclaimer, RunTable, RunTableWriter};
use crate::index::runs::versions::{Version, VersionCache, VersionPtr};
use crate::index::walk::walk;
use crate::mix::Mixer;
use crate::sync::Arc;
use crate::sync::epoch::pin;

/// One lane's tree, written through the lane's own operations.
pub struct LoomLane {
    trie: LaneTrie,
    table: Arc<RunTable>,
}

/// A reader's handle on a lane's runs.
#[derive(Clone)]
pub struct LoomReader(Arc<RunTable>);

impl Default for LoomLane {
    fn default() -> Self {
        let writer = RunTableWriter::new(Mixer::random());
        let table = writer.table().clone();
        Self { trie: LaneTrie::new(writer), table }
    }
}

impl LoomLane {
    /// A handle for reader threads.
    pub fn reader(&self) -> LoomReader {
        LoomReader(self.table.clone())
    }

    /// Adds a branch held by `worker` below `at` (the root if `None`); returns its nodes.
    pub fn append(&mut self, worker: Worker, at: Option<u32>, locals: &[u64]) -> Vec<u32> {
        let ids: Vec<u32> = locals.iter().map(|&local| self.trie.reserve_node(local)).collect();
        let guard = pin();
        self.trie.append(worker, at, locals, &ids, &guard);
        self.trie.end_event(&guard);
        ids
    }

    /// Makes `worker` a holder of the existing consecutive `nodes`.
    pub fn add_holder(&mut self, worker: Worker, nodes: &[u32]) {
        let guard = pin();
        self.trie.add_holder(worker, nodes, &guard);
        self.trie.end_event(&guard);
    }

    /// Drops `worker` as a holder of `nodes` (runs left with their only child's holders are
    /// joined at the end, as a lane does at the end of an event).
    pub fn release(&mut self, worker: Worker, nodes: &[u32]) {
        let guard = pin();
        self.trie.release(worker, nodes, &guard);
        self.trie.end_event(&guard);
    }

    /// [`Self::release`], then the joined tails unlinked at once rather than once readers of
    /// the old heads are gone: the wrong protocol, for a model to catch.
    pub fn release_unlinking_joined_tails_at_once(&mut self, worker: Worker, nodes: &[u32]) {
        self.release(worker, nodes);
        self.trie.unlink_superseded_now();
    }

    /// Live runs.
    pub fn runs(&self) -> usize {
        self.trie.run_count()
    }
}

impl LoomReader {
    /// Per worker of this lane, how many leading blocks of `query` it holds, sorted.
    pub fn find_matches(&self, query: &[u64]) -> Vec<(Worker, u32)> {
        let query: Vec<LocalBlockHash> = query.iter().map(|&local| LocalBlockHash(local)).collect();
        let mut out = Vec::new();
        walk(&self.0, &query, &pin(), &mut out);
        out.sort_unstable();
        out
    }
}

/// A lane's run table alone, with chosen keys (so probe sequences can be made to collide).
/// Clones share the table; only one of them may write.
/// The model's writer side: the table's writer handle and its reclaimer, shared by the model's
/// threads (one writes at a time).
type SharedWriter = std::sync::Arc<std::sync::Mutex<(RunTableWriter, RunReclaimer)>>;

/// The runs published, by key (the table owns them).
type PublishedRuns = std::sync::Arc<std::sync::Mutex<Vec<(u64, VersionPtr)>>>;

/// A run on the published list.
fn listed<'a>(run: VersionPtr) -> &'a Run {
    // SAFETY: the list holds the versions published and not yet unlinked (each leaves the list
    // under its lock before the table unlinks it, and the unlinked one goes to the reclaimer,
    // which under loom keeps it until the model ends); the table, or the caller, owns each.
    unsafe { run.get() }
}

#[derive(Clone)]
pub struct LoomTable {
    table: Arc<RunTable>,
    writer: SharedWriter,
    /// The runs published, by key, to unlink them by identity.
    runs: PublishedRuns,
}

impl Default for LoomTable {
    fn default() -> Self {
        let writer = RunTableWriter::new(Mixer::random());
        Self {
            table: writer.table().clone(),
            writer: std::sync::Arc::new(std::sync::Mutex::new((writer, RunReclaimer::default()))),
            runs: Default::default(),
        }
    }
}

impl LoomTable {
    /// The smallest key other than `key` whose probe sequence starts at `key`'s in a new table.
    pub fn same_home(key: u64) -> u64 {
        let home =
            |key: u64| Mixer::random().mix(crate::index::runs::run_table::stored_key(key)) & 15;
        (1..).find(|&other| other != key && home(other) == home(key)).expect("some key")
    }

    /// A run with content `locals`.
    fn run(locals: &[u64]) -> Version {
        let state =
            RunState { locals: Locals::new(locals), tail_id: 0, members: Holders::listed(&[]) };
        Run::version(0, 0, state, &mut VersionCache::default())
    }

    /// Publishes a run with content `locals` under `key`.
    pub fn insert(&self, key: u64, locals: &[u64]) {
        let run = Self::run(locals);
        self.runs.lock().expect("not poisoned").push((key, VersionPtr::of(&run)));
        let (writer, retired) = &mut *self.writer.lock().expect("not poisoned");
        writer.insert(key, run, &pin(), retired);
    }

    /// Replaces the run last published under `key` with a version whose content is `locals`
    /// (its first hash must stay: it identifies the run), as a lane does on every change.
    pub fn replace(&self, key: u64, locals: &[u64]) {
        let mut runs = self.runs.lock().expect("not poisoned");
        let at = runs.iter().rposition(|(k, _)| *k == key).expect("a published key");
        let next = Self::run(locals);
        let current = std::mem::replace(&mut runs[at].1, VersionPtr::of(&next));
        let (writer, retired) = &mut *self.writer.lock().expect("not poisoned");
        writer.replace(key, listed(current), next, &pin(), retired);
    }

    /// Unlinks the run last published under `key`.
    pub fn remove(&self, key: u64) {
        let mut runs = self.runs.lock().expect("not poisoned");
        let at = runs.iter().rposition(|(k, _)| *k == key).expect("a published key");
        let (_, run) = runs.remove(at);
        let (writer, retired) = &mut *self.writer.lock().expect("not poisoned");
        writer.remove(key, listed(run), &pin(), retired);
    }

    /// Unlinks the run under `key` whose content starts with `first`.
    pub fn remove_starting(&self, key: u64, first: u64) {
        let mut runs = self.runs.lock().expect("not poisoned");
        let at = runs.iter().position(|&(k, run)| k == key && listed(run).first() == first);
        let (_, run) = runs.remove(at.expect("a published run"));
        let (writer, retired) = &mut *self.writer.lock().expect("not poisoned");
        writer.remove(key, listed(run), &pin(), retired);
    }

    /// The content of the run under `key` that starts with `first`, if any.
    pub fn get_starting(&self, key: u64, first: u64) -> Option<Vec<u64>> {
        let guard = pin();
        let run = self.table.get(key, &guard, |run| run.first() == first)?;
        Some(run.locals().to_vec())
    }

    /// The content of the first run under `key`, if any.
    pub fn get(&self, key: u64) -> Option<Vec<u64>> {
        let guard = pin();
        let run = self.table.get(key, &guard, |_| true)?;
        Some(run.locals().to_vec())
    }
}
