//! `route` racing `apply_event` and `free` on real threads: every decision is a registered
//! worker, nothing is lost or left behind, and the index ends equal to the reference fed the
//! same events.

use std::collections::VecDeque;

use kvroute::hash::BlockHasher;
use kvroute::index::ReferenceIndex;
use kvroute::router::{KvRouter, RouteRequest, RouterConfig};
use kvroute::{RouterEvent, SequenceHash, StoredBlock, Worker};

const BS: u32 = 8;
const WORKERS: u64 = 6;
const ROUNDS: u64 = 3_000;

fn prompt(family: u32, blocks: u32) -> Vec<u32> {
    (0..blocks * BS).map(|t| family * 100_000 + t).collect()
}

/// The events the engine threads publish: chains of 3 prompt families stored and evicted.
fn events() -> Vec<RouterEvent> {
    let hasher = BlockHasher::new(BS).unwrap();
    let mut events = Vec::new();
    for round in 0..ROUNDS {
        let worker = Worker::new(round % WORKERS, 0);
        let family = (round % 3) as u32;
        let local = hasher.local_hashes(&prompt(family, 12));
        let base = round << 16;
        let blocks = local
            .iter()
            .enumerate()
            .map(|(i, &local)| StoredBlock { local, hash: SequenceHash(base + i as u64) });
        events.push(RouterEvent::stored(worker, 2 * round, None, blocks.collect()));
        // The next chain of this worker may name the same blocks afresh: evict this one
        // first (tails first, as engines do), except in the last rounds.
        if round < ROUNDS - WORKERS {
            let tail = (6..12).rev().map(|i| SequenceHash(base + i)).collect();
            events.push(RouterEvent::removed(worker, 2 * round + 1, tail));
            let head = (0..6).rev().map(|i| SequenceHash(base + i)).collect();
            events.push(RouterEvent::removed(worker, 2 * round + 1, head));
        }
    }
    events
}

#[test]
fn route_races_apply_event_and_free_without_losing_anything() {
    let router = KvRouter::new(RouterConfig { seed: Some(5), ..RouterConfig::new(BS) }).unwrap();
    let workers: Vec<Worker> = (0..WORKERS).map(|id| Worker::new(id, 0)).collect();
    for &w in &workers {
        router.add_worker(w);
    }
    let events = events();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for event in events.iter().cloned() {
                router.apply_event(event).unwrap();
            }
        });
        for thread in 0..2u32 {
            let (router, workers) = (&router, &workers);
            scope.spawn(move || {
                let mut inflight = VecDeque::new();
                for n in 0..2_000u32 {
                    let tokens = prompt(n % 3, 4 + n % 9);
                    let id = format!("t{thread}-{n}");
                    let request =
                        RouteRequest::tokens(&tokens).with_id(id.as_str()).update_states(true);
                    let decision = router.route(&request).unwrap();
                    assert!(workers.contains(&decision.worker));
                    inflight.push_back(id);
                    if n % 3 == 0 {
                        router.mark_prefill_completed(&inflight[0].as_str().into()).unwrap();
                    }
                    if inflight.len() > 16 {
                        let id = inflight.pop_front().unwrap();
                        router.free(&id.as_str().into()).unwrap();
                    }
                }
                for id in inflight {
                    router.free(&id.as_str().into()).unwrap();
                }
            });
        }
    });
    router.flush().unwrap();
    for load in router.sequences().loads() {
        assert_eq!(
            (load.active_requests, load.active_blocks, load.active_tokens),
            (0, 0, 0),
            "{load:?}"
        );
    }
    let mut reference = ReferenceIndex::new();
    for event in &events {
        reference.apply(event).unwrap();
    }
    assert_eq!(router.index().device().snapshot().unwrap(), reference.snapshot());
    assert_eq!(router.stats().decisions, 4_000);
}

/// `route` (approximate mode, recording the request and a session) racing `remove_worker` of
/// the worker it may choose, while another worker's events keep the one index lane busy (so a
/// decision may wait for room in its queue): whichever wins, nothing of the removed worker is
/// left — no block in the index or the approximate tracker, no request in flight, no session,
/// no registration in the index lane.
#[test]
fn route_racing_remove_worker_leaves_nothing_of_the_removed_worker() {
    use kvroute::index::PoolConfig;
    use kvroute::router::ApproxConfig;
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, Ordering};

    let config = RouterConfig {
        use_kv_events: false,
        approximate: ApproxConfig { max_blocks: 1 << 20, ..ApproxConfig::default() },
        device_index: PoolConfig { lanes: 1, queue_capacity: 2, ..PoolConfig::default() },
        seed: Some(9),
        ..RouterConfig::new(BS)
    };
    let router = KvRouter::new(config).unwrap();
    const ROUTERS: usize = 3;
    let busy = Worker::new(0, 0);
    router.add_worker(busy);
    let tokens = prompt(1, 12);
    let (mut left_blocks, mut left_requests, mut left_sessions, mut left_registered) = (0, 0, 0, 0);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let blocks = |round: u64| (0..8).map(move |i| StoredBlock::new(i, round << 8 | i));
            for round in 0.. {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                let stored = RouterEvent::stored(busy, 2 * round, None, blocks(round).collect());
                router.index().apply_blocking(stored).unwrap();
                let hashes = blocks(round).rev().map(|block| block.hash).collect();
                router
                    .index()
                    .apply_blocking(RouterEvent::removed(busy, 2 * round + 1, hashes))
                    .unwrap();
            }
        });
        for attempt in 1..=3_000u64 {
            let victim = Worker::new(attempt, 0);
            router.add_worker(victim);
            let ids: Vec<String> = (0..ROUTERS).map(|r| format!("r{attempt}-{r}")).collect();
            let only = [victim.id];
            // More threads than cores: a decision is now and then preempted half-way.
            let barrier = Barrier::new(ROUTERS + 1);
            std::thread::scope(|race| {
                for (r, id) in ids.iter().enumerate() {
                    let (router, barrier, tokens, only) = (&router, &barrier, &tokens, &only);
                    race.spawn(move || {
                        barrier.wait();
                        let session = format!("s{r}");
                        let request = RouteRequest::tokens(tokens)
                            .with_id(id.as_str())
                            .update_states((attempt + r as u64).is_multiple_of(2))
                            .in_session(&session)
                            .allowed(only);
                        // Refused if the removal came first; the only allowed worker if not.
                        if let Ok(decision) = router.route(&request) {
                            assert_eq!(decision.worker, victim);
                        }
                    });
                }
                barrier.wait();
                router.remove_worker(victim.id).unwrap();
            });
            router.flush().unwrap();
            let approx = router.stats().approx.unwrap();
            if approx.presumed_blocks > 0 || router.overlap_blocks(&tokens, victim) > 0 {
                left_blocks += 1;
            }
            if ids.iter().any(|id| router.free(&id.as_str().into()).is_ok()) {
                left_requests += 1;
            }
            if router.stats().live_sessions > 0 {
                left_sessions += 1;
            }
            if router.index().device().workers().unwrap().contains(&victim) {
                left_registered += 1;
            }
            // Start the next attempt clean even where this one failed.
            router.remove_worker(victim.id).unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    assert_eq!(
        (left_blocks, left_requests, left_sessions, left_registered),
        (0, 0, 0, 0),
        "attempts leaving (blocks, requests, sessions, lane registrations) of a removed worker"
    );
}
