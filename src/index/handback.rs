//! [`Handback`]: values a lane thread hands back for producer threads to drop, so that memory a
//! producer allocated is freed where it was allocated (see `spent.rs` for why that matters).
//!
//! Two buffers of fixed capacity take turns: the lane moves values into `handed`; a producer
//! swaps `handed` with the empty `emptied` and drops the values there, holding only the
//! producers' lock, so the lane never waits while values are dropped. Nothing is allocated after
//! construction. Values that find `handed` full are dropped on the lane.

use std::mem;

use crate::sync::{AtomicBool, Mutex, Ordering};

/// See the [module docs](self).
pub struct Handback<T> {
    /// A hint that `handed` is not empty, so producers skip the locks when it is: written only
    /// under `handed`'s lock, so it is exact whenever that lock is free.
    waiting: AtomicBool,
    handed: Mutex<Vec<T>>,
    emptied: Mutex<Vec<T>>,
    capacity: usize,
}

impl<T> Handback<T> {
    /// Room for `capacity` values waiting to be dropped.
    pub fn new(capacity: usize) -> Self {
        Self {
            waiting: AtomicBool::new(false),
            handed: Mutex::new(Vec::with_capacity(capacity)),
            emptied: Mutex::new(Vec::with_capacity(capacity)),
            capacity,
        }
    }

    /// Lane side: hands over the values in `values` (left empty); those that do not fit are
    /// dropped here.
    pub fn hand_over(&self, values: &mut Vec<T>) {
        if values.is_empty() {
            return;
        }
        let mut handed = self.handed.lock();
        let fits = values.len().min(self.capacity - handed.len());
        handed.extend(values.drain(..fits));
        self.waiting.store(!handed.is_empty(), Ordering::Relaxed);
        drop(handed);
        values.clear();
    }

    /// Producer side: drops what was handed over, if anything. One producer at a time; the
    /// others go on at once (the next call takes what they would have).
    pub fn drop_handed_over(&self) {
        if !self.waiting.load(Ordering::Relaxed) {
            return;
        }
        let Some(mut emptied) = self.emptied.try_lock() else { return };
        {
            let mut handed = self.handed.lock();
            mem::swap(&mut *handed, &mut *emptied);
            self.waiting.store(false, Ordering::Relaxed);
        }
        // Outside the lane's lock.
        emptied.clear();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn handed_values_are_dropped_by_the_producer_and_the_excess_by_the_lane() {
        let value = Arc::new(());
        let handback = Handback::new(2);
        let mut values = vec![value.clone(), value.clone(), value.clone()];
        handback.hand_over(&mut values);
        assert!(values.is_empty());
        assert_eq!(Arc::strong_count(&value), 3, "two handed over, the third dropped at once");
        handback.drop_handed_over();
        assert_eq!(Arc::strong_count(&value), 1);
        // The buffers keep their capacity: the next turn fits two again.
        let mut values = vec![value.clone(), value.clone()];
        handback.hand_over(&mut values);
        assert_eq!(Arc::strong_count(&value), 3);
        drop(handback);
        assert_eq!(Arc::strong_count(&value), 1, "dropping the handback drops what it holds");
    }
}
