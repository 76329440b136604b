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
