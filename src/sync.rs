//! The one place that imports atomics, locks, `Arc`, channels and threads.
//!
//! Normally these are `std`, `parking_lot` and `flume`; under `cfg(loom)` they are loom's (and a
//! small loom-built channel), so the loom models in `tests/loom.rs` see every synchronization
//! point of our own protocols. Nothing else in the crate imports `std::sync`, `std::thread` or a
//! channel directly.

#[cfg(not(loom))]
#[allow(unused_imports, dead_code)]
mod imp {
    pub use std::sync::Arc;
    pub use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
    pub use std::thread::JoinHandle;

    /// A reader-writer lock (`parking_lot`, so guards are not poisoned).
    pub type RwLock<T> = parking_lot::RwLock<T>;
    /// A mutex (`parking_lot`, so guards are not poisoned).
    pub type Mutex<T> = parking_lot::Mutex<T>;

    /// Spawns a named OS thread.
    pub fn spawn<F>(name: String, body: F) -> JoinHandle<()>
    where
        F: FnOnce() + Send + 'static,
    {
        std::thread::Builder::new()
            .name(name)
            .spawn(body)
            .expect("failed to spawn a kvroute thread")
    }

    /// Bounded multi-producer channels (`flume`).
    pub mod channel {
        pub use flume::{Receiver, Sender, TrySendError, bounded};
    }

    /// An immutable shared string (request ids): one allocation, clones bump a count.
    pub fn shared_str(value: &str) -> Arc<str> {
        Arc::from(value)
    }

    /// An immutable shared slice: one allocation, clones bump a count.
    pub fn shared_slice<T: Copy>(value: &[T]) -> Arc<[T]> {
        Arc::from(value)
    }
}

#[cfg(loom)]
#[allow(unused_imports, dead_code)]
mod imp {
    pub use loom::sync::Arc;
    pub use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
    pub use loom::thread::JoinHandle;

