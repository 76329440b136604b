//! [`Holders`]: the workers holding a run, [`RunHolders`]: them as a version of the run keeps
//! them, and [`HolderSets`], the lane's maker of them.
//!
//! A lane hands each of its first 64 workers a slot. A run's holders are then a 64-bit set of
//! those slots whenever every holder has one: nothing to allocate, the lane tests and changes
//! a holder with one bit operation, and queries narrow their matching workers with one AND per
//! run however many workers share it (see [`WorkerSlots`] for who each bit stands for). Only a
//! set with a slotless holder (a lane past 64 workers) is a sorted list, and queries merge it
//! instead; lists of one worker are made once per worker and shared. A version's bits change
//! in place; a list is fixed for the version's life.
//!
//! A removed worker's slot is handed out again only after the lane's reclaimer lets go of it:
//! by then no reader holds the slot's old bit (see [`WorkerSlots`]).

use std::cell::Cell;
use std::collections::HashMap;

use crate::event::Worker;
use crate::index::runs::worker_slots::{SLOTS, WorkerSlots};
use crate::sync::epoch::Reclaimer;
use crate::sync::{Arc, AtomicU64, Mutex, Ordering, shared_slice};

/// See the [module docs](self).
#[derive(Clone)]
pub(crate) struct Holders {
    /// The holders, sorted, for a set with a slotless holder; `None` when `bits` says it all.
    list: Option<Arc<[Worker]>>,
    /// Bit `s`: the worker in slot `s` holds the run (0 with a list).
    bits: u64,
}

/// A run's holders as a query reads them.
pub(crate) enum HolderView<'a> {
    Bits(u64),
    List(&'a [Worker]),
}

impl Holders {
    /// `workers` (sorted) as a list, as a set with a slotless holder is.
    #[cfg(any(test, loom))]
    pub(crate) fn listed(workers: &[Worker]) -> Self {
        Self { list: Some(shared_slice(workers)), bits: 0 }
    }

    /// The set as bits or as a list.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn view(&self) -> HolderView<'_> {
        match &self.list {
            Some(list) => HolderView::List(list),
            None => HolderView::Bits(self.bits),
        }
    }
}

impl HolderView<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Bits(bits) => bits.count_ones() as usize,
            Self::List(list) => list.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `worker`, whose slot is `slot` (if it has one), is a holder.
    pub(crate) fn holds(&self, worker: Worker, slot: Option<u8>) -> bool {
        match self {
            Self::List(list) => list.binary_search(&worker).is_ok(),
            Self::Bits(bits) => slot.is_some_and(|slot| bits & 1 << slot != 0),
        }
    }

    /// Whether `worker`, whose slot is `slot`, is the only holder.
    pub(crate) fn is_only(&self, worker: Worker, slot: Option<u8>) -> bool {
        match self {
            Self::List(list) => **list == [worker],
            Self::Bits(bits) => slot.is_some_and(|slot| *bits == 1 << slot),
        }
    }
}

/// A version's holders (see [`super::run`]). A list is fixed for the version's life;
/// bits the lane changes in place while the version is current, since a holder change keeps
/// everything else about the run: a reader loads the bits once per visit (with acquire, so it
/// sees the names of the slots they set: see [`WorkerSlots`]), and so sees the run's content
/// with its holders as they were at that moment, a state that existed.
pub(crate) struct RunHolders {
    list: Option<Arc<[Worker]>>,
    bits: AtomicU64,
}

impl From<Holders> for RunHolders {
    fn from(holders: Holders) -> Self {
        Self { list: holders.list, bits: AtomicU64::new(holders.bits) }
    }
}

