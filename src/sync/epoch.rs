//! Epoch-based publication of heap values that readers use without locks.
//!
//! A writer replaces a value; readers [`pin`] once per operation and [`Published::load`] it.
//! A loaded reference lives no longer than both the guard and the cell it came from (so a
//! table dropped under a reader is a compile error, not a dangling read). Replacing is an
//! atomic swap, so each old value is unlinked exactly once whoever replaces it: nothing about
//! `Published` relies on there being one writer. What a writer unlinks goes to its
//! [`Reclaimer`] and is freed on the writer's thread once every reader pinned before the
//! unlinking has unpinned, or handed back to the writer to reuse its memory (a lane's run
//! versions, [`Reclaimer::retire_value`]): while the writer lives, readers only ever run a flag
//! store for it, never a destructor, so a query's latency does not depend on how much the
//! writer retires.
//! What a reclaimer still holds when it drops (a pool shutting down) goes to crossbeam's global
//! queue, whose frees any pinning thread may run, a reader included. Normally pinning is
//! `crossbeam-epoch`'s; under loom nothing is freed before the reclaimer drops, so loom sees our
//! own orderings only.

/// A value the writer has unlinked and readers may still hold.
pub type Garbage = Box<dyn Send>;

#[cfg(not(loom))]
mod imp {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use crossbeam_epoch::{self as ce, Atomic, Owned};

    use super::Garbage;

    /// Keeps every value loaded through it alive while it lives.
    pub struct Guard(ce::Guard);

    /// Pins the current thread; values loaded under the guard stay alive until it drops.
    pub fn pin() -> Guard {
        Guard(ce::pin())
    }

    impl Guard {
        /// Hands this thread's deferred work to the global queue, so batches sealed by a
        /// writer going idle do not wait for its next pin.
        pub fn flush(&self) {
            self.0.flush();
        }
    }

    /// What a writer retired: garbage to drop, or a value of its own kind to hand back.
    enum Retired<V> {
        Garbage(Garbage),
        Value(V),
    }

