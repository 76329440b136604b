//! [`Holders`]: the workers holding a run, and [`HolderSets`], the lane's maker of them.
//!
//! Every version of a run carries its holders twice over: a sorted list (what the lane
//! reasons with) and, when each holder has one of the lane's 64 slots, the same set as bits of
//! those slots (what queries narrow with: one AND per run, however many workers share it; see
//! [`WorkerSlots`]). A lane with more than 64 workers gives slots to the first 64 it sees; a
//! run held by any other has no bits and queries merge its list instead.
//!
//! Most runs are held by one worker (its own branch) or by none (a bare path to other runs),
//! so those lists are made once per worker and shared, a count bump, instead of allocated for
//! every run version the lane publishes.
//!
//! A removed worker's slot is handed out again only after the lane's reclaimer lets go of it:
//! by then no reader holds a version with the slot's old bit (see [`WorkerSlots`]).

use std::collections::HashMap;
use std::ops::Deref;

use crate::event::Worker;
use crate::index::worker_slots::{SLOTS, WorkerSlots};
use crate::sync::epoch::Reclaimer;
use crate::sync::{Arc, Mutex, shared_slice};

/// See the [module docs](self).
#[derive(Clone)]
pub(crate) struct Holders {
    list: Arc<[Worker]>,
    /// Bit `s`: the worker in slot `s` holds the run. Zero for a set with a holder that has
    /// no slot (and for the empty set).
    bits: u64,
}

impl Holders {
    /// `workers` (sorted) as a list without bits, as a set with a slotless holder is.
    #[cfg(any(test, loom))]
    pub(crate) fn listed(workers: &[Worker]) -> Self {
        Self { list: shared_slice(workers), bits: 0 }
    }

    /// The set as bits of the lane's slots, if every holder has one.
    #[inline]
    pub(crate) fn bits(&self) -> Option<u64> {
        (self.bits != 0 || self.list.is_empty()).then_some(self.bits)
    }

    /// Heap bytes this set owns alone: none for the shared sets of one worker or none.
    pub(crate) fn own_bytes(&self) -> usize {
        match self.list.len() {
            0 | 1 => 0,
            len => 2 * size_of::<usize>() + len * size_of::<Worker>(),
        }
    }
}

impl Deref for Holders {
    type Target = [Worker];

    #[inline]
    fn deref(&self) -> &[Worker] {
        &self.list
    }
}

/// See the [module docs](self).
pub(crate) struct HolderSets {
    nobody: Holders,
    solo: HashMap<Worker, Holders, ahash::RandomState>,
    slots: HashMap<Worker, u8, ahash::RandomState>,
    free: Vec<u8>,
    /// Slots never handed out are `fresh..SLOTS`.
    fresh: u8,
    /// Slots the reclaimer has let go of since the lane last looked.
    released: Arc<Mutex<Vec<u8>>>,
    scratch: Vec<Worker>,
}

impl Default for HolderSets {
    fn default() -> Self {
        Self {
            nobody: Holders { list: shared_slice(&[]), bits: 0 },
            solo: HashMap::default(),
            slots: HashMap::default(),
            free: Vec::new(),
            fresh: 0,
            released: Arc::new(Mutex::new(Vec::new())),
            scratch: Vec::new(),
        }
    }
}

/// A slot on its way back to the lane once no reader can hold a version with its bit.
struct SlotRelease {
    slot: u8,
    released: Arc<Mutex<Vec<u8>>>,
}

impl Drop for SlotRelease {
    fn drop(&mut self) {
        self.released.lock().push(self.slot);
    }
}

impl HolderSets {
    /// No holder.
    pub(crate) fn nobody(&self) -> Holders {
        self.nobody.clone()
    }

    /// `worker` alone.
    pub(crate) fn solo(&mut self, worker: Worker, names: &WorkerSlots) -> Holders {
        if let Some(set) = self.solo.get(&worker) {
            return set.clone();
        }
        let bits = self.slot(worker, names).map_or(0, |slot| 1 << slot);
        let set = Holders { list: shared_slice(&[worker]), bits };
        self.solo.insert(worker, set.clone());
        set
    }

    /// `holders` and `worker` (not one of them).
    pub(crate) fn adding(
        &mut self,
        holders: &Holders,
        worker: Worker,
        names: &WorkerSlots,
    ) -> Holders {
        if holders.is_empty() {
            return self.solo(worker, names);
        }
        let at = holders.binary_search(&worker).expect_err("not a holder yet");
        let mut list = std::mem::take(&mut self.scratch);
        list.clear();
        list.extend_from_slice(&holders[..at]);
        list.push(worker);
        list.extend_from_slice(&holders[at..]);
        let bits = match (holders.bits(), self.slot(worker, names)) {
            (Some(bits), Some(slot)) => bits | 1 << slot,
            _ => 0,
        };
        let set = Holders { list: shared_slice(&list), bits };
        self.scratch = list;
        set
    }

    /// `holders` without `worker` (one of them).
    pub(crate) fn removing(&mut self, holders: &Holders, worker: Worker) -> Holders {
        let mut list = std::mem::take(&mut self.scratch);
        list.clear();
        list.extend(holders.iter().copied().filter(|&w| w != worker));
        let set = match list[..] {
            [] => self.nobody(),
            [only] => match self.solo.get(&only) {
                Some(set) => set.clone(),
                None => Holders { list: shared_slice(&list), bits: self.bits_of(&list) },
            },
            _ => {
                let bits = match (holders.bits(), self.slots.get(&worker)) {
                    (Some(bits), Some(&slot)) => bits & !(1 << slot),
                    // A holder had no slot: perhaps only `worker`.
                    _ => self.bits_of(&list),
                };
                Holders { list: shared_slice(&list), bits }
            }
        };
        self.scratch = list;
        set
    }

