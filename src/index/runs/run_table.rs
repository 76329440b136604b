//! [`RunTable`]: one lane's map from a run's key (where it hangs and its first content hash:
//! see [`super::run`]) to the run. Only the lane writes it, through its
//! [`RunTableWriter`] (one per table, not `Clone`, every change `&mut`); queries read it
//! without locks, and what they load lives no longer than both their pin and their borrow of
//! the table.
//!
//! Keys are not unique: a sender can make two runs' keys equal (see [`super::run`]), so
//! a key may have several slots, and a lookup takes the first run under it that the caller's
//! check accepts (its identity, not its key). A key's slots start where the pool's secret
//! [`Mixer`] puts it, so keys chosen to share a slot cannot be aimed at one probe sequence.
//!
//! Open addressing over 32-byte slots (key, pointer and hints, below). Within one array a
//! slot's key, once set, never changes: removing a run nulls its pointer and leaves the key as a
//! tombstone, which only the same key may reuse. So a reader never sees a key paired with
//! another key's run. When keyed slots pass 3/4 of the array (or live ones fall below 1/8), the
//! writer copies the live entries into an array sized for them and publishes it through the
//! epoch, so memory follows the live runs.
//!
//! A slot also carries hints about its run, which a lookup acts on before the run's own lines
//! arrive: where its hashes are when they are out of line (their distance from the run, in
//! words), and its tail id and length, which say where the next run's slot is. A query's walk
//! then starts loading the run, its hashes and the next slot all at once, instead of each
//! after the one before it: a walk over cold runs waits for one miss per run, not three in a
//! row. Hints are only ever prefetched, never read through, and the writer stores them apart
//! from the pointer, so a hint of another version of the run costs a useless prefetch at most.
//!
//! Every live slot owns its run's version, as the thin pointer [`Version::into_raw`] gives. A
//! removed version goes to the writer's [`Reclaimer`], which hands it back to the lane (to build
//! later versions in its memory) once no pinned reader can hold the pointer.

use crate::index::runs::locals::INLINE;
use crate::index::runs::run::{Run, RunHead};
use crate::index::runs::versions::Version;
use crate::index::runs::worker_slots::WorkerSlots;
use crate::mix::Mixer;
use crate::prefetch::{prefetch_line, prefetch_span};
use crate::sync::epoch::{Guard, Published, Reclaimer};
use crate::sync::{Arc, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Marks a never-used slot. A real key equal to it is stored as [`ZERO_KEY_STAND_IN`], which
/// makes keys 0 and `u64::MAX` share slots: one more collision, told apart like the others.
const EMPTY: u64 = 0;
const ZERO_KEY_STAND_IN: u64 = u64::MAX;
const MIN_SLOTS: usize = 16;

/// How much of a run's out-of-line hashes a lookup asks for with the run (32 blocks).
const HINTED_HASH_BYTES: usize = 256;

/// The key a slot records for `key`.
pub(crate) fn stored_key(key: u64) -> u64 {
    if key == EMPTY { ZERO_KEY_STAND_IN } else { key }
}

#[repr(align(32))]
struct Slot {
    key: AtomicU64,
    run: AtomicPtr<RunHead>,
    /// [`Hints`], written before the pointer.
    tail: AtomicU64,
    len: AtomicU32,
    hashes: AtomicU32,
}

/// What a slot says about its run before the run is loaded (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hints {
    /// The run's tail id and length (saturated): the next run's key is made of the tail id and
    /// the query's hash after this run.
    pub(crate) tail: u64,
    pub(crate) len: u32,
    /// How many words past the run its hashes start, if they are out of line and that fits in
    /// 31 bits either way; else 0.
    hashes: u32,
}

impl Hints {
    fn of(run: &Run) -> Self {
        let hashes = if run.is_inline() {
            0
        } else {
            let words = (run.locals().as_ptr().addr() as i64)
                .wrapping_sub(std::ptr::from_ref(run).addr() as i64)
                / size_of::<u64>() as i64;
            i32::try_from(words).map_or(0, |words| words as u32)
        };
        let len = u32::try_from(run.len()).unwrap_or(u32::MAX);
        Self { tail: run.tail_id, len, hashes }
    }