impl RunHolders {
    /// The set as bits or as a list.
    #[inline]
    pub(crate) fn view(&self) -> HolderView<'_> {
        match &self.list {
            Some(list) => HolderView::List(list),
            None => HolderView::Bits(self.bits.load(Ordering::Acquire)),
        }
    }

    /// The set, to make another version with.
    pub(crate) fn get(&self) -> Holders {
        Holders { list: self.list.clone(), bits: self.bits.load(Ordering::Relaxed) }
    }

    /// Lane side, on the current version: makes `holders` the set in place if both it and the
    /// set so far are bits; `false`, with nothing changed, if either is a list.
    pub(crate) fn set_in_place(&self, holders: &Holders) -> bool {
        if self.list.is_some() || holders.list.is_some() {
            return false;
        }
        self.bits.store(holders.bits, Ordering::Release);
        true
    }

    /// Heap bytes this set owns alone: none for bits and for the shared lists of one worker.
    pub(crate) fn own_bytes(&self) -> usize {
        match self.list.as_ref().map_or(0, |list| list.len()) {
            0 | 1 => 0,
            len => 2 * size_of::<usize>() + len * size_of::<Worker>(),
        }
    }
}

/// See the [module docs](self).
pub(crate) struct HolderSets {
    /// Lists of one slotless worker.
    solo: HashMap<Worker, Holders, ahash::RandomState>,
    slots: HashMap<Worker, u8, ahash::RandomState>,
    /// The last worker whose slot was looked up, and its slot: an event's blocks all belong
    /// to one worker, which asks for its slot at nearly every block.
    last: Cell<Option<(Worker, u8)>>,
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
            solo: HashMap::default(),
            slots: HashMap::default(),
            last: Cell::new(None),
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
    #[cfg(all(test, not(loom)))]
    pub(crate) fn nobody(&self) -> Holders {
        Holders { list: None, bits: 0 }
    }

    /// `worker`'s slot, if it has one.
    #[inline]
    pub(crate) fn slot_of(&self, worker: Worker) -> Option<u8> {
        match self.last.get() {
            Some((last, slot)) if last == worker => Some(slot),
            _ => {
                let slot = self.slots.get(&worker).copied();
                if let Some(slot) = slot {
                    self.last.set(Some((worker, slot)));
                }
                slot
            }
        }
    }

    /// `worker` alone.
    pub(crate) fn solo(&mut self, worker: Worker, names: &WorkerSlots) -> Holders {
        if let Some(slot) = self.slot(worker, names) {
            return Holders { list: None, bits: 1 << slot };
        }
        let set = || Holders { list: Some(shared_slice(&[worker])), bits: 0 };
        self.solo.entry(worker).or_insert_with(set).clone()
    }

    /// `holders` and `worker` (not one of them).
    pub(crate) fn adding(
        &mut self,
        holders: HolderView<'_>,
        worker: Worker,
        names: &WorkerSlots,
    ) -> Holders {
        if holders.is_empty() {
            return self.solo(worker, names);
        }
        if let (HolderView::Bits(bits), Some(slot)) = (&holders, self.slot(worker, names)) {
            return Holders { list: None, bits: bits | 1 << slot };
        }
        let mut list = self.listed(holders, names);
        let at = list.binary_search(&worker).expect_err("not a holder yet");
        list.insert(at, worker);
        self.made(list)
    }

    /// `holders` without `worker` (one of them).
    pub(crate) fn removing(
        &mut self,
        holders: HolderView<'_>,
        worker: Worker,
        names: &WorkerSlots,
    ) -> Holders {
        if let (HolderView::Bits(bits), Some(slot)) = (&holders, self.slot_of(worker)) {
            return Holders { list: None, bits: bits & !(1 << slot) };
        }
        let mut list = self.listed(holders, names);
        list.retain(|&w| w != worker);
        self.made(list)
    }

    /// `holders` as a sorted list, in the scratch buffer.
    fn listed(&mut self, holders: HolderView<'_>, names: &WorkerSlots) -> Vec<Worker> {
        let mut list = std::mem::take(&mut self.scratch);
        list.clear();
        match holders {
            HolderView::List(workers) => list.extend_from_slice(workers),
            HolderView::Bits(bits) => {
                let slots = (0..SLOTS as u32).filter(|&slot| bits & 1 << slot != 0);
                list.extend(slots.map(|slot| names.worker(slot)));
                list.sort_unstable();
            }
        }
        list
    }

