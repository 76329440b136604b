//! A warm `KvRouter::route` allocates nothing beyond its answer (and a decision without a
//! breakdown is no allocation at all). Counted on the routing thread by a counting allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use kvroute::hash::BlockHasher;
use kvroute::router::{KvRouter, RouteRequest, RouterConfig};
use kvroute::{RouterEvent, SequenceHash, StorageTier, StoredBlock, Worker};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the counter is a const-
// initialised thread local, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn a_warm_route_allocates_nothing() {
    const BS: u32 = 16;
    let router = KvRouter::new(RouterConfig { seed: Some(1), ..RouterConfig::new(BS) }).unwrap();
    let hasher = BlockHasher::new(BS).unwrap();
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|p| (0..128 * BS).map(|t| if t < 512 { t } else { p * 100_000 + t }).collect())
        .collect();
    for w in 0..64 {
        let worker = Worker::new(w, 0);
        router.add_worker(worker);
        let prompt = &prompts[w as usize % prompts.len()];
        let local = hasher.local_hashes(prompt);
        let depth = 1 + (w as usize * 7) % local.len();
        let blocks = local[..depth]
            .iter()
            .enumerate()
            .map(|(i, &local)| StoredBlock { local, hash: SequenceHash(w << 32 | i as u64) });
        let mut event = RouterEvent::stored(worker, 0, None, blocks.collect());
        router.apply_event(event.clone()).unwrap();
        if w % 4 == 0 {
            event.tier = StorageTier::HostPinned;
            router.apply_event(event).unwrap();
        }
        router
            .add_request(format!("r{w}").into(), &prompts[(w as usize + 1) % 8][..300], worker)
            .unwrap();
    }
    router.flush().unwrap();
    // Warm up this thread's buffers (and its epoch registration).
    for prompt in &prompts {
        router.route(&RouteRequest::tokens(prompt)).unwrap();
    }
    let before = allocations();
    for _ in 0..10 {
        for prompt in &prompts {
            let decision = router.route(&RouteRequest::tokens(prompt)).unwrap();
            assert!(decision.breakdown.is_none());
        }
    }
    assert_eq!(allocations() - before, 0, "allocations in 80 warm routes");
    // Asking for the breakdown costs exactly its vector.
    let before = allocations();
    router.route(&RouteRequest::tokens(&prompts[0]).with_breakdown()).unwrap();
    assert_eq!(allocations() - before, 1);
}