    /// The size of the run's version (if these hints are its version's): a run of up to
    /// [`INLINE`] blocks has them all inline, a longer one none (see [`Run::version`]).
    fn run_bytes(self) -> usize {
        let inline = if self.len as usize <= INLINE { self.len as usize } else { 0 };
        size_of::<RunHead>() + inline * size_of::<u64>()
    }

    /// Where the hashes of `run` (the run these hints were read with) start, if hinted: an
    /// address only ever prefetched.
    fn hashes_of(self, run: &Run) -> Option<usize> {
        let bytes = (self.hashes as i32 as isize).wrapping_mul(size_of::<u64>() as isize);
        (self.hashes != 0).then(|| std::ptr::from_ref(run).addr().wrapping_add_signed(bytes))
    }
}

impl Slot {
    fn hints(&self) -> Hints {
        Hints {
            tail: self.tail.load(Ordering::Relaxed),
            len: self.len.load(Ordering::Relaxed),
            hashes: self.hashes.load(Ordering::Relaxed),
        }
    }

    fn set_hints(&self, hints: Hints) {
        self.tail.store(hints.tail, Ordering::Relaxed);
        self.len.store(hints.len, Ordering::Relaxed);
        self.hashes.store(hints.hashes, Ordering::Relaxed);
    }
}

struct Slots {
    slots: Box<[Slot]>,
}

impl Slots {
    fn with_capacity(capacity: usize) -> Self {
        let slots = (0..capacity)
            .map(|_| Slot {
                key: AtomicU64::new(EMPTY),
                run: AtomicPtr::new(std::ptr::null_mut()),
                tail: AtomicU64::new(0),
                len: AtomicU32::new(0),
                hashes: AtomicU32::new(0),
            })
            .collect();
        Self { slots }
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slots of `key`'s probe sequence, from its home up to (with) the first empty one,
    /// with the key read in each.
    fn probe(&self, key: u64, mixer: Mixer) -> impl Iterator<Item = (&Slot, u64)> {
        let mask = self.mask();
        let home = mixer.mix(key) as usize & mask;
        let mut done = false;
        // An empty slot always ends it: the writer keeps at least a quarter of the slots empty.
        (0..=mask).map_while(move |step| {
            if done {
                return None;
            }
            let slot = &self.slots[(home + step) & mask];
            let found = slot.key.load(Ordering::Acquire);
            done = found == EMPTY;
            Some((slot, found))
        })
    }

    /// Where the writer puts a run keyed `key`: a tombstone of that key, else the empty slot
    /// that ends its probe sequence; with the key read there.
    fn vacant(&self, key: u64, mixer: Mixer) -> (&Slot, u64) {
        self.probe(key, mixer)
            .find(|&(slot, found)| {
                found == EMPTY || (found == key && slot.run.load(Ordering::Relaxed).is_null())
            })
            .expect("a probe sequence ends at an empty slot")
    }
}

/// One lookup of a key in one slot array (see [`RunTable::lookup`]): the array stays the same
/// for the whole probe sequence, so no slot is skipped or seen twice if the writer replaces it.
pub(crate) struct Lookup<'a> {
    slots: &'a Slots,
    key: u64,
    /// The next slot to read, and how many slots are left to read at most.
    at: usize,
    left: usize,
    /// The hints of the slot the last candidate came from.
    hints: Hints,
}