    /// The set `list` (sorted) names: bits if every worker in it has a slot. Keeps `list` as
    /// the scratch buffer.
    fn made(&mut self, list: Vec<Worker>) -> Holders {
        let slots = list.iter().map(|w| self.slot_of(*w).map(|slot| 1u64 << slot));
        let set = match (slots.sum::<Option<u64>>(), &list[..]) {
            (Some(bits), _) => Holders { list: None, bits },
            (None, [only]) => {
                let set = || Holders { list: Some(shared_slice(&[*only])), bits: 0 };
                self.solo.entry(*only).or_insert_with(set).clone()
            }
            (None, _) => Holders { list: Some(shared_slice(&list)), bits: 0 },
        };
        self.scratch = list;
        set
    }

    /// `worker`'s slot, handing it a free one (named in `names`) if it has none yet.
    fn slot(&mut self, worker: Worker, names: &WorkerSlots) -> Option<u8> {
        if let Some(slot) = self.slot_of(worker) {
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

    /// Whether `a` and `b` are the same workers. A list and bits may be: a list made while one
    /// of its workers had no slot outlives the slot that worker gets later.
    pub(crate) fn same(&self, a: HolderView<'_>, b: HolderView<'_>) -> bool {
        match (a, b) {
            (HolderView::Bits(a), HolderView::Bits(b)) => a == b,
            (HolderView::List(a), HolderView::List(b)) => a == b,
            (HolderView::List(list), HolderView::Bits(bits))
            | (HolderView::Bits(bits), HolderView::List(list)) => {
                list.len() == bits.count_ones() as usize
                    && list.iter().all(|&w| self.slot_of(w).is_some_and(|s| bits & 1 << s != 0))
            }
        }
    }

    /// Heap bytes of the shared lists of one worker and of the maps.
    pub(crate) fn bytes(&self) -> usize {
        let list = |len: usize| 2 * size_of::<usize>() + len * size_of::<Worker>();
        self.solo.capacity() * (size_of::<(Worker, Holders)>() + 1)
            + self.solo.len() * list(1)
            + self.slots.capacity() * (size_of::<(Worker, u8)>() + 1)
    }

    /// Drops `worker`, which no run holds any more: its own set (runs still holding it keep
    /// their copy alive) and, once readers allow, its slot.
    pub(crate) fn forget<V: Send>(&mut self, worker: Worker, retired: &mut Reclaimer<V>) {
        self.solo.remove(&worker);
        self.last.set(None);
        if let Some(slot) = self.slots.remove(&worker) {
            retired.retire(Box::new(SlotRelease { slot, released: self.released.clone() }));
        }
    }

    /// Drops every worker (a lane starting over with no runs), as [`Self::forget`] does.
    pub(crate) fn forget_all<V: Send>(&mut self, retired: &mut Reclaimer<V>) {
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

    /// Slots and sets with workers 0 to 63 in the lane's 64 slots.
    fn every_slot_taken() -> (WorkerSlots, HolderSets) {
        let names = WorkerSlots::default();
        let mut sets = HolderSets::default();
        for id in 0..64 {
            sets.solo(w(id), &names);
        }
        (names, sets)
    }

    /// The workers `set` names, sorted, and whether it is bits.
    fn decode(set: &Holders, names: &WorkerSlots) -> (Vec<Worker>, bool) {
        match set.view() {
            HolderView::List(list) => (list.to_vec(), false),
            HolderView::Bits(bits) => {
                let mut workers: Vec<Worker> =
                    (0..64).filter(|s| bits & (1 << s) != 0).map(|s| names.worker(s)).collect();
                workers.sort_unstable();
                (workers, true)
            }
        }
    }

    /// While slots last, sets are bits; a set with a slotless holder is a list (and becomes
    /// bits again when that holder leaves). Membership, `is_only` and `len` agree with the
    /// set either way.
    #[test]
    fn sets_are_bits_while_slots_last_and_lists_past_them() {
        let names = WorkerSlots::default();
        let mut sets = HolderSets::default();
        let mut set = sets.nobody();
        assert_eq!(decode(&set, &names), (vec![], true));
        let check = |sets: &HolderSets, set: &Holders, expected: &[Worker]| {
            let set = set.view();
            assert_eq!(set.len(), expected.len());
            for id in 0..72 {
                let slot = sets.slot_of(w(id));
                assert_eq!(set.holds(w(id), slot), expected.contains(&w(id)), "{id}");
                assert_eq!(set.is_only(w(id), slot), expected == [w(id)], "{id}");
            }
        };
        for id in 0..70 {
            set = sets.adding(set.view(), w(id), &names);
            let expected: Vec<Worker> = (0..=id).map(w).collect();
            assert_eq!(decode(&set, &names), (expected.clone(), id < 64), "after adding {id}");
            check(&sets, &set, &expected);
        }
        for id in (1..70).rev() {
            set = sets.removing(set.view(), w(id), &names);
            let expected: Vec<Worker> = (0..id).map(w).collect();
            assert_eq!(decode(&set, &names), (expected.clone(), id <= 64), "after removing {id}");
            check(&sets, &set, &expected);
        }
        // A slotless worker alone: one shared list.
        let solo = sets.solo(w(65), &names);
        assert_eq!(decode(&solo, &names), (vec![w(65)], false));
        let again = sets.solo(w(65), &names);
        assert!(matches!((&solo.list, &again.list), (Some(a), Some(b)) if Arc::ptr_eq(a, b)));
        assert_eq!(RunHolders::from(solo.clone()).own_bytes(), 0);
        // Removing the slotless worker from a list leaves bits.
        let pair = sets.adding(solo.view(), w(3), &names);
        assert_eq!(decode(&pair, &names), (vec![w(3), w(65)], false));
        assert_eq!(decode(&sets.removing(pair.view(), w(65), &names), &names), (vec![w(3)], true));
    }

    /// A version's bits change in place; a list, or a change to or from one, needs a new
    /// version.
    #[test]
    fn only_bits_change_in_place() {
        let (names, mut sets) = every_slot_taken();
        let run = RunHolders::from(sets.solo(w(3), &names));
        let pair = sets.adding(run.view(), w(5), &names);
        assert!(run.set_in_place(&pair));
        assert_eq!(decode(&run.get(), &names), (vec![w(3), w(5)], true));
        assert!(run.view().holds(w(5), sets.slot_of(w(5))));
        let listed = sets.adding(run.view(), w(70), &names);
        assert!(!run.set_in_place(&listed), "bits to a list");
        assert_eq!(decode(&run.get(), &names), (vec![w(3), w(5)], true));
        let run = RunHolders::from(listed);
        let back = sets.removing(run.view(), w(70), &names);
        assert!(!run.set_in_place(&back), "a list to bits");
        assert_eq!(decode(&run.get(), &names), (vec![w(3), w(5), w(70)], false));
        assert_eq!(run.own_bytes(), 16 + 3 * size_of::<Worker>());
    }

    /// A forgotten worker's slot is handed out again only after the reclaimer lets it go.
    #[test]
    fn a_slot_comes_back_only_through_the_reclaimer() {
        let (names, mut sets) = every_slot_taken();
        let mut retired = Reclaimer::<()>::default();
        sets.forget(w(7), &mut retired);
        let early = sets.solo(w(100), &names);
        assert_eq!(decode(&early, &names), (vec![w(100)], false), "not before readers allow");
        let guard = pin();
        retired.seal(&guard);
        drop(guard);
        // Reclaiming waits for the global epoch to move on: pin and flush until it has (other
        // tests' threads pin too, and a loaded machine may keep one off-core for a while).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            pin().flush();
            retired.reclaim_with(drop);
            if !sets.released.lock().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        let set = sets.solo(w(101), &names);
        assert!(matches!(set.view(), HolderView::Bits(bits) if bits == 1 << 7));
        assert_eq!(names.worker(7), w(101));
    }
}
