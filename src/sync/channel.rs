//! The bounded multi-producer, single-consumer channels the lane pool runs on.
//!
//! A busy lane takes its whole queue at once ([`Receiver::take_all`]) by swapping it with the
//! batch buffer it has just emptied. The two buffers keep their capacity and pass back and
//! forth between the producers and the lane, so a batch allocates nothing, and the lane never
//! frees a buffer a producer grew. `flume`'s `drain`, used before, left an empty queue behind:
//! producers regrew it from nothing after every batch, and the lane freed the old buffer. With
//! glibc that free takes the producer's arena lock, and on two cores the lane slept whenever
//! the producer had been preempted holding it (`perf record -e sched:sched_switch`: waits of
//! milliseconds in `drop_in_place<RawVec<Envelope<…>>>`).
//!
//! Built on [`GateMutex`] and [`GateCondvar`], so under `cfg(loom)` the models see every send
//! and receive of the real channel. A condition variable is signalled only when someone waits
//! on it (a flag or count under the lock says so): a send to a lane that is working is a lock,
//! a push and an unlock.

use std::collections::VecDeque;
use std::mem;

use super::{Arc, GateCondvar, GateMutex};

/// A channel holding at most `capacity` messages (at least one).
pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: GateMutex::new(State {
            queue: VecDeque::new(),
            sender_alive: true,
            receiver_alive: true,
            receiver_waiting: false,
            senders_waiting: 0,
        }),
        filled: GateCondvar::new(),
        emptied: GateCondvar::new(),
        capacity: capacity.max(1),
    });
    (Sender(shared.clone()), Receiver(shared))
}

/// The sending half: one per channel, shared by reference among the threads that send.
pub struct Sender<T>(Arc<Shared<T>>);

/// The receiving half.
pub struct Receiver<T>(Arc<Shared<T>>);

/// The receiver is gone; the message comes back.
#[derive(Debug)]
pub struct SendError<T>(pub T);

/// The sender is gone and the queue is empty.
#[derive(Debug)]
pub struct RecvError;

/// Why [`Sender::try_send`] did not enqueue; the message comes back.
#[derive(Debug)]
pub enum TrySendError<T> {
    /// The queue is full.
    Full(T),
    /// The receiver is gone.
    Disconnected(T),
}

struct Shared<T> {
    state: GateMutex<State<T>>,
    /// The receiver waits here for a message or for the sender to go.
    filled: GateCondvar,
    /// Senders wait here for room or for the receiver to go.
    emptied: GateCondvar,
    capacity: usize,
}

struct State<T> {
    queue: VecDeque<T>,
    sender_alive: bool,
    receiver_alive: bool,
    /// The receiver is asleep on `filled` (or about to be: it set this under the lock), and no
    /// sender has woken it since.
    receiver_waiting: bool,
    /// Senders asleep on `emptied`.
    senders_waiting: usize,
}

/// The held lock of a channel's state.
#[cfg(not(loom))]
type Locked<'a, T> = std::sync::MutexGuard<'a, State<T>>;
#[cfg(loom)]
type Locked<'a, T> = loom::sync::MutexGuard<'a, State<T>>;