impl<'a> Lookup<'a> {
    /// The next run under the key, its lines on their way in; `None` once the probe sequence
    /// ends. Safe against concurrent writes: the lookup's guard keeps the run alive, and it
    /// cannot outlive the borrow of the table either.
    #[inline]
    pub(crate) fn next_candidate(&mut self) -> Option<&'a Run> {
        let mask = self.slots.mask();
        while self.left > 0 {
            let slot = &self.slots.slots[self.at];
            self.at = (self.at + 1) & mask;
            self.left -= 1;
            let found = slot.key.load(Ordering::Acquire);
            if found == EMPTY {
                // An empty slot always ends it: the writer keeps at least a quarter empty.
                self.left = 0;
                return None;
            }
            // Another key's slot; an empty slot may already hold the pointer of another key
            // being inserted there.
            if found != self.key {
                continue;
            }
            let run = slot.run.load(Ordering::Acquire);
            // SAFETY: a non-null pointer was stored (with release, after the run was built) by
            // `insert` or `replace` and owns its version. The version is dropped (or handed
            // back for reuse) only through the writer's reclaimer after the pointer is unlinked
            // from every array a reader can still load, so it outlives the guard the lookup
            // borrows; or when the table drops, which it cannot while the lookup borrows it
            // (`'a` is within both). A tombstone holds null.
            if run.is_null() {
                continue;
            }
            // A run is read whole right after it is found (its identity, then its state and
            // hashes): its lines' misses overlap rather than follow one another. Its size is
            // taken from the hints, as reading it from the run would wait for its first line.
            self.hints = slot.hints();
            prefetch_span(run.addr(), self.hints.run_bytes());
            // SAFETY: see above; the pointer is a thin one from `Version::into_raw`.
            let run = unsafe { Run::from_thin(run) };
            if let Some(hashes) = self.hints.hashes_of(run) {
                prefetch_span(hashes, HINTED_HASH_BYTES);
            }
            return Some(run);
        }
        None
    }

    /// The hints of the slot the last candidate came from (see the [module docs](self)).
    #[inline]
    pub(crate) fn hints(&self) -> Hints {
        self.hints
    }
}

/// See the [module docs](self).
pub(crate) struct RunTable {
    current: Published<Slots>,
    mixer: Mixer,
    /// Slots with a key (live or tombstone) and slots with a run, kept by the writer.
    keyed: AtomicUsize,
    live: AtomicUsize,
    /// Who the lane's holder bits stand for (kept here: the table is what queries of a lane
    /// read).
    names: WorkerSlots,
}

/// What a writer retires runs to: their versions come back to it once readers let go.
pub(crate) type RunReclaimer = Reclaimer<Version>;

/// The only handle that changes a [`RunTable`]; see the [module docs](self).
pub(crate) struct RunTableWriter(Arc<RunTable>);

impl RunTableWriter {
    /// An empty table whose slots `mixer` picks, and its writer.
    pub(crate) fn new(mixer: Mixer) -> Self {
        Self(Arc::new(RunTable {
            current: Published::new(Slots::with_capacity(MIN_SLOTS)),
            mixer,
            keyed: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            names: WorkerSlots::default(),
        }))
    }

    /// The table, for readers.
    pub(crate) fn table(&self) -> &Arc<RunTable> {
        &self.0
    }

