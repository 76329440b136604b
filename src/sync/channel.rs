//! The bounded multi-producer channels the lane pool runs on: `flume` normally, and under
//! `cfg(loom)` a small channel built on loom's mutex and condition variable, with the subset of
//! `flume`'s API the pool uses, so the loom models see every send and receive.

#[cfg(not(loom))]
pub use flume::{Receiver, Sender, TrySendError, bounded};

#[cfg(loom)]
pub use loom_channel::*;

/// A bounded channel built on loom's mutex and condvar, with `flume`'s API subset we use.
#[cfg(loom)]
mod loom_channel {
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
            state: Mutex::new(State { queue: VecDeque::new(), senders: 1, receiver_alive: true }),
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

        /// Messages queued now.
        pub fn len(&self) -> usize {
            self.0.state.lock().unwrap().queue.len()
        }

        /// Whether the receiver is gone.
        pub fn is_disconnected(&self) -> bool {
            !self.0.state.lock().unwrap().receiver_alive
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

        /// Messages queued now.
        pub fn len(&self) -> usize {
            self.0.state.lock().unwrap().queue.len()
        }

        /// Takes every message queued now.
        pub fn drain(&self) -> std::collections::vec_deque::IntoIter<T> {
            let queue = std::mem::take(&mut self.0.state.lock().unwrap().queue);
            if !queue.is_empty() {
                self.0.changed.notify_all();
            }
            queue.into_iter()
        }
    }

    impl<T> Drop for Receiver<T> {
        fn drop(&mut self) {
            self.0.state.lock().unwrap().receiver_alive = false;
            self.0.changed.notify_all();
        }
    }
}
