//! The router fed through recovery: lost events are fetched from the engine's record before
//! they matter to routing, a restarted worker is restored, and the stats say what happened.

use kvroute::hash::BlockHasher;
use kvroute::recovery::{LocalIndexer, RecoveryConfig};
use kvroute::router::RouterConfigError;
use kvroute::{
    KvEventData, KvRouter, RouteRequest, RouterConfig, SequenceHash, StorageTier, StoredBlock,
    Worker,
};

const BLOCK: u32 = 4;

/// A router with recovery on, workers 0 and 1, and each worker's engine record.
fn fleet() -> (KvRouter, Vec<LocalIndexer>) {
    let config =
        RouterConfig { recovery: Some(RecoveryConfig::default()), ..RouterConfig::new(BLOCK) };
    let router = KvRouter::new(config).expect("config");
    let engines = (0..2)
        .map(|w| {
            router.add_worker(Worker::new(w, 0));
            LocalIndexer::new(Worker::new(w, 0), StorageTier::Device, 8).expect("capacity")
        })
        .collect();
    (router, engines)
}

/// The engine of `w` caches the prompt's blocks one event each, returning the events.
fn cache_prompt(engine: &LocalIndexer, tokens: &[u32]) -> Vec<kvroute::RouterEvent> {
    let hasher = BlockHasher::new(BLOCK).expect("block size");
    let hashes = hasher.hash_request(tokens);
    let mut parent = None;
    hashes
        .local
        .iter()
        .zip(&hashes.sequence)
        .map(|(&local, &seq)| {
            let blocks = vec![StoredBlock { local, hash: seq }];
            let event = engine.publish(KvEventData::Stored { parent, blocks });
            parent = Some(SequenceHash(seq.0));
            event
        })
        .collect()
}

#[test]
fn a_lost_event_is_fetched_before_routing_relies_on_it() {
    let (router, engines) = fleet();
    let tokens: Vec<u32> = (0..16).collect();
    // Worker 1 warms up so its stream is live (first contact is a full restore).
    let warm = engines[1].publish(KvEventData::Stored { parent: None, blocks: vec![] });
    router.apply_event(warm).unwrap();
    router.run_recovery(&engines[1]).unwrap();
    let events = cache_prompt(&engines[1], &tokens);
    // The second of four events is lost on the way.
    for (i, event) in events.into_iter().enumerate() {
        if i != 1 {
            router.apply_event(event).unwrap();
        }
    }
    router.flush().unwrap();
    let request = RouteRequest::tokens(&tokens);
    assert_eq!(router.route(&request).unwrap().overlap_blocks, 1, "only up to the gap so far");
    assert_eq!(router.run_recovery(&engines[1]).unwrap(), 1);
    router.flush().unwrap();
    let decision = router.route(&request).unwrap();
    assert_eq!((decision.worker, decision.overlap_blocks), (Worker::new(1, 0), 4));
    let stats = router.stats().recovery.expect("recovery is on");
    let stream = stats.stream(Worker::new(1, 0), StorageTier::Device).unwrap();
    assert_eq!((stream.gaps, stream.incremental_recoveries, stream.healed), (1, 1, 2));
    assert!(stats.settled());
}

#[test]
fn a_restarted_worker_is_restored_from_its_new_run() {
    let (router, mut engines) = fleet();
    let tokens: Vec<u32> = (0..16).collect();
    for event in cache_prompt(&engines[0], &tokens) {
        router.apply_event(event).unwrap();
    }
    router.run_recovery(&engines[0]).unwrap();
    router.flush().unwrap();
    assert_eq!(router.route(&RouteRequest::tokens(&tokens)).unwrap().overlap_blocks, 4);
    // Worker 0 comes back empty under a new instance and caches half of the prompt.
    engines[0] = LocalIndexer::new(Worker::new(0, 0), StorageTier::Device, 8).unwrap();
    router.worker_restarted(Worker::new(0, 0)).unwrap();
    let events = cache_prompt(&engines[0], &tokens[..8]);
    router.apply_event(events[0].clone()).unwrap();
    router.run_recovery(&engines[0]).unwrap();
    router.flush().unwrap();
    assert_eq!(router.overlap_blocks(&tokens, Worker::new(0, 0)), 2);
    let stats = router.stats().recovery.unwrap();
    assert_eq!(stats.stream(Worker::new(0, 0), StorageTier::Device).unwrap().restores, 2);
}

