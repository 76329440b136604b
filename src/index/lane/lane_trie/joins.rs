//! Runs that join back. A run is split when a worker starts or stops holding part of it; once
//! the holders of the two parts are equal again, and the head has no other child, they are one
//! run's worth and are joined, so that a chain workers keep caching and evicting (a system
//! prompt, a popular document) stays one run rather than breaking down toward one per block.
//!
//! The lane notes every run whose holders or children change ([`LaneTrie::set_members`],
//! [`LaneTrie::remove_run`]); at the end of the event each one still live is joined with its
//! parent run and with its only child wherever they match, as many times over as they do.
//!
//! A join keeps readers on states that existed. The head is replaced by one version holding
//! both parts' blocks, with the tail's tail id (the tail's children stay below it), and the
//! tail's version is left in the table, unchanged: a reader that loaded the head's old version
//! still looks the tail up below the old tail id and finds it, and sees the chain as it was at
//! the join. No live run hangs from that old tail id (tail ids are never reused), so only such
//! readers find it. It is unlinked once the epoch says no reader pinned before the join remains
//! ([`Superseded`]).

use std::collections::VecDeque;

use super::{LaneTrie, ROOT};
use crate::index::runs::holder_sets::HolderView;
use crate::index::runs::run::{RunId, RunState};
use crate::index::runs::run_table::RunReclaimer;
use crate::index::runs::versions::VersionPtr;
use crate::sync::epoch::Guard;

/// Tails joined into their parent, left in the table for readers of the parent's old version:
/// the reclaimer batch that retired that version, and the tail's key and version, oldest first.
#[derive(Default)]
pub(super) struct Superseded(VecDeque<(u64, u64, VersionPtr)>);

impl LaneTrie {
    /// Joins each run noted in this event with its parent and its only child where they have
    /// become one run's worth.
    pub(super) fn join_where_due(&mut self, guard: &Guard) {
        let mut noted = std::mem::take(&mut self.may_join);
        for &run in &noted {
            // A noted run may have been removed since (or its id reused: a harmless check).
            if (run as usize) < self.runs.len() && self.runs[run as usize].is_some() {
                self.join_around(run, guard);
            }
        }
        noted.clear();
        self.may_join = noted;
    }

    /// Joins `run` into its parent while they match, then the result with its only child while
    /// they match.
    fn join_around(&mut self, mut run: RunId, guard: &Guard) {
        loop {
            let parent = self.meta(run).parent;
            if parent == ROOT {
                break;
            }
            let parent = self.nodes[parent as usize].run;
            if self.meta(parent).children != 1 || !self.joinable(parent, run, guard) {
                break;
            }
            self.join(parent, run, guard);
            run = parent;
        }
        loop {
            let meta = self.meta(run);
            let (children, child) = (meta.children, meta.child_xor);
            if children != 1 || !self.joinable(run, child, guard) {
                break;
            }
            self.join(run, child, guard);
        }
    }

    /// Whether `head` and `tail` (its only child) have the same holders and fit in one run.
    fn joinable(&self, head: RunId, tail: RunId, guard: &Guard) -> bool {
        let (head, tail) = (self.state(head, guard), self.state(tail, guard));
        head.len() + tail.len() <= self.limits.max_run_blocks
            && self.holder_sets.same(head.members.view(), tail.members.view())
    }