    /// A writer's retired values, freed (or handed back) on its own thread in batches once no
    /// reader can hold them; see the [module docs](super). `V` is the kind of value the writer
    /// takes back to reuse ([`Self::retire_value`], [`Self::reclaim_with`]).
    pub struct Reclaimer<V: Send + 'static> {
        batch: Vec<Retired<V>>,
        /// Sealed batches, oldest first, each with its number.
        sealed: VecDeque<(u64, Vec<Retired<V>>)>,
        /// Batches sealed so far.
        seals: u64,
        /// The highest batch number the epoch has found safe: safety is monotone (a batch
        /// sealed earlier waits for a subset of the readers a later one waits for), so every
        /// batch up to it is safe too.
        safe: Arc<AtomicU64>,
        /// An emptied batch kept for its allocation (up to a size).
        spare: Vec<Retired<V>>,
    }

    impl<V: Send + 'static> Default for Reclaimer<V> {
        fn default() -> Self {
            Self {
                batch: Vec::new(),
                sealed: VecDeque::new(),
                seals: 0,
                safe: Arc::default(),
                spare: Vec::new(),
            }
        }
    }

    impl<V: Send + 'static> Reclaimer<V> {
        /// Adds `garbage` (already unlinked) to the open batch.
        pub fn retire(&mut self, garbage: Garbage) {
            self.batch.push(Retired::Garbage(garbage));
        }

        /// Adds `value` (already unlinked) to the open batch, to be handed back by
        /// [`Self::reclaim_with`] (no allocation, unlike [`Self::retire`]).
        pub fn retire_value(&mut self, value: V) {
            self.batch.push(Retired::Value(value));
        }

        /// Closes the open batch: it becomes free to drop once every thread pinned now has
        /// unpinned.
        pub fn seal(&mut self, guard: &Guard) {
            if self.batch.is_empty() {
                return;
            }
            self.seals += 1;
            let (number, safe) = (self.seals, self.safe.clone());
            guard.0.defer(move || safe.fetch_max(number, Ordering::Release));
            let batch = std::mem::replace(&mut self.batch, std::mem::take(&mut self.spare));
            self.sealed.push_back((number, batch));
        }

        /// The number the open batch gets when sealed: what is retired now is safe from
        /// readers once [`Self::is_safe`] says so of it (if the open batch is empty when
        /// sealed, a later batch takes the number, and that is safe later still).
        pub fn open_batch(&self) -> u64 {
            self.seals + 1
        }

        /// Whether no reader can hold anything retired in batch `number` (see
        /// [`Self::open_batch`]) or earlier.
        pub fn is_safe(&self, number: u64) -> bool {
            self.safe.load(Ordering::Acquire) >= number
        }

        /// Drops the sealed batches no reader can hold any more, handing their values to
        /// `take`.
        pub fn reclaim_with(&mut self, mut take: impl FnMut(V)) {
            let safe = self.safe.load(Ordering::Acquire);
            while self.sealed.front().is_some_and(|&(number, _)| number <= safe) {
                let (_, mut batch) = self.sealed.pop_front().expect("checked above");
                for retired in batch.drain(..) {
                    match retired {
                        Retired::Garbage(garbage) => drop(garbage),
                        Retired::Value(value) => take(value),
                    }
                }
                // Keep a usual batch's allocation, not a mass removal's.
                const SPARE_MAX: usize = 1024;
                if batch.capacity() > self.spare.capacity() && batch.capacity() <= SPARE_MAX {
                    self.spare = batch;
                }
            }
        }
    }

    impl<V: Send + 'static> Drop for Reclaimer<V> {
        fn drop(&mut self) {
            // Readers may still hold some of it: leave it to the epoch.
            let mut rest = std::mem::take(&mut self.batch);
            rest.extend(self.sealed.drain(..).flat_map(|(_, batch)| batch));
            if !rest.is_empty() {
                ce::pin().defer(move || drop(rest));
            }
        }
    }

    /// A published heap value.
    pub struct Published<T>(Atomic<T>);

    impl<T: Send + Sync + 'static> Published<T> {
        /// Publishes `value`.
        pub fn new(value: T) -> Self {
            Self(Atomic::new(value))
        }

        /// The current value, alive while both the guard and the cell are.
        pub fn load<'g>(&'g self, guard: &'g Guard) -> &'g T {
            let shared = self.0.load(Ordering::Acquire, &guard.0);
            // SAFETY: the pointer is never null (set in `new`, swapped for non-null values in
            // `replace`). The value is freed either by a reclaimer, once every guard that
            // could have loaded it is gone (it outlives the guard's `'g`), or by the cell's
            // drop, which the borrow of `self` for `'g` rules out while the reference lives.
            unsafe { shared.deref() }
        }

        /// Publishes `value` and retires the old one to `reclaimer` (the caller's). Any thread
        /// may replace: the swap hands each old value to exactly one caller.
        pub fn replace<V: Send + 'static>(&self, value: T, reclaimer: &mut Reclaimer<V>) {
            // SAFETY (unprotected): nothing is dereferenced under the unprotected guard; the
            // swap only returns the pointer it took out of the cell.
            let old =
                self.0.swap(Owned::new(value), Ordering::AcqRel, unsafe { ce::unprotected() });
            // SAFETY: the swap unlinked `old` (no later `load` returns it) and gave it to this
            // call alone, so it is owned once; it came from `Owned` and is non-null. The
            // reclaimer frees it only after readers that may have loaded it unpin.
            let old = unsafe { old.into_owned() }.into_box();
            reclaimer.retire(old);
        }
    }

    impl<T> Drop for Published<T> {
        fn drop(&mut self) {
            // SAFETY: `&mut self` means no reader can be using the cell any more, and the
            // pointer came from `Owned` and is non-null.
            unsafe {
                let current = self.0.load(Ordering::Relaxed, ce::unprotected());
                drop(current.into_owned());
            }
        }
    }
}

#[cfg(loom)]
mod imp {
    use loom::sync::atomic::{AtomicPtr, Ordering};

    use super::Garbage;

    /// Under loom nothing is reclaimed before the reclaimer drops, so a guard is empty.
    pub struct Guard;

    /// Pins nothing (see [`Guard`]).
    pub fn pin() -> Guard {
        Guard
    }

    impl Guard {
        /// Nothing to hand over.
        pub fn flush(&self) {}
    }

