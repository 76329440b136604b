//! EventPool behaviour beyond the differential check: fleet scale, capacity, full queues, sizes.

use kvroute::index::{EventPool, PoolConfig, PoolConfigError, SubmitError, TieredIndex};
use kvroute::router::{KvRouter, RouterConfig, RouterConfigError};
use kvroute::{ApplyErrorKind, LocalBlockHash, RouterEvent, StoredBlock, Worker};

fn store_prefix(worker: Worker, depth: u64) -> RouterEvent {
    let blocks = (0..depth).map(|i| StoredBlock::new(i, worker.id.0 * 1000 + i)).collect();
    RouterEvent::stored(worker, 0, None, blocks)
}

#[test]
fn thousands_of_workers_each_match_their_depth() {
    let pool = EventPool::new(PoolConfig::default()).expect("the pool starts");
    let workers: Vec<Worker> = (0..4096u64).map(|i| Worker::new(i / 2, (i % 2) as u32)).collect();
    for (i, &worker) in workers.iter().enumerate() {
        pool.apply_blocking(store_prefix(worker, 1 + (i % 5) as u64)).unwrap();
    }
    pool.flush().unwrap();
    let query: Vec<LocalBlockHash> = (0..8).map(LocalBlockHash).collect();
    let scores = pool.find_matches(&query);
    assert_eq!(scores.len(), 4096);
    for (i, &worker) in workers.iter().enumerate() {
        assert_eq!(scores.get(worker), 1 + (i % 5) as u32);
    }
    // Removing half the fleet leaves exactly the other half matching.
    for id in 0..1024 {
        pool.remove_worker(kvroute::WorkerId(id)).unwrap();
    }
    assert_eq!(pool.find_matches(&query).len(), 2048);
    assert_eq!(pool.stats().live_entries, (2048..4096).map(|i| 1 + (i % 5) as u64).sum::<u64>());
}