    /// Loom's lock with `parking_lot`'s signature: `read`/`write` return guards directly.
    #[derive(Debug, Default)]
    pub struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        /// A new lock around `value`.
        pub fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }
        /// Shared access.
        pub fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0.read().expect("loom lock poisoned")
        }
        /// Exclusive access.
        pub fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0.write().expect("loom lock poisoned")
        }
        /// Shared access if no writer holds the lock now.
        pub fn try_read(&self) -> Option<loom::sync::RwLockReadGuard<'_, T>> {
            self.0.try_read().ok()
        }
    }

    /// Loom's mutex with `parking_lot`'s signature.
    #[derive(Debug, Default)]
    pub struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        /// A new mutex around `value`.
        pub fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }
        /// Exclusive access.
        pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().expect("loom mutex poisoned")
        }
    }

    /// An immutable shared string (request ids), as a loom-tracked `Arc`.
    pub fn shared_str(value: &str) -> Arc<str> {
        Arc::from_std(std::sync::Arc::from(value))
    }

    /// An immutable shared slice (loom's `Arc` around std's).
    pub fn shared_slice<T: Copy>(value: &[T]) -> Arc<[T]> {
        Arc::from_std(std::sync::Arc::from(value))
    }

    /// Spawns a loom thread (names are not modelled).
    pub fn spawn<F>(_name: String, body: F) -> JoinHandle<()>
    where
        F: FnOnce() + Send + 'static,
    {
        loom::thread::spawn(body)
    }

    /// A bounded channel built on loom's mutex and condvar, with `flume`'s API subset we use.
    pub mod channel {
        use std::collections::VecDeque;

        use loom::sync::{Arc, Condvar, Mutex};

        struct State<T> {
            queue: VecDeque<T>,
            senders: usize,
            receiver_alive: bool,
        }

        struct Shared<T> {
            state: Mutex<State<T>>,
            changed: Condvar,
            capacity: usize,
        }

        /// The sending half.
        pub struct Sender<T>(Arc<Shared<T>>);
        /// The receiving half.
        pub struct Receiver<T>(Arc<Shared<T>>);
        /// The receiver is gone; the message comes back.
        #[derive(Debug)]
        pub struct SendError<T>(pub T);
        /// Every sender is gone and the queue is empty.
        #[derive(Debug)]
        pub struct RecvError;
        /// Why `try_send` failed.
        #[derive(Debug)]
        pub enum TrySendError<T> {
            /// The queue is full.
            Full(T),
            /// The receiver is gone.
            Disconnected(T),
        }

        /// A channel holding at most `capacity` messages.
        pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
            let shared = Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    senders: 1,
                    receiver_alive: true,
                }),
                changed: Condvar::new(),
                capacity: capacity.max(1),
            });
            (Sender(shared.clone()), Receiver(shared))
        }

        impl<T> Sender<T> {
            /// Sends, waiting while the queue is full.
            pub fn send(&self, value: T) -> Result<(), SendError<T>> {
                let mut state = self.0.state.lock().unwrap();
                loop {
                    if !state.receiver_alive {
                        return Err(SendError(value));
                    }
                    if state.queue.len() < self.0.capacity {
                        state.queue.push_back(value);
                        self.0.changed.notify_all();
                        return Ok(());
                    }
                    state = self.0.changed.wait(state).unwrap();
                }
            }

            /// Sends if there is room.
            pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
                let mut state = self.0.state.lock().unwrap();
                if !state.receiver_alive {
                    return Err(TrySendError::Disconnected(value));
                }
                if state.queue.len() >= self.0.capacity {
                    return Err(TrySendError::Full(value));
                }
                state.queue.push_back(value);
                self.0.changed.notify_all();
                Ok(())
            }
        }

        impl<T> Clone for Sender<T> {
            fn clone(&self) -> Self {
                self.0.state.lock().unwrap().senders += 1;
                Sender(self.0.clone())
            }
        }

        impl<T> Drop for Sender<T> {
            fn drop(&mut self) {
                self.0.state.lock().unwrap().senders -= 1;
                self.0.changed.notify_all();
            }
        }

        impl<T> Receiver<T> {
            /// Receives, waiting while the queue is empty and a sender remains.
            pub fn recv(&self) -> Result<T, RecvError> {
                let mut state = self.0.state.lock().unwrap();
                loop {
                    if let Some(value) = state.queue.pop_front() {
                        self.0.changed.notify_all();
                        return Ok(value);
                    }
                    if state.senders == 0 {
                        return Err(RecvError);
                    }
                    state = self.0.changed.wait(state).unwrap();
                }
            }

            /// Receives if a message is queued.
            pub fn try_recv(&self) -> Result<T, RecvError> {
                let value = self.0.state.lock().unwrap().queue.pop_front();
                if value.is_some() {
                    self.0.changed.notify_all();
                }
                value.ok_or(RecvError)
            }
        }

        impl<T> Drop for Receiver<T> {
            fn drop(&mut self) {
                self.0.state.lock().unwrap().receiver_alive = false;
                self.0.changed.notify_all();
            }
        }
    }
}

#[allow(unused_imports)]
pub(crate) use imp::*;

/// Epoch-based publication of a heap value that readers use without locks.
///
/// Writers replace the value (under a lock of their own); readers [`pin`] once per operation and
/// [`epoch::Published::load`] it. Normally reclamation is `crossbeam-epoch`'s; under loom the
/// replaced values are kept until the cell drops, so loom sees our own orderings only.
pub mod epoch {
    #[cfg(not(loom))]
    mod imp {
        use crossbeam_epoch::{self as ce, Atomic, Owned};
        use std::sync::atomic::Ordering;

        /// Keeps every value loaded through it alive while it lives.
        pub struct Guard(ce::Guard);