    /// Joins `tail` (the only child of `head`, with the same holders) into `head`.
    fn join(&mut self, head: RunId, tail: RunId, guard: &Guard) {
        let (head_state, tail_state) = (self.state(head, guard), self.state(tail, guard));
        let mut scratch = std::mem::take(&mut self.joined);
        let locals = head_state.joined(tail_state, &mut scratch);
        self.joined = scratch;
        // Bits rather than a list where the two differ in form only.
        let members = match (head_state.members.view(), tail_state.members.view()) {
            (HolderView::List(_), HolderView::Bits(_)) => tail_state.members.get(),
            _ => head_state.members.get(),
        };
        let state = RunState { locals, tail_id: tail_state.tail_id, members };
        let tail_key = self.table.table().key_of(tail_state);
        let tail_version = self.meta(tail).run;

        // The tail's nodes, and the children below its last one, become the head's.
        let tail_meta = self.runs[tail as usize].take().expect("live run");
        self.run_bytes -= super::run_heap_bytes(&tail_meta);
        self.free_runs.push(tail);
        let offset = head_state.len();
        tail_meta.ids.iter().enumerate().for_each(|(step, node)| {
            let pos = &mut self.nodes[node as usize];
            (pos.run, pos.offset) = (head, (offset + step) as u32);
        });
        self.change_ids(head, |ids| ids.append(&tail_meta.ids));
        let head_meta = self.meta_mut(head);
        (head_meta.children, head_meta.child_xor) = (tail_meta.children, tail_meta.child_xor);

        // The head's old version goes to the open batch: the tail stays findable until that
        // batch is safe.
        self.publish(head, state, guard);
        let batch = self.retired.open_batch();
        self.superseded.0.push_back((batch, tail_key, tail_version));
    }

    /// Unlinks the superseded tails no reader can reach any more.
    pub(super) fn unlink_superseded(&mut self) {
        self.unlink_superseded_if(|retired, batch| retired.is_safe(batch));
    }

    /// Unlinks every superseded tail, whoever may still reach it: the wrong protocol, which a
    /// loom model must catch.
    #[cfg(loom)]
    pub(crate) fn unlink_superseded_now(&mut self) {
        self.unlink_superseded_if(|_, _| true);
    }

    /// Unlinks the superseded tails, oldest first, while `due` says so of their batch.
    fn unlink_superseded_if(&mut self, due: impl Fn(&RunReclaimer, u64) -> bool) {
        let Some(&(batch, ..)) = self.superseded.0.front() else { return };
        if !due(&self.retired, batch) {
            return;
        }
        let guard = crate::sync::epoch::pin();
        while let Some(&(batch, key, version)) = self.superseded.0.front() {
            if !due(&self.retired, batch) {
                break;
            }
            self.superseded.0.pop_front();
            // SAFETY: the tail's table slot still owns its version: only this unlinks it (or
            // `reset`, which forgets the list with the table's slots).
            let run = unsafe { version.get() };
            self.table.remove(key, run, &guard, &mut self.retired);
        }
    }

    /// Superseded tails still in the table, for tests.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn superseded_count(&self) -> usize {
        self.superseded.0.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::LaneTrie;
    use crate::event::Worker;
    use crate::index::runs::run::{ROOT_TAIL, Run};
    use crate::index::runs::run_table::{RunTable, RunTableWriter};
    use crate::mix::Mixer;
    use crate::sync::Arc;
    use crate::sync::epoch::pin;

    /// The worker whose chain others cache and evict, and one of those others.
    const S: Worker = Worker::new(1, 0);
    const W: Worker = Worker::new(2, 0);

    /// A lane's tree holding worker [`S`]'s chain of `len` blocks (contents 1, 2, …) as one
    /// run, its table, the contents and the nodes.
    fn chain_of(len: u64) -> (LaneTrie, Arc<RunTable>, Vec<u64>, Vec<u32>) {
        let writer = RunTableWriter::new(Mixer::random());
        let table = writer.table().clone();
        let mut trie = LaneTrie::new(writer);
        let locals: Vec<u64> = (1..=len).collect();
        let guard = pin();
        let ids: Vec<u32> = locals.iter().map(|&local| trie.reserve_node(local)).collect();
        trie.append(S, None, &locals, &ids, &guard);
        trie.end_event(&guard);
        (trie, table, locals, ids)
    }

