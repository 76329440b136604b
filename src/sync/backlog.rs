//! [`Backlog`]: work handed to one background drainer without waking it on every push.
//!
//! A push is a lock, a `Vec::push` and an unlock. The drainer is woken only when it has said,
//! under the same lock, that it is going to sleep: a drainer that polls while work keeps coming
//! costs its producers no system call. Anyone may drain (a flush drains on its caller's
//! thread), so the drainer thread is an optimisation, never a dependency.
//!
//! Built on this module's [`Mutex`] and [`Gate`], so the loom model in `tests/loom.rs` sees
//! every push, take and sleep.

use std::mem;

use super::{Gate, Mutex};

/// Items waiting for a drainer, and the drainer's sleep handshake.
#[derive(Debug)]
pub struct Backlog<T> {
    queue: Mutex<Queue<T>>,
    gate: Gate,
}

#[derive(Debug)]
struct Queue<T> {
    items: Vec<T>,
    /// Items ever pushed: a drainer that saw no change since its last look may go to sleep.
    pushed: u64,
    /// The drainer said it is going to sleep and no push has woken it since.
    drainer_asleep: bool,
    closed: bool,
}

impl<T> Default for Backlog<T> {
    fn default() -> Self {
        let queue = Queue { items: Vec::new(), pushed: 0, drainer_asleep: false, closed: false };
        Self { queue: Mutex::new(queue), gate: Gate::default() }
    }
}

impl<T> Backlog<T> {
    /// Queues `item`; wakes the drainer only if it is asleep. Returns the items now waiting.
    pub fn push(&self, item: T) -> usize {
        let (waiting, wake) = {
            let mut queue = self.queue.lock();
            queue.items.push(item);
            queue.pushed += 1;
            (queue.items.len(), mem::take(&mut queue.drainer_asleep))
        };
        if wake {
            self.gate.open();
        }
        waiting
    }

    /// Moves every waiting item, oldest first, to the end of `into`.
    pub fn take(&self, into: &mut Vec<T>) {
        let mut queue = self.queue.lock();
        if into.is_empty() {
            // Swap rather than copy: the two buffers keep their capacity and pass back and forth.
            mem::swap(into, &mut queue.items);
        } else {
            into.append(&mut queue.items);
        }
    }

    /// Items ever pushed (see [`Backlog::sleep_unless_pushed`]).
    pub fn pushed(&self) -> u64 {
        self.queue.lock().pushed
    }

    /// Sleeps until an item is pushed, unless one was pushed since the count `seen` (from
    /// [`Backlog::pushed`]) or the backlog is closed. Returns false once it is closed.
    pub fn sleep_unless_pushed(&self, seen: u64) -> bool {
        {
            let mut queue = self.queue.lock();
            if queue.closed {
                return false;
            }
            if queue.pushed != seen || !queue.items.is_empty() {
                return true;
            }
            queue.drainer_asleep = true;
        }
        // A push after the flag was set opens the gate after its item is in the queue, and
        // the gate checks the queue under its own lock: the wakeup cannot be lost.
        self.gate.wait_until(|| {
            let queue = self.queue.lock();
            queue.closed || queue.pushed != seen
        });
        !self.queue.lock().closed
    }

    /// Whether [`Backlog::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.queue.lock().closed
    }

    /// Tells the drainer to stop (waking it); pushes are still accepted, for anyone to drain.
    pub fn close(&self) {
        self.queue.lock().closed = true;
        self.gate.open();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_in_push_order_whoever_takes_them() {
        let backlog = Backlog::default();
        assert_eq!(backlog.push(1), 1);
        assert_eq!(backlog.push(2), 2);
        let mut taken = vec![0];
        backlog.take(&mut taken);
        backlog.push(3);
        backlog.take(&mut taken);
        assert_eq!(taken, [0, 1, 2, 3]);
        assert_eq!(backlog.pushed(), 3);
    }

    #[test]
    fn a_sleeping_drainer_wakes_on_a_push_and_on_close() {
        let backlog = std::sync::Arc::new(Backlog::default());
        let seen = backlog.pushed();
        // A push since `seen`: no sleep.
        backlog.push(1);
        assert!(backlog.sleep_unless_pushed(seen));
        let drainer = {
            let backlog = backlog.clone();
            std::thread::spawn(move || {
                let mut taken = Vec::new();
                let mut seen = backlog.pushed();
                while backlog.sleep_unless_pushed(seen) {
                    seen = backlog.pushed();
                    backlog.take(&mut taken);
                }
                backlog.take(&mut taken);
                taken
            })
        };
        for item in 2..50 {
            backlog.push(item);
        }
        backlog.close();
        assert_eq!(drainer.join().unwrap(), (1..50).collect::<Vec<_>>());
    }
}
