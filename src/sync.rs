//! The one place that imports atomics, locks, `Arc` and threads.
//!
//! Normally these are `std` (and `parking_lot` for locks); under `cfg(loom)` they are loom's, so
//! the loom models in `tests/loom.rs` see every synchronization point of our own protocols.
//! Nothing else in the crate may import from `std::sync` or `std::thread` directly.

#[cfg(not(loom))]
#[allow(unused_imports)]
mod imp {
    pub use std::sync::Arc;
    pub use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
    pub use std::thread;

    /// A reader-writer lock (`parking_lot`, so guards are not poisoned).
    pub type RwLock<T> = parking_lot::RwLock<T>;
    /// A mutex (`parking_lot`, so guards are not poisoned).
    pub type Mutex<T> = parking_lot::Mutex<T>;

    /// An immutable shared string (request ids): one allocation, clones bump a count.
    pub fn shared_str(value: &str) -> Arc<str> {
        Arc::from(value)
    }
}

#[cfg(loom)]
#[allow(unused_imports, dead_code)]
mod imp {
    pub use loom::sync::Arc;
    pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
    pub use loom::thread;

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
}

#[allow(unused_imports)]
pub(crate) use imp::*;
