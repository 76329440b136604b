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
    /// A hint that `emptied` is not empty, written only under its lock.
    in_hand: AtomicBool,
    handed: Mutex<Vec<T>>,
    emptied: Mutex<Vec<T>>,
    capacity: usize,
}

impl<T> Handback<T> {
    /// Room for `capacity` values waiting to be dropped.
    pub fn new(capacity: usize) -> Self {
        Self {
            waiting: AtomicBool::new(false),
            in_hand: AtomicBool::new(false),
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
        self.drop_some(usize::MAX);
    }

    /// Producer side: drops at most `most` of the values handed over, taking the next batch
    /// the lane handed over once those in hand are gone. A producer that drops a few per call
    /// frees memory as fast as it allocates the next values, so its allocator reuses the same
    /// few blocks from its thread cache, rather than taking a whole batch into its free lists
    /// at once and allocating out of them again. One producer at a time, as above.
    pub fn drop_some(&self, most: usize) {
        if !self.waiting.load(Ordering::Relaxed) && !self.in_hand.load(Ordering::Relaxed) {
            return;
        }
        let Some(mut emptied) = self.emptied.try_lock() else { return };
        if emptied.is_empty() {
            let mut handed = self.handed.lock();
            mem::swap(&mut *handed, &mut *emptied);
            self.waiting.store(false, Ordering::Relaxed);
        }
        // Outside the lane's lock.
        let keep = emptied.len().saturating_sub(most);
        emptied.truncate(keep);
        self.in_hand.store(!emptied.is_empty(), Ordering::Relaxed);
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

    /// A producer dropping a few at a time goes through what it took before taking the lane's
    /// next batch, and everything is dropped once.
    #[test]
    fn a_few_at_a_time_drops_each_batch_in_turn() {
        // How many clones of `value` the handback still holds (besides the test's own).
        let held = |value: &Arc<u8>| Arc::strong_count(value) - 1;
        let (first, second) = (Arc::new(1), Arc::new(2));
        let handback = Handback::new(4);
        handback.hand_over(&mut vec![first.clone(); 3]);
        handback.drop_some(2);
        assert_eq!(held(&first), 1, "two of the first batch dropped");
        handback.hand_over(&mut vec![second.clone(); 4]);
        handback.drop_some(2);
        assert_eq!((held(&first), held(&second)), (0, 4), "the first batch's last one only");
        handback.drop_some(3);
        assert_eq!(held(&second), 1, "then the second batch");
        handback.drop_some(0);
        assert_eq!(held(&second), 1, "none asked, none dropped");
        handback.drop_handed_over();
        assert_eq!((held(&first), held(&second)), (0, 0));
        assert!(!handback.in_hand.load(Ordering::Relaxed));
        assert!(!handback.waiting.load(Ordering::Relaxed));
    }
}