    /// `list` as bits, or 0 if a worker in it has no slot.
    fn bits_of(&self, list: &[Worker]) -> u64 {
        let slots = list.iter().map(|w| self.slots.get(w).map(|&slot| 1u64 << slot));
        slots.sum::<Option<u64>>().unwrap_or(0)
    }

    /// `worker`'s slot, handing it a free one (named in `names`) if it has none yet.
    fn slot(&mut self, worker: Worker, names: &WorkerSlots) -> Option<u8> {
        if let Some(&slot) = self.slots.get(&worker) {
            return Some(slot);
        }
        if self.free.is_empty() {
            self.free.append(&mut self.released.lock());
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None if (self.fresh as usize) < SLOTS => {
                self.fresh += 1;
                self.fresh - 1
            }
            None => return None,
        };
        names.name(slot, worker);
        self.slots.insert(worker, slot);
        Some(slot)
    }

    /// Heap bytes of the shared sets (of one worker or none) and the maps.
    pub(crate) fn bytes(&self) -> usize {
        let list = |len: usize| 2 * size_of::<usize>() + len * size_of::<Worker>();
        list(0)
            + self.solo.capacity() * (size_of::<(Worker, Holders)>() + 1)
            + self.solo.len() * list(1)
            + self.slots.capacity() * (size_of::<(Worker, u8)>() + 1)
    }

    /// Drops `worker`, which no run holds any more: its own set (runs still holding it keep
    /// their copy alive) and, once readers allow, its slot.
    pub(crate) fn forget(&mut self, worker: Worker, retired: &mut Reclaimer) {
        self.solo.remove(&worker);
        if let Some(slot) = self.slots.remove(&worker) {
            retired.retire(Box::new(SlotRelease { slot, released: self.released.clone() }));
        }
    }

    /// Drops every worker (a lane starting over with no runs), as [`Self::forget`] does.
    pub(crate) fn forget_all(&mut self, retired: &mut Reclaimer) {
        let workers: Vec<Worker> = self.slots.keys().copied().collect();
        workers.into_iter().for_each(|worker| self.forget(worker, retired));
        self.solo = HashMap::default();
        self.scratch = Vec::new();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::epoch::pin;

    fn w(id: u64) -> Worker {
        Worker::new(id, 0)
    }

    #[test]
    fn one_or_no_holder_sets_are_shared_and_others_are_not() {
        let names = WorkerSlots::default();
        let (a, b) = (w(1), w(2));
        let mut sets = HolderSets::default();
        assert!(Arc::ptr_eq(&sets.nobody().list, &sets.nobody().list));
        let solo = sets.solo(a, &names);
        assert_eq!(*solo, [a]);
        assert!(Arc::ptr_eq(&solo.list, &sets.solo(a, &names).list));
        assert!(!Arc::ptr_eq(&solo.list, &sets.solo(b, &names).list));
        let pair = sets.adding(&solo, b, &names);
        assert_eq!(*pair, [a, b]);
        assert!(!Arc::ptr_eq(&pair.list, &sets.adding(&solo, b, &names).list));
        assert!(Arc::ptr_eq(&sets.removing(&pair, b).list, &solo.list));
        let mut retired = Reclaimer::default();
        sets.forget(a, &mut retired);
        assert_eq!(*solo, [a], "a run's copy outlives the forgotten entry");
        assert!(!Arc::ptr_eq(&solo.list, &sets.solo(a, &names).list));
    }

    /// Bits name exactly the listed workers while slots last; a set with a slotless holder has
    /// none, and gets them back when that holder leaves it.
    #[test]
    fn bits_follow_the_list_and_slots_run_out_at_64() {
        let names = WorkerSlots::default();
        let mut sets = HolderSets::default();
        let decode = |set: &Holders| -> Option<Vec<Worker>> {
            let bits = set.bits()?;
            let mut workers: Vec<Worker> =
                (0..64).filter(|s| bits & (1 << s) != 0).map(|s| names.worker(s)).collect();
            workers.sort_unstable();
            Some(workers)
        };
        let mut set = sets.nobody();
        assert_eq!(decode(&set), Some(vec![]));
        for id in 0..70 {
            set = sets.adding(&set, w(id), &names);
            let expected = (id < 64).then(|| (0..=id).map(w).collect::<Vec<_>>());
            assert_eq!(decode(&set), expected, "after adding {id}");
        }
        for id in (1..70).rev() {
            set = sets.removing(&set, w(id));
            let expected = (id <= 64).then(|| (0..id).map(w).collect::<Vec<_>>());
            assert_eq!(decode(&set), expected, "after removing {id}");
        }
        assert_eq!(decode(&sets.solo(w(65), &names)), None, "slots are all taken");
    }

    /// A forgotten worker's slot is handed out again only after the reclaimer lets it go.
    #[test]
    fn a_slot_comes_back_only_through_the_reclaimer() {
        let names = WorkerSlots::default();
        let mut sets = HolderSets::default();
        for id in 0..64 {
            sets.solo(w(id), &names);
        }
        let mut retired = Reclaimer::default();
        sets.forget(w(7), &mut retired);
        assert_eq!(sets.solo(w(100), &names).bits(), None, "not before the readers allow");
        let guard = pin();
        retired.seal(&guard);
        drop(guard);
        // Reclaiming waits for the global epoch to move on: pin and flush until it has.
        for _ in 0..10_000 {
            pin().flush();
            retired.reclaim();
            if !sets.released.lock().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        let set = sets.solo(w(101), &names);
        assert_eq!(set.bits(), Some(1 << 7));
        assert_eq!(names.worker(7), w(101));
    }
}
