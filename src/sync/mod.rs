//! The one place that imports atomics, locks, `Arc`, channels and threads.
//!
//! Normally these are `std` and `parking_lot`; under `cfg(loom)` they are loom's, so the loom
//! models in `tests/loom.rs` and `tests/loom_sequences.rs` see every synchronization point of our
//! own protocols, the lanes' channel included (it is our own, built on the [`Gate`]'s mutex and
//! condition variable). Nothing else in the crate imports `std::sync`, `std::thread` or a
//! channel directly.
//!
//! ## Layout
//!
//! This file is the shim itself (atomics, locks, `Arc`, `OnceLock`, thread spawning, and the
//! [`Gate`] producers wait at); `channel.rs` the lanes' bounded channels; `epoch.rs` the
//! epoch-based publication that lets queries read a lane's runs without locks; `backlog.rs`
//! work queued for a background drainer that producers wake only when it sleeps.

pub(crate) mod backlog;
pub(crate) mod channel;
pub mod epoch;

#[cfg(not(loom))]
#[allow(unused_imports, dead_code)]
mod imp {
    pub use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
    pub use std::sync::{Arc, OnceLock};
    pub use std::thread::JoinHandle;

    /// A reader-writer lock (`parking_lot`, so guards are not poisoned).
    pub type RwLock<T> = parking_lot::RwLock<T>;
    /// A mutex (`parking_lot`, so guards are not poisoned).
    pub type Mutex<T> = parking_lot::Mutex<T>;
    /// The mutex and condition variable behind [`super::Gate`].
    pub use std::sync::{Condvar as GateCondvar, Mutex as GateMutex};

    /// Spawns a named OS thread; fails if the OS will not start one (limits, memory).
    pub fn spawn<F>(name: String, body: F) -> std::io::Result<JoinHandle<()>>
    where
        F: FnOnce() + Send + 'static,
    {
        std::thread::Builder::new().name(name).spawn(body)
    }

    /// Pauses the calling thread for about `duration`.
    pub fn sleep(duration: std::time::Duration) {
        std::thread::sleep(duration)
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
    /// Loom has no `OnceLock`: std's, which loom does not see. Only the tiered index's lazy start
    /// of a lower tier uses it, which no loom model covers.
    pub use std::sync::OnceLock;

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
        /// Exclusive access if no one holds the lock now.
        pub fn try_write(&self) -> Option<loom::sync::RwLockWriteGuard<'_, T>> {
            self.0.try_write().ok()
        }
    }

    /// The mutex and condition variable behind [`super::Gate`].
    pub use loom::sync::{Condvar as GateCondvar, Mutex as GateMutex};

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
        /// Exclusive access if no one else has it.
        pub fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
            self.0.try_lock().ok()
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

    /// A pause is a yield to loom: time is not modelled.
    pub fn sleep(_duration: std::time::Duration) {
        loom::thread::yield_now()
    }

    /// Spawns a loom thread (names are not modelled; loom never fails to start one).
    pub fn spawn<F>(_name: String, body: F) -> std::io::Result<JoinHandle<()>>
    where
        F: FnOnce() + Send + 'static,
    {
        Ok(loom::thread::spawn(body))
    }
}

#[allow(unused_imports)]
pub(crate) use imp::*;

/// Where threads wait for a condition that another thread makes true: waiters check it under the
/// gate's lock, and whoever may have made it true calls [`Gate::open`] afterwards, so no wakeup
/// is lost between a waiter's check and its sleep.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    lock: GateMutex<()>,
    opened: GateCondvar,
}

impl Gate {
    /// Returns once `ready()` is true, sleeping until the next [`Gate::open`] whenever it is not.
    pub(crate) fn wait_until(&self, mut ready: impl FnMut() -> bool) {
        let mut guard = self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while !ready() {
            guard = self.opened.wait(guard).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Wakes every waiter to check its condition again.
    pub(crate) fn open(&self) {
        // Taking the lock orders this after any waiter's check that is not yet asleep.
        drop(self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        self.opened.notify_all();
    }
}
