//! A router whose index lane panics re-syncs the workers that lane dropped, through recovery.

use crate::LocalBlockHash;
use crate::event::{KvEventData, RouterEvent, SequenceHash, StorageTier, StoredBlock, Worker};
use crate::index::INJECTED_PANIC;
use crate::recovery::{LocalIndexer, RecoveryConfig};
use crate::router::{KvRouter, RouterConfig};

#[test]
fn workers_a_panicking_lane_dropped_are_restored_from_their_engines() {
    let config = RouterConfig {
        recovery: Some(RecoveryConfig::default()),
        device_index: crate::index::PoolConfig { lanes: 1, ..Default::default() },
        ..RouterConfig::new(4)
    };
    let router = KvRouter::new(config).unwrap();
    let w = Worker::new(1, 0);
    router.add_worker(w);
    let engine = LocalIndexer::new(w, StorageTier::Device, 16).unwrap();
    let blocks = vec![StoredBlock::new(7, 70), StoredBlock::new(8, 80)];
    router.apply_event(engine.publish(KvEventData::Stored { parent: None, blocks })).unwrap();
    router.run_recovery(&engine).unwrap();
    router.flush().unwrap();
    let query = [LocalBlockHash(7), LocalBlockHash(8)];
    assert_eq!(router.index().device().find_matches(&query).get(w), 2);

    // A bug makes the lane panic on some event of the worker: the lane starts over without it.
    let poison = RouterEvent::stored(w, INJECTED_PANIC, Some(SequenceHash(80)), Vec::new());
    router.index().apply_blocking(poison).unwrap();
    router.flush().unwrap();
    assert_eq!(router.index().device().find_matches(&query).get(w), 0);
    assert_eq!(router.index().device().stats().lane_restarts, 1);

    // The next recovery run restores it from its engine's record.
    assert_eq!(router.run_recovery(&engine).unwrap(), 1);
    router.flush().unwrap();
    assert_eq!(router.index().device().find_matches(&query).get(w), 2);
    let stats = router.stats().recovery.unwrap();
    assert_eq!(stats.stream(w, StorageTier::Device).unwrap().restores, 2);
    // Nothing new to re-sync afterwards.
    assert_eq!(router.run_recovery(&engine).unwrap(), 0);
}

/// A snapshot saved after a lane restart, before recovery re-synced the workers it dropped,
/// writes their streams as invalidated: the restored router rebuilds them from their engines.
#[test]
fn a_snapshot_saved_after_a_lane_restart_restores_the_workers_it_dropped() {
    let config = || RouterConfig {
        recovery: Some(RecoveryConfig::default()),
        device_index: crate::index::PoolConfig { lanes: 1, ..Default::default() },
        ..RouterConfig::new(4)
    };
    let router = KvRouter::new(config()).unwrap();
    let w = Worker::new(1, 0);
    router.add_worker(w);
    let engine = LocalIndexer::new(w, StorageTier::Device, 16).unwrap();
    let blocks = vec![StoredBlock::new(7, 70), StoredBlock::new(8, 80)];
    router.apply_event(engine.publish(KvEventData::Stored { parent: None, blocks })).unwrap();
    router.run_recovery(&engine).unwrap();
    router.flush().unwrap();
    let query = [LocalBlockHash(7), LocalBlockHash(8)];
    assert_eq!(router.index().device().find_matches(&query).get(w), 2);

    // The lane panics on one of the worker's events and starts over without it; a snapshot is
    // saved before any recovery run.
    let poison = RouterEvent::stored(w, INJECTED_PANIC, Some(SequenceHash(80)), Vec::new());
    router.index().apply_blocking(poison).unwrap();
    router.flush().unwrap();
    assert_eq!(router.index().device().stats().lane_restarts, 1);
    let mut file = Vec::new();
    router.save_snapshot(&mut file).unwrap();

    let restored = KvRouter::new(config()).unwrap();
    restored.add_worker(w);
    restored.restore_snapshot(&file[..]).unwrap();
    assert_eq!(restored.run_recovery(&engine).unwrap(), 1);
    restored.flush().unwrap();
    assert_eq!(restored.index().device().find_matches(&query).get(w), 2);
    // Later events apply on the rebuilt state.
    let more = vec![StoredBlock::new(9, 90)];
    let parent = Some(SequenceHash(80));
    restored.apply_event(engine.publish(KvEventData::Stored { parent, blocks: more })).unwrap();
    restored.flush().unwrap();
    let longer = [LocalBlockHash(7), LocalBlockHash(8), LocalBlockHash(9)];
    assert_eq!(restored.index().device().find_matches(&longer).get(w), 3);

    // The saving router still re-syncs the worker itself.
    assert_eq!(router.run_recovery(&engine).unwrap(), 1);
    router.flush().unwrap();
    assert_eq!(router.index().device().find_matches(&longer).get(w), 3);
}

/// A restart re-syncs the streams the worker has: tiers it never used are neither invalidated
/// (a source serving only the device would leave them due for good) nor started.
#[test]
fn a_restart_resyncs_only_the_tiers_the_worker_has() {
    let config = RouterConfig { recovery: Some(RecoveryConfig::default()), ..RouterConfig::new(4) };
    let router = KvRouter::new(config).unwrap();
    let w = Worker::new(1, 0);
    router.add_worker(w);
    let engine = LocalIndexer::new(w, StorageTier::Device, 16).unwrap();
    let blocks = vec![StoredBlock::new(7, 70)];
    router.apply_event(engine.publish(KvEventData::Stored { parent: None, blocks })).unwrap();
    router.run_recovery(&engine).unwrap();
    assert_eq!(router.recovery_due(), None);

    router.worker_restarted(w).unwrap();
    assert_eq!(router.run_recovery(&engine).unwrap(), 1);
    assert_eq!(router.recovery_due(), None, "a tier the worker never used is left due");
    let stats = router.stats().recovery.unwrap();
    for tier in [StorageTier::HostPinned, StorageTier::Disk, StorageTier::External] {
        assert!(stats.stream(w, tier).is_none(), "{tier:?} was invalidated");
    }

    // Without recovery, a restart clears the worker's blocks and starts no lower tier's lanes.
    let router = KvRouter::new(RouterConfig::new(4)).unwrap();
    router.add_worker(w);
    router.apply_event(RouterEvent::stored(w, 1, None, vec![StoredBlock::new(7, 70)])).unwrap();
    router.worker_restarted(w).unwrap();
    router.flush().unwrap();
    assert_eq!(router.index().device().find_matches(&[LocalBlockHash(7)]).get(w), 0);
    for tier in [StorageTier::HostPinned, StorageTier::Disk, StorageTier::External] {
        assert!(router.index().tier(tier).is_none(), "{tier:?}'s lanes were started");
    }
}
