//! Unit tests of [`MultiWorkerSequences`] and its peer lanes (the model-based and loom tests
//! live in `tests/`).

use std::time::Duration;

use super::*;
use crate::event::{SequenceHash, Worker};
use crate::scores::OverlapScores;
use crate::sync::{Arc, Mutex};

fn blocks(values: &[u64]) -> Vec<SequenceHash> {
    values.iter().copied().map(SequenceHash).collect()
}

fn fleet(workers: &[Worker]) -> MultiWorkerSequences {
    let fleet = MultiWorkerSequences::builder(4).worker_shards(2).build().expect("config");
    fleet.update_workers(workers.iter().copied());
    fleet
}

const A: Worker = Worker::new(1, 0);
const B: Worker = Worker::new(1, 1);
const C: Worker = Worker::new(2, 0);

#[test]
fn bad_input_is_a_typed_error_that_changes_nothing() {
    let fleet = fleet(&[A, B]);
    fleet.add_request("r".into(), A, Some(&blocks(&[1, 2])), 8, 1).expect("add");
    let before = fleet.loads();

    let duplicate = fleet.add_request("r".into(), B, Some(&blocks(&[1])), 4, 0);
    assert_eq!(duplicate, Err(AddRequestError::DuplicateRequest { id: "r".into() }));
    let unknown = fleet.add_request("s".into(), C, None, 4, 0);
    assert_eq!(unknown, Err(AddRequestError::UnknownWorker { worker: C }));
    let overlap = fleet.add_request("t".into(), B, None, 4, 2);
    assert!(matches!(overlap, Err(AddRequestError::OverlapExceedsInput { .. })));
    assert_eq!(fleet.free(&"zz".into()), Err(UnknownRequest { id: "zz".into() }));
    assert!(fleet.mark_prefill_completed(&"zz".into()).is_err());
    assert!(fleet.add_output_block(&"zz".into()).is_err());

    let mut after = fleet.loads();
    let mut before = before;
    before.sort_by_key(|l| l.worker);
    after.sort_by_key(|l| l.worker);
    assert_eq!(before, after);
    assert_eq!(fleet.worker_of(&"r".into()), Some(A));
    assert_eq!(fleet.worker_of(&"s".into()), None);
    fleet.inner.assert_consistent();
}

#[test]
fn lifecycle_moves_every_counter() {
    let fleet = fleet(&[A, B, C]);
    fleet.add_request("x".into(), A, Some(&blocks(&[1, 2, 3])), 12, 0).expect("add");
    fleet.add_request("y".into(), A, Some(&blocks(&[1, 2, 4])), 12, 2).expect("add");
    fleet.add_request("z".into(), B, Some(&blocks(&[1, 2])), 8, 0).expect("add");
    let load = |w| fleet.load(w).expect("tracked");
    assert_eq!((load(A).active_blocks, load(A).active_tokens, load(A).active_requests), (4, 16, 2));
    assert_eq!((load(B).active_blocks, load(B).active_tokens), (2, 8));
    assert_eq!(load(C), WorkerLoad { worker: C, ..WorkerLoad::default() });

    fleet.add_output_block(&"x".into()).expect("known");
    fleet.mark_prefill_completed(&"x".into()).expect("known");
    assert_eq!((load(A).active_blocks, load(A).active_tokens), (5, 4));

    let candidate = blocks(&[1, 2, 3, 9]);
    let overlaps = OverlapScores::from_pairs(vec![(A, 3), (B, 1)]);
    let mut loads = fleet.potential_loads(&candidate, 16, &overlaps);
    loads.sort_by_key(|l| l.worker);
    let summary: Vec<_> = loads.iter().map(|l| (l.potential_blocks, l.potential_tokens)).collect();
    assert_eq!(summary, [(5 + 1, 4 + 4), (2 + 2, 8 + 12), (4, 16)]);

    fleet.free(&"x".into()).expect("known");
    fleet.free(&"y".into()).expect("known");
    assert_eq!(fleet.free(&"x".into()), Err(UnknownRequest { id: "x".into() }));
    assert_eq!((load(A).active_blocks, load(A).active_requests), (0, 0));
    fleet.inner.assert_consistent();
}

#[test]
fn removing_a_worker_drops_and_reports_its_requests() {
    let fleet = fleet(&[A, B]);
    fleet.add_request("a1".into(), A, Some(&blocks(&[1, 2])), 8, 0).expect("add");
    fleet.add_request("a2".into(), A, Some(&blocks(&[1, 3])), 8, 0).expect("add");
    fleet.add_request("b1".into(), B, Some(&blocks(&[1, 2])), 8, 0).expect("add");

    let changes = fleet.update_workers([B, C]);
    assert_eq!(changes.added, [C]);
    let removed = RemovedWorker { worker: A, requests: vec!["a1".into(), "a2".into()] };
    assert_eq!(changes.removed, [removed]);
    assert!(!fleet.tracks(A));
    assert_eq!(fleet.free(&"a1".into()), Err(UnknownRequest { id: "a1".into() }));
    assert_eq!(fleet.load(B).map(|l| l.active_blocks), Some(2));
    fleet.inner.assert_consistent();

    // The id is free again, on any worker.
    fleet.add_request("a1".into(), C, None, 1, 0).expect("re-add");
    assert_eq!(fleet.worker_of(&"a1".into()), Some(C));
    assert_eq!(fleet.update_workers([B, C]), WorkerChanges::default());
    assert_eq!(fleet.remove_worker(A), None);
    assert!(fleet.add_worker(A));
    assert!(!fleet.add_worker(A));
    let mut workers = fleet.workers();
    workers.sort();
    assert_eq!(workers, [A, B, C]);
    fleet.inner.assert_consistent();
}