#[test]
fn recovery_settings_are_checked() {
    let bad = RecoveryConfig { buffer_capacity: 0, ..RecoveryConfig::default() };
    let config = RouterConfig { recovery: Some(bad), ..RouterConfig::new(BLOCK) };
    assert!(matches!(KvRouter::new(config), Err(RouterConfigError::Recovery(_))));
    // Off by default: events apply as they come and there is nothing to run.
    let router = KvRouter::new(RouterConfig::new(BLOCK)).unwrap();
    let engine = LocalIndexer::new(Worker::new(0, 0), StorageTier::Device, 8).unwrap();
    assert_eq!(router.run_recovery(&engine).unwrap(), 0);
    assert!(router.stats().recovery.is_none());
}

#[test]
fn a_restarted_router_starts_warm_from_its_snapshot_and_fetches_only_what_it_missed() {
    let (router, engines) = fleet();
    let tokens: Vec<u32> = (0..16).collect();
    for event in cache_prompt(&engines[0], &tokens[..8]) {
        router.apply_event(event).unwrap();
    }
    router.run_recovery(&engines[0]).unwrap();
    let mut host =
        kvroute::RouterEvent::stored(Worker::new(1, 0), 1, None, vec![StoredBlock::new(5, 6)]);
    host.tier = StorageTier::HostPinned;
    // The host stream starts from a barrier (no restore needed), then stores.
    let mut barrier = kvroute::RouterEvent::cleared(Worker::new(1, 0), 0);
    barrier.tier = StorageTier::HostPinned;
    router.apply_event(barrier).unwrap();
    router.apply_event(host).unwrap();
    let mut file = Vec::new();
    router.save_snapshot(&mut file).unwrap();

    // Meanwhile worker 0 caches the rest of the prompt; the new router sees only the last event.
    let missed = cache_prompt(&engines[0], &tokens);
    let (restarted, _) = fleet();
    // A corrupt or truncated file is refused and changes nothing.
    let mut corrupt = file.clone();
    corrupt[30] ^= 1;
    assert!(restarted.restore_snapshot(&corrupt[..]).is_err());
    assert!(restarted.restore_snapshot(&file[..file.len() - 3]).is_err());
    assert_eq!(restarted.overlap_blocks(&tokens, Worker::new(0, 0)), 0);

    restarted.restore_snapshot(&file[..]).unwrap();
    assert_eq!(restarted.overlap_blocks(&tokens, Worker::new(0, 0)), 2, "warm at once");
    let host_tier = restarted.index().tier(StorageTier::HostPinned).expect("restored");
    assert_eq!(host_tier.workers().unwrap(), [Worker::new(1, 0)]);
    restarted.apply_event(missed.last().unwrap().clone()).unwrap();
    assert_eq!(restarted.run_recovery(&engines[0]).unwrap(), 1);
    restarted.flush().unwrap();
    assert_eq!(restarted.overlap_blocks(&tokens, Worker::new(0, 0)), 4);
    let stats = restarted.stats().recovery.unwrap();
    let stream = stats.stream(Worker::new(0, 0), StorageTier::Device).unwrap();
    assert_eq!((stream.restores, stream.incremental_recoveries), (0, 1), "no full restore");
    // Only into a router with no state.
    assert!(matches!(
        restarted.restore_snapshot(&file[..]),
        Err(kvroute::recovery::SnapshotError::NotEmpty)
    ));
}