        /// Pins the current thread; values loaded under the guard stay alive until it drops.
        pub fn pin() -> Guard {
            Guard(ce::pin())
        }

        impl Guard {
            /// Runs `f` once no thread pinned now can still be reading what it releases.
            pub fn defer(&self, f: impl FnOnce() + Send + 'static) {
                self.0.defer(f);
            }

            /// Hands this thread's deferred releases to the global queue (a writer that defers
            /// in bursts calls it when it goes idle, so nothing waits long).
            pub fn flush(&self) {
                self.0.flush();
            }
        }

        /// A published heap value.
        pub struct Published<T>(Atomic<T>);

        impl<T: Send + Sync> Published<T> {
            /// Publishes `value`.
            pub fn new(value: T) -> Self {
                Self(Atomic::new(value))
            }

            /// The current value.
            pub fn load<'g>(&self, guard: &'g Guard) -> &'g T {
                let shared = self.0.load(Ordering::Acquire, &guard.0);
                // SAFETY: the pointer is never null (set in `new`, swapped for non-null values in
                // `replace`), and a replaced value is destroyed only after every guard that could
                // have loaded it is gone (`defer_destroy` below), so it outlives `'g`.
                unsafe { shared.deref() }
            }

            /// Publishes `value` and retires the old one through the writer's pin: it is freed
            /// once no reader pinned before the swap can still hold it.
            pub fn replace(&self, value: T, guard: &Guard) {
                let old = self.0.swap(Owned::new(value), Ordering::AcqRel, &guard.0);
                // SAFETY: `old` is unlinked (no later `load` can return it) and was allocated by
                // `Owned`; readers that loaded it are pinned, so destruction waits for them.
                unsafe { guard.0.defer_destroy(old) };
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

        /// Under loom nothing is reclaimed before the cell drops, so a guard is empty.
        pub struct Guard;

        /// Pins nothing (see [`Guard`]).
        pub fn pin() -> Guard {
            Guard
        }

        impl Guard {
            /// Under loom the release is skipped (callers keep what readers may hold).
            pub fn defer(&self, f: impl FnOnce() + Send + 'static) {
                drop(f);
            }

            /// Nothing to hand over.
            pub fn flush(&self) {}
        }

        /// A published heap value; replaced values are freed when the cell drops.
        pub struct Published<T> {
            current: AtomicPtr<T>,
            retired: std::sync::Mutex<Vec<*mut T>>,
        }

        // SAFETY: the cell owns its `T`s like a `Box` would; sharing it shares `&T` only.
        unsafe impl<T: Send + Sync> Send for Published<T> {}
        // SAFETY: as above.
        unsafe impl<T: Send + Sync> Sync for Published<T> {}

        impl<T: Send + Sync> Published<T> {
            /// Publishes `value`.
            pub fn new(value: T) -> Self {
                let current = AtomicPtr::new(Box::into_raw(Box::new(value)));
                Self { current, retired: std::sync::Mutex::new(Vec::new()) }
            }

            /// The current value.
            pub fn load<'g>(&self, _guard: &'g Guard) -> &'g T {
                // SAFETY: non-null, and never freed before the cell drops, which `&self` outlives.
                unsafe { &*self.current.load(Ordering::Acquire) }
            }

            /// Publishes `value`; the old one is freed when the cell drops.
            pub fn replace(&self, value: T, _guard: &Guard) {
                let old = self.current.swap(Box::into_raw(Box::new(value)), Ordering::AcqRel);
                self.retired.lock().unwrap().push(old);
            }
        }

        impl<T> Drop for Published<T> {
            fn drop(&mut self) {
                let current = self.current.with_mut(|p| *p);
                for ptr in self.retired.get_mut().unwrap().drain(..).chain([current]) {
                    // SAFETY: each pointer came from `Box::into_raw` and is freed exactly once.
                    drop(unsafe { Box::from_raw(ptr) });
                }
            }
        }
    }

    pub use imp::*;
}
