//! [`WorkerSlots`]: dense slot numbers for workers, so membership fits in bit words.
//!
//! Slot `s` is bit `s % 64` of membership word `s / 64`. A lane allocates a slot when a worker
//! first stores a block and releases it when the worker is removed; readers map set bits back to
//! workers through lock-free atomics. A released slot is reused only after every reader pinned at
//! release time has finished, so no query attributes one worker's blocks to another.

use crate::event::{DpRank, Worker, WorkerId};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};

struct SlotOwner {
    id: AtomicU64,
    dp_rank: AtomicU32,
}

/// See the [module docs](self).
pub struct WorkerSlots {
    owners: Box<[SlotOwner]>,
    free: Mutex<FreeSlots>,
    /// Set (before any bit of it is) once a slot of word 1 or above has been handed out.
    multiword: AtomicBool,
}

struct FreeSlots {
    next: u32,
    released: Vec<u32>,
}

impl WorkerSlots {
    /// Room for `capacity` workers at once.
    pub(crate) fn new(capacity: usize) -> Self {
        let owners = (0..capacity)
            .map(|_| SlotOwner { id: AtomicU64::new(0), dp_rank: AtomicU32::new(0) })
            .collect();
        let free = Mutex::new(FreeSlots { next: 0, released: Vec::new() });
        Self { owners, free, multiword: AtomicBool::new(false) }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.owners.len()
    }

    /// A slot for `worker`, or `None` when all are taken.
    pub fn allocate(&self, worker: Worker) -> Option<u32> {
        let slot = {
            let mut free = self.free.lock();
            match free.released.pop() {
                Some(slot) => slot,
                None if (free.next as usize) < self.owners.len() => {
                    free.next += 1;
                    free.next - 1
                }
                None => return None,
            }
        };
        let owner = &self.owners[slot as usize];
        owner.id.store(worker.id.0, Ordering::Relaxed);
        owner.dp_rank.store(worker.dp_rank.0, Ordering::Relaxed);
        if slot >= 64 {
            self.multiword.store(true, Ordering::Release);
        }
        // The owner is published to readers by the release of the first membership bit set.
        Some(slot)
    }

    /// Returns `slot` for reuse by a later worker. Its bits must all be cleared already.
    pub(crate) fn release(&self, slot: u32) {
        self.free.lock().released.push(slot);
    }

    /// The worker in `slot`. Call only for a slot whose bit was read with acquire.
    #[inline]
    pub(crate) fn owner(&self, slot: u32) -> Worker {
        let owner = &self.owners[slot as usize];
        Worker {
            id: WorkerId(owner.id.load(Ordering::Relaxed)),
            dp_rank: DpRank(owner.dp_rank.load(Ordering::Relaxed)),
        }
    }

    /// Whether any slot beyond the first word was ever handed out.
    #[inline]
    pub(crate) fn multiword(&self) -> bool {
        self.multiword.load(Ordering::Acquire)
    }
}