    /// The root run starting with content 1 (its content and whether `worker` alone holds it).
    fn root_run(table: &RunTable, worker: Worker, slot: Option<u8>) -> (Vec<u64>, bool) {
        let guard = pin();
        let is_root = |run: &Run| run.is_child(ROOT_TAIL, 1);
        let run = table.get(table.key(ROOT_TAIL, 1), &guard, is_root).expect("a root run");
        (run.locals().to_vec(), run.members.view().is_only(worker, slot))
    }

    /// Worker 2 caching and evicting each prefix of worker 1's chain in turn splits the chain
    /// at a new place every time; each eviction joins it back, so it ends as one run, as long
    /// as when it was stored, with the superseded tails gone once no reader can reach them.
    #[test]
    fn a_chain_cached_and_evicted_prefix_by_prefix_stays_one_run() {
        let (mut trie, table, locals, ids) = chain_of(200);
        let (s, w) = (S, W);
        let guard = pin();
        let (bytes, run_bytes) = (trie.bytes(&guard) - trie.versions.bytes(), trie.run_bytes);
        for len in 1..200 {
            trie.add_holder(w, &ids[..len], &guard);
            trie.end_event(&guard);
            assert_eq!(trie.run_count(), 2, "split at {len}");
            trie.release(w, &ids[..len], &guard);
            trie.end_event(&guard);
            assert_eq!(trie.run_count(), 1, "joined at {len}");
        }
        drop(guard);
        let slot = trie.holder_sets.slot_of(s);
        assert_eq!(root_run(&table, s, slot), (locals, true));
        wait_until(|| {
            trie.reclaim();
            trie.superseded_count() == 0
        });
        // The chain's own memory is as it was; besides it, the lane keeps only reclaimed
        // versions' memory for reuse (a bounded number per size).
        assert_eq!(trie.run_bytes, run_bytes);
        let now = trie.bytes(&pin()) - trie.versions.bytes();
        assert!(now <= bytes + 1024, "{bytes} bytes stored, {now} after the churn");
    }

    /// A reader pinned before a join may still hold the head's old version, and look the tail
    /// up below the old tail id: the tail stays there, whole, until that reader is gone, and is
    /// unlinked after.
    #[test]
    fn a_joined_tail_stays_for_readers_of_the_old_head_and_then_goes() {
        let (mut trie, table, locals, ids) = chain_of(40);
        let (s, w) = (S, W);
        let guard = pin();
        trie.add_holder(w, &ids[..10], &guard);
        trie.end_event(&guard);
        drop(guard);
        assert_eq!(trie.run_count(), 2);

        let reader = pin();
        let is_head = |run: &Run| run.is_child(ROOT_TAIL, 1);
        let old_head = table.get(table.key(ROOT_TAIL, 1), &reader, is_head).expect("the head");
        assert_eq!(old_head.len(), 10);
        let old_tail_id = old_head.tail_id;
        let guard = pin();
        trie.release(w, &ids[..10], &guard);
        trie.end_event(&guard);
        drop(guard);
        assert_eq!(trie.run_count(), 1);
        let tail_key = table.key(old_tail_id, 11);
        let is_tail = |run: &Run| run.is_child(old_tail_id, 11);
        for _ in 0..100 {
            pin().flush();
            trie.reclaim();
        }
        assert_eq!(trie.superseded_count(), 1, "unlinked under a pinned reader");
        let tail = table.get(tail_key, &reader, is_tail).expect("the tail, for the old head");
        assert_eq!(tail.locals(), &locals[10..]);
        drop(reader);

        wait_until(|| {
            trie.reclaim();
            trie.superseded_count() == 0
        });
        assert!(table.get(tail_key, &pin(), is_tail).is_none());
        let slot = trie.holder_sets.slot_of(s);
        assert_eq!(root_run(&table, s, slot), (locals, true));
    }

    /// Waits (bounded) for `done`: other tests' threads pin too, and a loaded machine may keep
    /// one of them pinned off-core for a while.
    fn wait_until(mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "still waiting after 60 s");
            pin().flush();
            std::thread::yield_now();
        }
    }
}