#[test]
fn stale_requests_expire_on_their_worker_or_in_a_sweep() {
    let clock = ManualClock::new();
    let fleet = MultiWorkerSequences::builder(4)
        .expiry(Some(Duration::from_secs(60)))
        .clock(clock.clone())
        .build()
        .expect("config");
    fleet.update_workers([A, B]);
    fleet.add_request("a".into(), A, Some(&blocks(&[1])), 4, 0).expect("add");
    fleet.add_request("b".into(), B, Some(&blocks(&[1])), 4, 0).expect("add");
    clock.advance(Duration::from_secs(60));

    let expired = fleet.add_request("a2".into(), A, None, 4, 0).expect("add");
    assert_eq!(expired, [RequestId::from("a")], "only the target worker expires lazily");
    assert_eq!(fleet.worker_of(&"a".into()), None);
    assert_eq!(fleet.worker_of(&"b".into()), Some(B));
    assert_eq!(fleet.expire_stale(), [RequestId::from("b")]);
    assert_eq!(fleet.load(B).map(|l| (l.active_blocks, l.active_requests)), Some((0, 0)));
    fleet.inner.assert_consistent();
    fleet.add_request("a".into(), B, None, 4, 0).expect("an expired id can be reused");
    fleet.inner.assert_consistent();
}

/// Forwards published events into a shared outbox.
#[derive(Clone, Default)]
struct Outbox(Arc<Mutex<Vec<SequenceEvent>>>);

impl SequencePublisher for Outbox {
    fn publish(&self, event: SequenceEvent) {
        self.0.lock().push(event);
    }
}

#[test]
fn replicas_converge_through_published_events() {
    let outbox = Outbox::default();
    let leader = MultiWorkerSequences::builder(4).replica(1, outbox.clone()).build().expect("a");
    let follower =
        MultiWorkerSequences::builder(4).replica(2, Outbox::default()).peer_lanes(3, 2).build();
    let follower = follower.expect("config");
    leader.update_workers([A, B, C]);
    follower.update_workers([A, B]);
    assert_eq!(follower.router_id(), Some(2));

    leader.add_request("r1".into(), A, Some(&blocks(&[1, 2, 3])), 12, 1).expect("add");
    leader.add_request("r2".into(), B, Some(&blocks(&[1, 2])), 8, 0).expect("add");
    leader.add_request("r3".into(), C, None, 8, 0).expect("add");
    leader.add_output_block(&"r1".into()).expect("known");
    leader.mark_prefill_completed(&"r2".into()).expect("known");
    leader.free(&"r2".into()).expect("known");
    assert!(leader.free(&"r2".into()).is_err(), "failed calls publish nothing");

    let events: Vec<SequenceEvent> = outbox.0.lock().drain(..).collect();
    assert_eq!(events.len(), 6);
    assert!(events.iter().all(|e| e.router_id == 1));
    for event in events.iter().cloned() {
        follower.apply_peer_event(event).expect("queued");
    }
    // Its own events come back through the transport: skipped.
    let mut echo = events[0].clone();
    echo.router_id = 2;
    follower.apply_peer_event(echo).expect("queued");
    follower.flush_peer_events().expect("flushed");

    for worker in [A, B] {
        assert_eq!(follower.load(worker), leader.load(worker));
    }
    let stats = follower.peer_stats();
    assert_eq!((stats.applied, stats.own, stats.unknown_worker), (5, 1, 1));
    assert!(stats.to_string().contains("applied 5"));
    assert!(outbox.0.lock().is_empty(), "applied peer events are not published again");

    let plain = fleet(&[A]);
    assert_eq!(plain.apply_peer_event(events[0].clone()), Err(PeerEventError::ReplicaSyncOff));
    assert_eq!(plain.flush_peer_events(), Err(PeerEventError::ReplicaSyncOff));
    assert_eq!(plain.router_id(), None);
    assert!(format!("{plain:?}").contains("worker_shards: 2"));
}

/// `spread_peer_lanes` reaches the peer lanes: on by default where lanes can move (Linux),
/// off when asked; a tracker whose peer lanes do not move applies peer events as any other.
#[test]
fn spread_peer_lanes_turns_the_peer_lanes_moving_apart_on_and_off() {
    let movable = cfg!(all(target_os = "linux", not(miri)));
    let default = MultiWorkerSequences::builder(4).replica(1, Outbox::default()).build();
    assert_eq!(default.expect("config").peers.as_ref().map(|p| p.spreads()), Some(movable));
    let unmoved = MultiWorkerSequences::builder(4).replica(3, Outbox::default());
    let unmoved = unmoved.spread_peer_lanes(false).build().expect("config");
    assert_eq!(unmoved.peers.as_ref().map(|p| p.spreads()), Some(false));
    unmoved.update_workers([A]);
    let added = SequenceEvent {
        router_id: 2,
        request_id: "r".into(),
        worker: A,
        data: SequenceEventData::AddRequest { blocks: None, isl: 8, overlap: 0 },
    };
    unmoved.apply_peer_event(added).expect("queued");
    unmoved.flush_peer_events().expect("flushed");
    assert_eq!(unmoved.worker_of(&"r".into()), Some(A));
}
