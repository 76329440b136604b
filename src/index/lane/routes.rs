//! [`Routes`]: which lane applies each worker's events, kept to the workers that are live.
//!
//! A worker's events must all go to one lane, in order, so its route may only change when none
//! of its events can be in flight. A producer looks its route up under the map's read lock and
//! counts itself as sending to that lane before it lets the lock go, until its event is
//! enqueued (so it never holds the lock while it waits for room: a new worker's write request
//! would queue every other producer behind one full lane). A lane drops the routes of workers
//! it no longer knows (removed, cleared by a restart, or never admitted: rejected first events,
//! events for unknown workers) only while it holds the write lock, nobody but the caller itself
//! is sending to it and its queue is empty: then no event for them is queued or being queued. New workers go to the
//! lane with the fewest routes, and dropping routes gives that lane its room back.

use std::collections::HashMap;

use crate::event::Worker;
use crate::sync::{AtomicUsize, Mutex, Ordering, RwLock};

/// See the [module docs](self).
pub(crate) struct Routes {
    map: RwLock<HashMap<Worker, usize, ahash::RandomState>>,
    /// Routes to each lane.
    load: Mutex<Vec<usize>>,
    /// Producers sending to each lane (counted under the read lock, see the module docs).
    sending: Vec<AtomicUsize>,
}

/// Counts a producer as sending to a lane until dropped (also when the send panics).
struct Sending<'a>(&'a AtomicUsize);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Routes {
    pub(crate) fn new(lanes: usize) -> Self {
        Self {
            map: RwLock::new(HashMap::default()),
            load: Mutex::new(vec![0; lanes]),
            sending: (0..lanes).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Runs `send` with the lane of `worker` (placing a new worker on the least loaded lane),
    /// holding the route until `send` returns: `send` enqueues the worker's event.
    pub(crate) fn with_lane<R>(&self, worker: Worker, send: impl FnOnce(usize) -> R) -> R {
        loop {
            {
                let map = self.map.read();
                if let Some(&lane) = map.get(&worker) {
                    let counter = &self.sending[lane % self.sending.len()];
                    counter.fetch_add(1, Ordering::SeqCst);
                    let _sending = Sending(counter);
                    drop(map);
                    return send(lane);
                }
            }
            let mut map = self.map.write();
            map.entry(worker).or_insert_with(|| {
                let mut load = self.load.lock();
                let lane = (0..load.len()).min_by_key(|&lane| load[lane]).unwrap_or(0);
                load[lane] += 1;
                lane
            });
            // Looked up again under the read lock: the lane may drop the route in between if
            // it does not know the worker yet (then it is placed again).
        }
    }

    /// The lane of `worker`, if it has a route (a worker without one is unknown everywhere,
    /// with no event on its way).
    pub(crate) fn lane(&self, worker: Worker) -> Option<usize> {
        self.map.read().get(&worker).copied()
    }

    /// Lane side: drops the routes to `lane` of `gone` (workers the lane does not know), if no
    /// producer but the caller's own `own_sends` is sending to `lane` and `queued()` (the
    /// lane's queue length) is zero. Returns whether it did; if not, the lane tries again when
    /// next idle.
    pub(crate) fn try_drop(
        &self,
        lane: usize,
        gone: impl Iterator<Item = Worker>,
        queued: &dyn Fn() -> usize,
        own_sends: usize,
    ) -> bool {
        let Some(mut map) = self.map.try_write() else { return false };
        // Under the write lock no producer starts sending: the count only falls.
        if self.sending[lane % self.sending.len()].load(Ordering::SeqCst) > own_sends
            || queued() > 0
        {
            return false;
        }
        let mut load = self.load.lock();
        for worker in gone {
            if map.get(&worker) == Some(&lane) {
                map.remove(&worker);
                load[lane] -= 1;
            }
        }
        true
    }

    /// How many routes there are, and to each lane.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn counts(&self) -> (usize, Vec<usize>) {
        (self.map.read().len(), self.load.lock().clone())
    }
}