impl<T> Shared<T> {
    /// The lock; nothing panics while holding it, so a poisoned one is still consistent.
    fn lock(&self) -> Locked<'_, T> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sleeps on `condvar`, giving the lock back meanwhile.
    fn wait<'a>(&self, condvar: &GateCondvar, guard: Locked<'a, T>) -> Locked<'a, T> {
        condvar.wait(guard).unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<T> Sender<T> {
    /// Sends, waiting while the queue is full; fails only if the receiver is gone.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        let mut state = self.0.lock();
        loop {
            if !state.receiver_alive {
                return Err(SendError(value));
            }
            if state.queue.len() < self.0.capacity {
                self.push(state, value);
                return Ok(());
            }
            state.senders_waiting += 1;
            state = self.0.wait(&self.0.emptied, state);
            state.senders_waiting -= 1;
        }
    }

    /// Sends if there is room; never waits.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        let state = self.0.lock();
        if !state.receiver_alive {
            return Err(TrySendError::Disconnected(value));
        }
        if state.queue.len() >= self.0.capacity {
            return Err(TrySendError::Full(value));
        }
        self.push(state, value);
        Ok(())
    }

    /// Enqueues `value` (there is room) and wakes the receiver if it sleeps.
    fn push(&self, mut state: Locked<'_, T>, value: T) {
        state.queue.push_back(value);
        self.wake_receiver(state);
    }

    /// Wakes the receiver if it sleeps, after the change made under `state`. Waking clears the
    /// flag: the receiver rechecks the queue before it sleeps again, so the sends that come
    /// before it runs need no wakeup of their own (each was a system call: up to one send in 16
    /// when a producer outpaces a lane that keeps going idle).
    fn wake_receiver(&self, mut state: Locked<'_, T>) {
        let wake = mem::take(&mut state.receiver_waiting);
        drop(state);
        if wake {
            self.0.filled.notify_one();
        }
    }

    /// Messages queued now.
    pub fn len(&self) -> usize {
        self.0.lock().queue.len()
    }

    /// Whether the receiver is gone.
    pub fn is_disconnected(&self) -> bool {
        !self.0.lock().receiver_alive
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.sender_alive = false;
        self.wake_receiver(state);
    }
}

impl<T> Receiver<T> {
    /// Receives, waiting while the queue is empty; fails once the sender is gone and the queue
    /// is empty.
    pub fn recv(&self) -> Result<T, RecvError> {
        let mut state = self.0.lock();
        loop {
            if let Some(value) = state.queue.pop_front() {
                self.made_room(state);
                return Ok(value);
            }
            if !state.sender_alive {
                return Err(RecvError);
            }
            state.receiver_waiting = true;
            state = self.0.wait(&self.0.filled, state);
            state.receiver_waiting = false;
        }
    }

    /// Moves every message queued now to the end of `batch`. When `batch` is empty, as a lane's
    /// is when it takes the next batch, the two swap buffers, so the queue goes on with
    /// `batch`'s capacity (see the [module docs](self)).
    pub fn take_all(&self, batch: &mut VecDeque<T>) {
        let mut state = self.0.lock();
        if state.queue.is_empty() {
            return;
        }
        if batch.is_empty() {
            mem::swap(&mut state.queue, batch);
        } else {
            batch.append(&mut state.queue);
        }
        self.made_room(state);
    }

    /// Gives back the memory of the queue's buffer beyond room for `keep` messages, if it is
    /// empty now (a quiet lane keeps little while it waits).
    pub fn shrink_if_empty(&self, keep: usize) {
        let mut state = self.0.lock();
        if state.queue.is_empty() && state.queue.capacity() > keep {
            let old = mem::replace(&mut state.queue, VecDeque::with_capacity(keep));
            drop(state);
            drop(old);
        }
    }

    /// Wakes senders waiting for room, if any, after a take.
    fn made_room(&self, state: Locked<'_, T>) {
        let wake = state.senders_waiting > 0;
        drop(state);
        if wake {
            self.0.emptied.notify_all();
        }
    }

    /// Messages queued now.
    pub fn len(&self) -> usize {
        self.0.lock().queue.len()
    }
}

impl<T> Drop for Receiver<T> {
    /// Drops what is still queued (outside the lock): a task's reply channel closes with it.
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.receiver_alive = false;
        let queued = mem::take(&mut state.queue);
        let wake = state.senders_waiting > 0;
        drop(state);
        if wake {
            self.0.emptied.notify_all();
        }
        drop(queued);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn take_all_swaps_buffers_so_neither_is_reallocated() {
        let (sender, receiver) = bounded(8);
        let mut batch = VecDeque::new();
        for round in 0..5u32 {
            for value in 0..8 {
                sender.try_send(round * 8 + value).unwrap();
            }
            assert!(matches!(sender.try_send(99), Err(TrySendError::Full(99))));
            receiver.take_all(&mut batch);
            let queue_capacity = receiver.0.lock().queue.capacity();
            if round > 0 {
                // Both buffers grew in the first two rounds; since, they only change hands.
                assert!(batch.capacity() >= 8 && queue_capacity >= 8, "round {round}");
            }
            let taken: Vec<u32> = batch.drain(..).collect();
            assert_eq!(taken, (round * 8..round * 8 + 8).collect::<Vec<_>>());
            assert_eq!(receiver.len(), 0);
        }
    }

