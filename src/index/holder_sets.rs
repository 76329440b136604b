//! [`HolderSets`]: the holder lists a lane's runs share.
//!
//! Every version of a run carries its sorted holders as a shared slice. Most runs are held by
//! one worker (its own branch) or by none (a bare path to other runs), so those lists are made
//! once per worker and shared, a count bump, instead of allocated for every run version the
//! lane publishes.

use std::collections::HashMap;

use crate::event::Worker;
use crate::sync::{Arc, shared_slice};

/// See the [module docs](self).
pub(crate) struct HolderSets {
    nobody: Arc<[Worker]>,
    solo: HashMap<Worker, Arc<[Worker]>, ahash::RandomState>,
}

impl Default for HolderSets {
    fn default() -> Self {
        Self { nobody: shared_slice(&[]), solo: HashMap::default() }
    }
}

impl HolderSets {
    /// A shared list of `holders` (sorted).
    pub(crate) fn of(&mut self, holders: &[Worker]) -> Arc<[Worker]> {
        match holders {
            [] => self.nobody.clone(),
            [worker] => self.solo.entry(*worker).or_insert_with(|| shared_slice(holders)).clone(),
            _ => shared_slice(holders),
        }
    }

    /// Heap bytes of the shared lists (of one worker or none) and their map.
    pub(crate) fn bytes(&self) -> usize {
        let list = |len: usize| 2 * size_of::<usize>() + len * size_of::<Worker>();
        list(0)
            + self.solo.capacity() * (size_of::<(Worker, Arc<[Worker]>)>() + 1)
            + self.solo.len() * list(1)
    }

    /// Heap bytes of `members` a run owns alone: none for the shared lists of one worker or none.
    pub(crate) fn own_bytes(members: &[Worker]) -> usize {
        match members.len() {
            0 | 1 => 0,
            len => 2 * size_of::<usize>() + len * size_of::<Worker>(),
        }
    }

    /// Drops `worker`'s own list (runs still holding it keep their copy alive).
    pub(crate) fn forget(&mut self, worker: Worker) {
        self.solo.remove(&worker);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_or_no_holder_lists_are_shared_and_others_are_not() {
        let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
        let mut sets = HolderSets::default();
        assert!(Arc::ptr_eq(&sets.of(&[]), &sets.of(&[])));
        let solo = sets.of(&[a]);
        assert_eq!(*solo, [a]);
        assert!(Arc::ptr_eq(&solo, &sets.of(&[a])));
        assert!(!Arc::ptr_eq(&solo, &sets.of(&[b])));
        let pair = sets.of(&[a, b]);
        assert_eq!(*pair, [a, b]);
        assert!(!Arc::ptr_eq(&pair, &sets.of(&[a, b])));
        sets.forget(a);
        assert_eq!(*solo, [a], "a run's copy outlives the forgotten entry");
        assert!(!Arc::ptr_eq(&solo, &sets.of(&[a])));
    }
}
