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
    pub use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
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
}

#[cfg(loom)]
#[allow(unused_imports, dead_code)]
mod imp {
    pub use loom::sync::Arc;
    pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
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