    /// Keeps every retired value until it drops (the models join their readers first).
    pub struct Reclaimer<V: Send + 'static> {
        kept: Vec<Garbage>,
        values: Vec<V>,
    }

    impl<V: Send + 'static> Default for Reclaimer<V> {
        fn default() -> Self {
            Self { kept: Vec::new(), values: Vec::new() }
        }
    }

    impl<V: Send + 'static> Reclaimer<V> {
        /// Keeps `garbage`.
        pub fn retire(&mut self, garbage: Garbage) {
            self.kept.push(garbage);
        }

        /// Keeps `value`.
        pub fn retire_value(&mut self, value: V) {
            self.values.push(value);
        }

        /// Nothing to seal.
        pub fn seal(&mut self, _guard: &Guard) {}

        /// Batches are not numbered: nothing is ever safe before the reclaimer drops.
        pub fn open_batch(&self) -> u64 {
            0
        }

        /// Never: the models join their readers only at the end.
        pub fn is_safe(&self, _number: u64) -> bool {
            false
        }

        /// Nothing is handed back early.
        pub fn reclaim_with(&mut self, _take: impl FnMut(V)) {}
    }

    /// A published heap value.
    pub struct Published<T> {
        current: AtomicPtr<T>,
    }

    // SAFETY: the cell owns its `T` like a `Box` would; sharing it shares `&T` only.
    unsafe impl<T: Send + Sync> Send for Published<T> {}
    // SAFETY: as above.
    unsafe impl<T: Send + Sync> Sync for Published<T> {}

    impl<T: Send + Sync + 'static> Published<T> {
        /// Publishes `value`.
        pub fn new(value: T) -> Self {
            Self { current: AtomicPtr::new(Box::into_raw(Box::new(value))) }
        }

        /// The current value, alive while both the guard and the cell are.
        pub fn load<'g>(&'g self, _guard: &'g Guard) -> &'g T {
            // SAFETY: non-null; a replaced value is kept by the reclaimer, which the models
            // drop only after their readers are joined.
            unsafe { &*self.current.load(Ordering::Acquire) }
        }

        /// Publishes `value`; the reclaimer keeps the old one.
        pub fn replace<V: Send + 'static>(&self, value: T, reclaimer: &mut Reclaimer<V>) {
            let old = self.current.swap(Box::into_raw(Box::new(value)), Ordering::AcqRel);
            // SAFETY: `old` came from `Box::into_raw` and is unlinked; it is owned once.
            reclaimer.retire(unsafe { Box::from_raw(old) });
        }
    }

    impl<T> Drop for Published<T> {
        fn drop(&mut self) {
            let current = self.current.with_mut(|p| *p);
            // SAFETY: the pointer came from `Box::into_raw` and is freed exactly once.
            drop(unsafe { Box::from_raw(current) });
        }
    }
}

pub use imp::*;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Reclaimer, pin};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A sealed batch waits for a reader pinned before the seal, then is freed by `reclaim`.
    #[test]
    fn a_batch_outlives_earlier_readers_and_is_then_freed() {
        let freed = Arc::new(AtomicUsize::new(0));
        let mut reclaimer = Reclaimer::<()>::default();
        std::thread::scope(|scope| {
            let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
            let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
            let reader = scope.spawn(move || {
                let guard = pin();
                pinned_tx.send(()).unwrap();
                release_rx.recv().unwrap();
                drop(guard);
            });
            pinned_rx.recv().unwrap();
            reclaimer.retire(Box::new(Counted(freed.clone())));
            reclaimer.seal(&pin());
            for _ in 0..1000 {
                pin().flush();
                reclaimer.reclaim_with(drop);
            }
            assert_eq!(freed.load(Ordering::Relaxed), 0, "freed under a pinned reader");
            release_tx.send(()).unwrap();
            reader.join().unwrap();
        });
        // Other tests' threads pin too, and a loaded machine may keep one of them pinned
        // off-core for a while: wait (bounded) rather than count on a number of tries.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while freed.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < deadline {
            pin().flush();
            reclaimer.reclaim_with(drop);
            std::thread::yield_now();
        }
        assert_eq!(freed.load(Ordering::Relaxed), 1);
    }
}