    /// Publishes `run` under `key`.
    pub(crate) fn insert(
        &mut self,
        key: u64,
        run: Version,
        guard: &Guard,
        retired: &mut RunReclaimer,
    ) {
        let key = stored_key(key);
        if self.0.keyed.load(Ordering::Relaxed) + 1 > self.capacity(guard) / 4 * 3 {
            self.rebuild(self.0.live.load(Ordering::Relaxed) + 1, guard, retired);
        }
        let (slot, found) = self.0.current.load(guard).vacant(key, self.0.mixer);
        slot.set_hints(Hints::of(&run));
        slot.run.store(run.into_raw(), Ordering::Release);
        if found == EMPTY {
            // Published after the pointer: a reader that sees the key sees the run.
            slot.key.store(key, Ordering::Release);
            self.0.keyed.store(self.0.keyed.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        self.0.live.store(self.0.live.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Puts `next` (a new version of `current`, published under `key`) in `current`'s slot;
    /// `current` is handed back to the writer once readers that may hold it are gone.
    pub(crate) fn replace(
        &mut self,
        key: u64,
        current: &Run,
        next: Version,
        guard: &Guard,
        retired: &mut RunReclaimer,
    ) {
        let slot = self.slot_of(stored_key(key), current, guard);
        slot.set_hints(Hints::of(&next));
        // Release: a reader that loads the pointer sees the version whole.
        let old = slot.run.swap(next.into_raw(), Ordering::AcqRel);
        // SAFETY: `current`'s pointer, stored by `insert` or `replace`, unlinked just now.
        retired.retire_value(unsafe { Version::from_raw(old) });
    }

    /// The slot holding `run`, published under `key` (as stored).
    fn slot_of<'a>(&'a self, key: u64, run: &Run, guard: &'a Guard) -> &'a Slot {
        let wanted = Run::thin(run);
        self.0
            .current
            .load(guard)
            .probe(key, self.0.mixer)
            .find(|&(slot, found)| found == key && slot.run.load(Ordering::Relaxed) == wanted)
            .map(|(slot, _)| slot)
            .expect("a live run is in the table under its key")
    }

    /// Unlinks `run`, published under `key`; it is handed back to the writer once readers that
    /// may hold it are gone.
    pub(crate) fn remove(
        &mut self,
        key: u64,
        run: &Run,
        guard: &Guard,
        retired: &mut RunReclaimer,
    ) {
        let slot = self.slot_of(stored_key(key), run, guard);
        let run = slot.run.swap(std::ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: `run`'s pointer, stored by `insert` or `replace`, unlinked just now.
        retired.retire_value(unsafe { Version::from_raw(run) });
        let live = self.0.live.load(Ordering::Relaxed) - 1;
        self.0.live.store(live, Ordering::Relaxed);
        if self.capacity(guard) > MIN_SLOTS && live < self.capacity(guard) / 8 {
            self.rebuild(live, guard, retired);
        }
    }

    /// Unlinks every run, trusting only the slots (a lane restarting after a panic may have
    /// left its own records of them half changed).
    pub(crate) fn clear(&mut self, guard: &Guard, retired: &mut RunReclaimer) {
        for slot in self.0.current.load(guard).slots.iter() {
            let run = slot.run.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !run.is_null() {
                // SAFETY: a slot's non-null pointer, unlinked just now.
                retired.retire_value(unsafe { Version::from_raw(run) });
            }
        }
        self.0.current.replace(Slots::with_capacity(MIN_SLOTS), retired);
        self.0.keyed.store(0, Ordering::Relaxed);
        self.0.live.store(0, Ordering::Relaxed);
    }

    fn capacity(&self, guard: &Guard) -> usize {
        self.0.capacity(guard)
    }

    /// Moves the live entries into a fresh array with room for `live` at most half full. The
    /// pointers move with their versions; the old array is retired without them.
    fn rebuild(&mut self, live: usize, guard: &Guard, retired: &mut RunReclaimer) {
        let capacity = (live * 2).next_power_of_two().max(MIN_SLOTS);
        let fresh = Slots::with_capacity(capacity);
        let mut moved = 0;
        for slot in self.0.current.load(guard).slots.iter() {
            let run = slot.run.load(Ordering::Relaxed);
            if run.is_null() {
                continue;
            }
            let key = slot.key.load(Ordering::Relaxed);
            let (target, _) = fresh.vacant(key, self.0.mixer);
            target.set_hints(slot.hints());
            target.run.store(run, Ordering::Relaxed);
            target.key.store(key, Ordering::Relaxed);
            moved += 1;
        }
        // `replace` publishes with release, so readers of the new array see its slots.
        self.0.current.replace(fresh, retired);
        self.0.keyed.store(moved, Ordering::Relaxed);
    }
}

impl RunTable {
    /// The key of the run that hangs from the node tailed `parent_tail` and starts with the
    /// content hash `first` (see [`super::run`]): the content hash, which a sender
    /// picks, xored with a secret mix of the tail id, which the lane draws.
    #[inline]
    pub(crate) fn key(&self, parent_tail: u64, first: u64) -> u64 {
        self.mixer.mix(parent_tail) ^ first
    }

    /// The key `run` is stored under: [`Self::key`] of its identity, which its versions share.
    #[inline]
    pub(crate) fn key_of(&self, run: &Run) -> u64 {
        self.key(run.parent_tail, run.first())
    }

    /// Who the lane's holder bits stand for.
    #[inline]
    pub(crate) fn names(&self) -> &WorkerSlots {
        &self.names
    }

    /// The first run keyed `key` that `wanted` accepts, if any. Safe against concurrent
    /// writes; `guard` keeps it alive, and it cannot outlive the borrow of the table either.
    pub(crate) fn get<'a>(
        &'a self,
        key: u64,
        guard: &'a Guard,
        wanted: impl Fn(&Run) -> bool,
    ) -> Option<&'a Run> {
        let mut lookup = self.lookup(key, guard);
        std::iter::from_fn(|| lookup.next_candidate()).find(|run| wanted(run))
    }

    /// A lookup of `key` in the current slots, which starts loading the slot it begins at: it
    /// yields the runs under `key` one at a time ([`Lookup::next_candidate`]), so a caller can
    /// do other work while each one's lines load.
    #[inline]
    pub(crate) fn lookup<'a>(&'a self, key: u64, guard: &'a Guard) -> Lookup<'a> {
        let slots = self.current.load(guard);
        let key = stored_key(key);
        let home = self.mixer.mix(key) as usize & slots.mask();
        prefetch_line(&slots.slots[home]);
        Lookup { slots, key, at: home, left: slots.slots.len(), hints: Hints::default() }
    }

    fn capacity(&self, guard: &Guard) -> usize {
        self.current.load(guard).slots.len()
    }

    /// Heap bytes of the slot array.
    pub(crate) fn bytes(&self, guard: &Guard) -> usize {
        self.capacity(guard) * size_of::<Slot>()
    }
}

impl Drop for RunTable {
    fn drop(&mut self) {
        // `&mut self`: no reader is left, so the live versions can go now.
        let guard = crate::sync::epoch::pin();
        for slot in self.current.load(&guard).slots.iter() {
            let run = slot.run.swap(std::ptr::null_mut(), Ordering::Relaxed);
            if !run.is_null() {
                // SAFETY: a slot's non-null pointer, unlinked just now.
                drop(unsafe { Version::from_raw(run) });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::event::Worker;
    use crate::index::runs::holder_sets::{HolderView, Holders};
    use crate::index::runs::locals::Locals;
    use crate::index::runs::run::RunState;
    use crate::index::runs::versions::VersionCache;
    use crate::sync::AtomicBool;
    use crate::sync::epoch::pin;

    /// A run hanging from `parent_tail` with content `locals`, marked `tag` (its id and tail
    /// id, and its one holder's id), in memory from `cache`.
    fn cached_run(locals: &[u64], tag: u64, parent_tail: u64, cache: &mut VersionCache) -> Version {
        let state = RunState {
            locals: Locals::new(locals),
            tail_id: tag,
            members: Holders::listed(&[Worker::new(tag, 0)]),
        };
        Run::version(tag as u32, parent_tail, state, cache)
    }

    /// [`cached_run`] in fresh memory.
    fn tagged_run(locals: &[u64], tag: u64, parent_tail: u64) -> Version {
        cached_run(locals, tag, parent_tail, &mut VersionCache::default())
    }

    /// A run hanging from `parent_tail`, with content `[key, key + 1]`.
    fn run_below(key: u64, parent_tail: u64) -> Version {
        tagged_run(&[key, key.wrapping_add(1)], key, parent_tail)
    }

    fn run(key: u64) -> Version {
        run_below(key, 0)
    }

    /// The run a test published at `thin` (its [`Run::thin`] before publishing).
    fn live<'a>(thin: *mut RunHead) -> &'a Run {
        // SAFETY: the tests pass only pointers of versions they published and have not unlinked
        // (or unlinked under a guard they still hold): the table owns those.
        unsafe { Run::from_thin(thin) }
    }

    fn any(_: &Run) -> bool {
        true
    }

    /// The writer grows the table through several rebuilds, then removes most keys (shrinking
    /// it) while a reader looks keys up: every run the reader finds is whole and has its key.
    /// Run under miri too (see the README) for the pointer handling.
    #[test]
    fn rebuilds_under_a_reader() {
        let keys: u64 = if cfg!(miri) { 80 } else { 4000 };
        let mut table = RunTableWriter::new(Mixer::random());
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (table, done) = (table.table().clone(), done.clone());
            std::thread::spawn(move || {
                let mut found = 0;
                while !done.load(Ordering::Acquire) {
                    for key in 1..=keys {
                        let guard = pin();
                        if let Some(run) = table.get(key, &guard, any) {
                            assert_eq!(run.locals(), &[key, key + 1]);
                            let holder = Worker::new(key, 0);
                            assert!(
                                matches!(run.members.view(), HolderView::List([w]) if *w == holder)
                            );
                            found += 1;
                        }
                    }
                }
                found
            })
        };
        let mut retired = RunReclaimer::default();
        let guard = pin();
        let mut runs = HashMap::new();
        for key in 1..=keys {
            let run = run(key);
            runs.insert(key, Run::thin(&run));
            table.insert(key, run, &guard, &mut retired);
        }
        for key in 1..=keys {
            assert!(table.table().get(key, &guard, any).is_some());
        }
        let grown = table.table().bytes(&guard);
        drop(guard);
        for key in (1..=keys).filter(|key| key % 16 != 0) {
            let guard = pin();
            table.remove(key, live(runs[&key]), &guard, &mut retired);
            retired.seal(&guard);
            drop(guard);
            retired.reclaim_with(drop);
        }
        let guard = pin();
        // A removed key can come back (its tombstone is reused).
        table.insert(1, run(1), &guard, &mut retired);
        done.store(true, Ordering::Release);
        reader.join().unwrap();
        assert!(
            table.table().bytes(&guard) * 2 < grown,
            "{} of {grown}",
            table.table().bytes(&guard)
        );
        for key in 1..=keys {
            assert_eq!(
                table.table().get(key, &guard, any).is_some(),
                key % 16 == 0 || key == 1,
                "{key}"
            );
        }
        // Key 0 is stored as a stand-in.
        table.insert(0, run(0), &guard, &mut retired);
        assert!(table.table().get(0, &guard, any).is_some());
    }

    /// A lane replaces a run's version in its slot on every change: a reader sees one version
    /// whole (its content and its holders agree), and a version it holds stays readable after
    /// it is replaced, until the reclaimer hands it back to be built over. Run under miri too
    /// (see the README).
    #[test]
    fn replaced_versions_stay_whole_under_a_reader() {
        let versions: u64 = if cfg!(miri) { 40 } else { 4000 };
        let mut cache = VersionCache::default();
        let version = |v: u64, cache: &mut VersionCache| cached_run(&[1, v], v, 0, cache);
        let mut table = RunTableWriter::new(Mixer::random());
        let mut retired = RunReclaimer::default();
        let first = version(0, &mut cache);
        let mut current = Run::thin(&first);
        table.insert(1, first, &pin(), &mut retired);
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (table, done) = (table.table().clone(), done.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                while !done.load(Ordering::Acquire) {
                    let guard = pin();
                    let run = table.get(1, &guard, any).expect("always published");
                    let v = run.tail_id;
                    assert_eq!(run.locals(), &[1, v]);
                    let holder = Worker::new(v, 0);
                    assert!(matches!(run.members.view(), HolderView::List([w]) if *w == holder));
                    assert!(v >= last, "versions go forward: {v} after {last}");
                    last = v;
                }
            })
        };
        // From version `FRESH` on, wait (pinning and flushing, so the epoch moves on past the
        // reader's short pins) until a replaced version is back in the cache, so every later
        // version is built in reclaimed memory while the reader runs.
        const FRESH: u64 = 4;
        let (mut made_at, mut reused, mut reclaimed) =
            (std::collections::HashSet::from([current]), 0, 0);
        for v in 1..=versions {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while v >= FRESH && reclaimed == reused {
                let guard = pin();
                guard.flush();
                drop(guard);
                retired.reclaim_with(|old| {
                    reclaimed += 1;
                    cache.recycle(old);
                });
                assert!(std::time::Instant::now() < deadline, "version {v}: nothing reclaimed");
                std::thread::yield_now();
            }
            let guard = pin();
            let next = version(v, &mut cache);
            let at = Run::thin(&next);
            reused += usize::from(!made_at.insert(at));
            table.replace(1, live(current), next, &guard, &mut retired);
            current = at;
            retired.seal(&guard);
        }
        done.store(true, Ordering::Release);
        reader.join().unwrap();
        let guard = pin();
        assert_eq!(table.table().get(1, &guard, any).expect("published").tail_id, versions);
        assert_eq!(table.table().live.load(Ordering::Relaxed), 1);
        assert_eq!(reused as u64, versions + 1 - FRESH, "built in reclaimed memory");
    }

    /// A lookup's hints name its run's tail, length and out-of-line hashes, through inserts,
    /// replaced versions and rebuilds (hints are only prefetched, so nothing else would notice
    /// them going wrong).
    #[test]
    fn hints_follow_the_run_in_the_slot() {
        let mut table = RunTableWriter::new(Mixer::random());
        let mut retired = RunReclaimer::default();
        let guard = pin();
        let long: Vec<u64> = (100..140).collect();
        let check = |table: &RunTableWriter, key: u64, run: &Run| {
            let mut lookup = table.table().lookup(key, &guard);
            let found = lookup.next_candidate().expect("published");
            assert!(std::ptr::eq(found, run));
            let hints = lookup.hints();
            assert_eq!((hints.tail, hints.len as usize), (run.tail_id, run.len()));
            // Hinted when out of line and near enough (memory from another thread's arena may
            // not be).
            let at = run.locals().as_ptr().addr();
            let near = at.abs_diff(std::ptr::from_ref(run).addr()) < 1 << 33;
            let hashes = (!run.is_inline() && near).then_some(at);
            assert_eq!(hints.hashes_of(found), hashes, "key {key}");
            // What a lookup prefetches of the run is all of it.
            assert_eq!(hints.run_bytes(), size_of_val(run), "key {key}");
        };
        let publish =
            |table: &mut RunTableWriter, key, run: Version, retired: &mut RunReclaimer| {
                let at = Run::thin(&run);
                table.insert(key, run, &guard, retired);
                at
            };
        let short = publish(&mut table, 1, tagged_run(&[1, 2], 5, 0), &mut retired);
        let long_run = publish(&mut table, 100, tagged_run(&long, 6, 0), &mut retired);
        check(&table, 1, live(short));
        check(&table, 100, live(long_run));
        // New versions: the short run grows out of line, the long one shrinks inline.
        let (grown, shrunk) = (tagged_run(&long[..20], 7, 0), tagged_run(&long[..3], 8, 0));
        let (grown_at, shrunk_at) = (Run::thin(&grown), Run::thin(&shrunk));
        table.replace(1, live(short), grown, &guard, &mut retired);
        table.replace(100, live(long_run), shrunk, &guard, &mut retired);
        check(&table, 1, live(grown_at));
        check(&table, 100, live(shrunk_at));
        // Rebuilds move the hints with their runs.
        let more: Vec<*mut RunHead> = (1000..1200)
            .map(|key| publish(&mut table, key, tagged_run(&long, key, 0), &mut retired))
            .collect();
        check(&table, 1, live(grown_at));
        check(&table, 100, live(shrunk_at));
        for (key, &run) in (1000..).zip(&more) {
            check(&table, key, live(run));
        }
    }

    /// #18 item 1: runs under one key (equal keys, and 0 next to `u64::MAX`) are each found by
    /// identity and removed alone, through inserts, removals and rebuilds.
    #[test]
    fn colliding_keys_are_told_apart() {
        let mut table = RunTableWriter::new(Mixer::random());
        let mut retired = RunReclaimer::default();
        let guard = pin();
        let is = |first: u64, parent: u64| move |run: &Run| run.is_child(parent, first);
        // Per key, several runs told apart by the tail they hang from.
        let keys = [0, u64::MAX, 7];
        let mut published: Vec<(u64, u64, *mut RunHead)> = Vec::new();
        for parent in 0..40 {
            for key in keys {
                let run = run_below(key, parent);
                published.push((key, parent, Run::thin(&run)));
                table.insert(key, run, &guard, &mut retired);
            }
        }
        let reader = table.table().clone();
        let check = |published: &[(u64, u64, *mut RunHead)]| {
            for &(key, parent, run) in published {
                let found = reader.get(key, &guard, is(key, parent)).expect("a live run");
                assert!(std::ptr::eq(found, live(run)), "key {key:#x} below {parent}");
            }
        };
        check(&published);
        // Removing every other one leaves exactly the rest; their slots are reused.
        let mut kept = Vec::new();
        for (at, entry) in published.into_iter().enumerate() {
            if at % 2 == 0 {
                table.remove(entry.0, live(entry.2), &guard, &mut retired);
                assert!(table.table().get(entry.0, &guard, is(entry.0, entry.1)).is_none());
            } else {
                kept.push(entry);
            }
        }
        check(&kept);
        while let Some((key, parent, run)) = kept.pop() {
            table.remove(key, live(run), &guard, &mut retired);
            assert!(table.table().get(key, &guard, is(key, parent)).is_none());
            check(&kept);
        }
        assert!(keys.iter().all(|&key| table.table().get(key, &guard, any).is_none()));
    }
}
