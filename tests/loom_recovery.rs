//! Loom models of recovery's synchronization: a fetch's result (incremental, or a full dump)
//! racing a `Cleared` barrier and the event after it on another thread. Whatever the interleaving, the stale result is
//! dropped or applied before the barrier, and once quiet the index equals the engine's record.
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --test loom_recovery`.
#![cfg(loom)]

use kvroute::index::ReferenceIndex;
use kvroute::pool::LaneDown;
use kvroute::recovery::{EventRecovery, EventSink, LocalIndexer, RecoveryConfig};
use kvroute::{KvEventData, RouterEvent, SequenceHash, StorageTier, StoredBlock, Worker};
use loom::sync::{Arc, Mutex};
use loom::thread;

struct Sink(Mutex<ReferenceIndex>);

impl EventSink for Sink {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        let _ = self.0.lock().unwrap().apply(&event);
        Ok(())
    }
}

fn store(local: u64, parent: Option<u64>) -> KvEventData {
    KvEventData::Stored {
        parent: parent.map(SequenceHash),
        blocks: vec![StoredBlock::new(local, local + 100)],
    }
}

/// Builds the model's recovery in front of a reference index, with no backoff.
fn recovery() -> Arc<EventRecovery<Sink>> {
    let zero = std::time::Duration::ZERO;
    let config = RecoveryConfig { backoff: zero, max_backoff: zero, ..RecoveryConfig::default() };
    let sink = Sink(Mutex::new(ReferenceIndex::new()));
    Arc::new(EventRecovery::new(sink, config).unwrap())
}

/// The due fetch runs on another thread while the engine clears its cache and stores again
/// (both events delivered); then recovery settles and the index must equal the engine's record.
fn fetch_racing_a_clear(recovery: &Arc<EventRecovery<Sink>>, engine: &Arc<LocalIndexer>) {
    let fetcher = {
        let (recovery, engine) = (recovery.clone(), engine.clone());
        thread::spawn(move || recovery.run_pending(&*engine).unwrap())
    };
    recovery.ingest(engine.publish(KvEventData::Cleared)).unwrap();
    recovery.ingest(engine.publish(store(3, None))).unwrap();
    fetcher.join().unwrap();
    settle_and_check(recovery, engine);
}

/// Runs recovery until quiet, then checks the index against the engine's record.
fn settle_and_check(recovery: &EventRecovery<Sink>, engine: &LocalIndexer) {
    while !recovery.stats().settled() {
        recovery.run_pending(engine).unwrap();
    }
    let mut truth = ReferenceIndex::new();
    engine.dump().events.iter().for_each(|e| truth.apply(e).unwrap());
    let ours = recovery.sink().0.lock().unwrap().snapshot();
    let held = |s: kvroute::index::IndexSnapshot| {
        s.into_iter().filter(|(_, b)| !b.is_empty()).collect::<Vec<_>>()
    };
    assert_eq!(held(ours), held(truth.snapshot()));
}

/// An incremental fetch (for a lost event) against the engine clearing its cache.
#[test]
fn an_incremental_fetch_racing_a_cleared_barrier() {
    loom::model(|| {
        let engine =
            Arc::new(LocalIndexer::new(Worker::new(1, 0), StorageTier::Device, 16).unwrap());
        let recovery = recovery();
        // The stream is live from a barrier at 1; 2 is lost, 3 shows the gap.
        recovery.ingest(engine.publish(KvEventData::Cleared)).unwrap();
        let _lost = engine.publish(store(1, None));
        recovery.ingest(engine.publish(store(2, Some(101)))).unwrap();
        // The fetch may read the engine's record before or after it clears.
        fetch_racing_a_clear(&recovery, &engine);
    });
}

/// A full restore (first contact) against the engine clearing its cache: a dump taken before
/// the clear must not land after the barrier.
#[test]
fn a_full_restore_racing_a_cleared_barrier() {
    loom::model(|| {
        let engine =
            Arc::new(LocalIndexer::new(Worker::new(1, 0), StorageTier::Device, 16).unwrap());
        let recovery = recovery();
        recovery.ingest(engine.publish(store(1, None))).unwrap();
        fetch_racing_a_clear(&recovery, &engine);
    });
}