#[test]
fn workers_beyond_capacity_are_rejected_and_counted() {
    let pool = EventPool::new(PoolConfig { max_workers: 2, ..PoolConfig::default() })
        .expect("the pool starts");
    let fleet: Vec<Worker> = (0..3).map(|id| Worker::new(id, 0)).collect();
    for &worker in &fleet {
        pool.apply_blocking(store_prefix(worker, 1)).unwrap();
    }
    pool.flush().unwrap();
    // Lanes race for the two slots: exactly one worker is turned away.
    assert_eq!(pool.stats().errors_of(ApplyErrorKind::TooManyWorkers), 1);
    let admitted = pool.workers().unwrap();
    assert_eq!(admitted.len(), 2);
    let rejected = *fleet.iter().find(|w| !admitted.contains(w)).unwrap();
    // A removed worker's slot is reused once queries that might still see it have finished.
    assert_eq!(pool.remove_worker(admitted[0].id).unwrap(), 1);
    let query = [LocalBlockHash(0)];
    let admitted_later = (0..10_000).any(|_| {
        pool.apply_blocking(store_prefix(rejected, 1)).unwrap();
        pool.flush().unwrap();
        pool.find_matches(&query);
        pool.workers().unwrap().contains(&rejected)
    });
    assert!(admitted_later);
    assert_eq!(
        pool.find_matches(&query).sorted(),
        vec![(admitted[1], 1), (rejected, 1)]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_full_queue_hands_the_event_back() {
    let pool = EventPool::new(PoolConfig { lanes: 1, queue_capacity: 1, ..PoolConfig::default() })
        .expect("the pool starts");
    let worker = Worker::new(1, 0);
    let mut returned = None;
    for i in 0..10_000 {
        let event = store_prefix(worker, 64 + i % 7);
        if let Err(SubmitError::QueueFull(event)) = pool.apply(event.clone()) {
            assert_eq!(event, store_prefix(worker, 64 + i % 7));
            returned = Some(event);
            break;
        }
    }
    assert!(returned.is_some(), "a one-slot queue must fill under a tight loop");
    pool.apply_blocking(returned.unwrap()).unwrap();
    pool.flush().unwrap();
    assert_eq!(pool.stats().errors, [0; ApplyErrorKind::ALL.len()]);
}

#[test]
fn memory_follows_live_blocks_after_mass_removal() {
    // One event of 20,000 blocks: more than an event may carry by default.
    let pool = EventPool::new(PoolConfig { max_event_blocks: 20_000, ..PoolConfig::default() })
        .expect("the pool starts");
    let worker = Worker::new(9, 0);
    let stored = store_prefix(worker, 20_000);
    pool.apply_blocking(stored).unwrap();
    pool.flush().unwrap();
    let full = pool.stats().bytes;
    let tail: Vec<kvroute::SequenceHash> =
        (10..20_000u64).rev().map(|i| kvroute::SequenceHash(9 * 1000 + i)).collect();
    pool.apply_blocking(RouterEvent::removed(worker, 1, tail)).unwrap();
    pool.flush().unwrap();
    let stats = pool.stats();
    assert_eq!(stats.live_entries, 10);
    assert!(stats.bytes * 20 < full, "{} bytes left of {full}", stats.bytes);
}

#[test]
fn zero_or_absurd_sizes_are_typed_errors() {
    let start = |lanes, queue_capacity, max_workers| {
        let mut config = PoolConfig::default();
        (config.lanes, config.queue_capacity, config.max_workers) =
            (lanes, queue_capacity, max_workers);
        EventPool::new(config).err()
    };
    assert_eq!(start(0, 8, 8), Some(PoolConfigError::ZeroLanes));
    assert_eq!(start(1, 0, 8), Some(PoolConfigError::ZeroQueueCapacity));
    assert_eq!(start(1, 8, 0), Some(PoolConfigError::ZeroMaxWorkers));
    assert_eq!(start(usize::MAX, 8, 8), Some(PoolConfigError::TooManyLanes(usize::MAX)));
    assert_eq!(start(1, usize::MAX, 8), Some(PoolConfigError::QueueTooLarge(usize::MAX)));
    assert_eq!(start(1, 1, usize::MAX), None, "no limit on the worker budget");
    for max_event_blocks in [0, usize::MAX] {
        let config = PoolConfig { max_event_blocks, ..PoolConfig::default() };
        assert_eq!(
            EventPool::new(config).err(),
            Some(PoolConfigError::BadMaxEventBlocks(max_event_blocks))
        );
    }
    let heap = |lane_heap_reserve| {
        EventPool::new(PoolConfig { lane_heap_reserve, ..PoolConfig::default() }).err()
    };
    let too_large = kvroute::index::MAX_LANE_HEAP_RESERVE + 1;
    assert_eq!(heap(too_large), Some(PoolConfigError::HeapReserveTooLarge(too_large)));
    assert_eq!(heap(0), None, "no reserve at all");

    let bad = PoolConfig { lanes: 0, ..PoolConfig::default() };
    let tiered = TieredIndex::new(PoolConfig::default(), bad.clone());
    assert_eq!(
        tiered.err(),
        Some(PoolConfigError::ZeroLanes),
        "a lower tier's config is checked up front"
    );
    let config = RouterConfig { device_index: bad, ..RouterConfig::new(16) };
    let router = KvRouter::new(config).err();
    assert_eq!(router, Some(RouterConfigError::Index(PoolConfigError::ZeroLanes)));
}

/// Key 0 and `u64::MAX` share a run-table slot (0 is stored as `u64::MAX`): both
/// roots must be found and removable, with no lane panic.
#[test]
fn root_keys_zero_and_max_are_both_found_and_removable() {
    let pool = EventPool::new(PoolConfig::default()).unwrap();
    let w = Worker::new(1, 0);
    pool.apply(RouterEvent::stored(w, 0, None, vec![StoredBlock::new(0, 10)])).unwrap();
    pool.apply(RouterEvent::stored(w, 1, None, vec![StoredBlock::new(u64::MAX, 11)])).unwrap();
    pool.flush().unwrap();
    assert_eq!(pool.find_matches(&[LocalBlockHash(0)]).get(w), 1);
    assert_eq!(pool.find_matches(&[LocalBlockHash(u64::MAX)]).get(w), 1);
    pool.apply(RouterEvent::removed(w, 2, vec![kvroute::SequenceHash(10)])).unwrap();
    pool.flush().unwrap();
    assert_eq!(pool.find_matches(&[LocalBlockHash(0)]).get(w), 0);
    assert_eq!(pool.find_matches(&[LocalBlockHash(u64::MAX)]).get(w), 1);
    pool.apply(RouterEvent::removed(w, 3, vec![kvroute::SequenceHash(11)])).unwrap();
    pool.flush().unwrap();
    assert!(pool.find_matches(&[LocalBlockHash(u64::MAX)]).is_empty());
    assert_eq!(pool.stats().errors, [0; ApplyErrorKind::ALL.len()]);
    assert_eq!(pool.stats().runs, 0);
}

/// A root whose content hash equals the sequence hash of another chain's second
/// block has the same run key as that block's run: each query still finds its own run.
#[test]
fn a_root_keyed_like_another_runs_block_does_not_shadow_it() {
    use kvroute::hash::next_sequence_hash;
    let pool = EventPool::new(PoolConfig { lanes: 1, ..PoolConfig::default() }).unwrap();
    let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
    // Worker a holds [5, 6]; worker b holds only [5]: two runs, the second keyed seq([5, 6]).
    let blocks = vec![StoredBlock::new(5, 50), StoredBlock::new(6, 60)];
    pool.apply(RouterEvent::stored(a, 0, None, blocks)).unwrap();
    pool.apply(RouterEvent::stored(b, 0, None, vec![StoredBlock::new(5, 70)])).unwrap();
    let collide = next_sequence_hash(Some(kvroute::SequenceHash(5)), LocalBlockHash(6)).0;
    // Worker b's root [collide, 8] is keyed like a's second run, in either insertion order.
    let root = vec![StoredBlock::new(collide, 71), StoredBlock::new(8, 72)];
    pool.apply(RouterEvent::stored(b, 1, None, root)).unwrap();
    pool.flush().unwrap();
    let chain = [LocalBlockHash(5), LocalBlockHash(6)];
    let scores = pool.find_matches(&chain);
    assert_eq!((scores.get(a), scores.get(b)), (2, 1));
    let scores = pool.find_matches(&[LocalBlockHash(collide), LocalBlockHash(8)]);
    assert_eq!((scores.get(a), scores.get(b)), (0, 2));
    // Removing a's block 6 removes its run, not b's root.
    pool.apply(RouterEvent::removed(a, 1, vec![kvroute::SequenceHash(60)])).unwrap();
    pool.flush().unwrap();
    let scores = pool.find_matches(&[LocalBlockHash(collide), LocalBlockHash(8)]);
    assert_eq!(scores.get(b), 2);
    assert_eq!(pool.find_matches(&chain).get(a), 1);
    // And storing under the colliding key again extends a, not b's root.
    pool.apply(RouterEvent::stored(
        a,
        2,
        Some(kvroute::SequenceHash(50)),
        vec![StoredBlock::new(6, 61)],
    ))
    .unwrap();
    pool.flush().unwrap();
    assert_eq!(pool.find_matches(&chain).get(a), 2);
    assert_eq!(pool.find_matches(&[LocalBlockHash(collide)]).get(a), 0);
    assert_eq!(pool.stats().errors, [0; ApplyErrorKind::ALL.len()]);
    let reference_like: Vec<_> = pool.workers().unwrap();
    assert_eq!(reference_like, vec![a, b]);
}

/// A lane whose tree passes the size at which it reserves allocator room (16,384 blocks) goes on
/// answering exactly, with no reserve, the default and the largest.
#[test]
fn lanes_past_the_heap_reserve_size_answer_exactly() {
    let reserves =
        [0, PoolConfig::default().lane_heap_reserve, kvroute::index::MAX_LANE_HEAP_RESERVE];
    for lane_heap_reserve in reserves {
        let config = PoolConfig { lanes: 1, lane_heap_reserve, ..PoolConfig::default() };
        let pool = EventPool::new(config).expect("the pool starts");
        // 40 chains of 500 blocks of their own: 20,000 blocks in the lane's tree.
        let chain = |id: u64| (0..500).map(move |i| id * 10_000 + i);
        for id in 0..40u64 {
            let blocks = chain(id).map(|h| StoredBlock::new(h, h)).collect();
            pool.apply_blocking(RouterEvent::stored(Worker::new(id, 0), 0, None, blocks)).unwrap();
        }
        pool.flush().unwrap();
        assert_eq!(pool.stats().nodes, 20_000);
        for id in [0, 17, 39] {
            let query: Vec<LocalBlockHash> = chain(id).map(LocalBlockHash).collect();
            let scores = pool.find_matches(&query);
            assert_eq!(scores.sorted(), vec![(Worker::new(id, 0), 500)]);
        }
    }
}

/// A dump is one `Stored` per leaf a worker holds (a block with nothing it holds below it),
/// whatever order the blocks came in and however their ids were reused, and it rebuilds an
/// index with the same runs and answers.
#[test]
fn a_dump_is_one_chain_per_leaf_and_rebuilds_the_same_runs() {
    use kvroute::{KvEventData, SequenceHash};
    // Block `local` of worker `w` is named `w * 1000 + local`; blocks 0..20 are a shared
    // document, 100.. and 200.. two continuations of it.
    let blocks = |w: u64, locals: std::ops::Range<u64>| -> Vec<StoredBlock> {
        locals.map(|local| StoredBlock::new(local, w * 1000 + local)).collect()
    };
    let after = |w: u64, local: u64| Some(SequenceHash(w * 1000 + local));
    let (a, b, c) = (Worker::new(1, 0), Worker::new(2, 0), Worker::new(3, 0));
    let pool = EventPool::new(PoolConfig { lanes: 1, ..PoolConfig::default() }).unwrap();
    let events = [
        // A throwaway chain, so that the document's nodes reuse freed ids.
        RouterEvent::stored(c, 0, None, blocks(3, 500..530)),
        RouterEvent::removed(c, 1, (500..530).rev().map(|l| SequenceHash(3000 + l)).collect()),
        // The document in pieces for a, whole for b, its first 12 blocks for c.
        RouterEvent::stored(a, 0, None, blocks(1, 0..10)),
        RouterEvent::stored(a, 1, after(1, 9), blocks(1, 10..20)),
        RouterEvent::stored(a, 2, after(1, 19), blocks(1, 100..105)),
        RouterEvent::stored(a, 3, after(1, 19), blocks(1, 200..203)),
        RouterEvent::stored(b, 0, None, blocks(2, 0..20)),
        RouterEvent::stored(b, 1, after(2, 19), blocks(2, 200..208)),
        RouterEvent::stored(c, 2, None, blocks(3, 0..12)),
    ];
    for event in events {
        pool.apply_blocking(event).unwrap();
    }
    pool.flush().unwrap();
    let dump = pool.dump_events().unwrap();
    let stored = |worker: Worker| {
        dump.iter()
            .filter(|e| e.worker() == worker && matches!(e.event.data, KvEventData::Stored { .. }))
            .count()
    };
    // a: two leaves (104 and 202); b: one (207); c: one (11).
    assert_eq!((stored(a), stored(b), stored(c)), (2, 1, 1), "{dump:?}");
    let rebuilt = EventPool::new(PoolConfig { lanes: 1, ..PoolConfig::default() }).unwrap();
    for event in dump {
        rebuilt.apply_blocking(event).unwrap();
    }
    rebuilt.flush().unwrap();
    let (before, after) = (pool.stats(), rebuilt.stats());
    assert_eq!(
        (after.live_entries, after.nodes, after.runs),
        (before.live_entries, before.nodes, before.runs)
    );
    assert_eq!(after.errors, [0; ApplyErrorKind::ALL.len()]);
    for tail in [100..105, 200..208, 500..501] {
        let query: Vec<LocalBlockHash> = (0..20).chain(tail).map(LocalBlockHash).collect();
        assert_eq!(rebuilt.find_matches(&query), pool.find_matches(&query));
    }
}