    #[test]
    fn take_all_keeps_order_behind_what_the_batch_still_holds() {
        let (sender, receiver) = bounded(4);
        let mut batch = VecDeque::from([1, 2]);
        sender.try_send(3).unwrap();
        sender.try_send(4).unwrap();
        receiver.take_all(&mut batch);
        assert_eq!(Vec::from(batch), [1, 2, 3, 4]);
        assert_eq!(receiver.len(), 0);
    }

    #[test]
    fn a_dropped_sender_ends_recv_after_the_queue_and_a_dropped_receiver_fails_sends() {
        let (sender, receiver) = bounded(2);
        sender.send(1).unwrap();
        drop(sender);
        assert_eq!(receiver.recv().unwrap(), 1);
        assert!(receiver.recv().is_err());

        let (sender, receiver) = bounded::<u32>(1);
        drop(receiver);
        assert!(sender.is_disconnected());
        assert!(matches!(sender.try_send(3), Err(TrySendError::Disconnected(3))));
        assert!(sender.send(4).is_err());
    }

    #[test]
    fn only_the_first_send_to_a_sleeping_receiver_wakes_it() {
        let (sender, receiver) = bounded(4);
        // As a receiver going to sleep leaves it (see `recv`).
        receiver.0.lock().receiver_waiting = true;
        sender.try_send(1).unwrap();
        // Woken: the sends until it runs again find nobody to wake.
        assert!(!receiver.0.lock().receiver_waiting);
        sender.try_send(2).unwrap();
        assert_eq!((receiver.recv().unwrap(), receiver.recv().unwrap()), (1, 2));
        receiver.0.lock().receiver_waiting = true;
        drop(sender);
        assert!(!receiver.0.lock().receiver_waiting, "the sender's drop wakes it too");
        assert!(receiver.recv().is_err());
    }

    #[test]
    fn a_blocked_sender_and_a_sleeping_receiver_are_woken() {
        let (sender, receiver) = bounded(1);
        let sending = std::thread::spawn(move || {
            for value in 0..100 {
                sender.send(value).unwrap();
            }
        });
        let mut got = Vec::new();
        let mut batch = VecDeque::new();
        while got.len() < 100 {
            if got.len() % 2 == 0 {
                got.push(receiver.recv().unwrap());
            } else {
                receiver.take_all(&mut batch);
                got.extend(batch.drain(..));
            }
        }
        sending.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert!(receiver.recv().is_err());
    }

    #[test]
    fn dropping_the_receiver_drops_what_is_queued() {
        let value = std::sync::Arc::new(());
        let (sender, receiver) = bounded(4);
        sender.try_send(value.clone()).unwrap();
        sender.try_send(value.clone()).unwrap();
        drop(receiver);
        assert_eq!(std::sync::Arc::strong_count(&value), 1);
        drop(sender);
    }

    #[test]
    fn an_idle_queue_shrinks() {
        let (sender, receiver) = bounded(1024);
        for value in 0..1000 {
            sender.try_send(value).unwrap();
        }
        let mut batch = VecDeque::new();
        receiver.take_all(&mut batch);
        batch.clear();
        receiver.take_all(&mut batch);
        // The queue now has the emptied batch's buffer (grown to 1000) back.
        receiver.shrink_if_empty(16);
        sender.try_send(1).unwrap();
        receiver.take_all(&mut batch);
        assert!(batch.capacity() < 1000, "the queue was shrunk before the last send");
    }
}
