//! Loom models of `MultiWorkerSequences`: request-path writers on two worker shards racing an
//! all-worker query, two adds of one id racing on different shards, and replica sync's
//! published events keeping each request's order whatever the interleaving.
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_sequences`
#![cfg(loom)]

use std::collections::BTreeMap;

use kvroute::sequences::{
    AddRequestError, MultiWorkerSequences, PotentialLoad, SequenceEvent, SequenceEventData,
    SequencePublisher,
};
use kvroute::{OverlapScores, SequenceHash, Worker};
use loom::sync::Arc;
use loom::thread;

fn blocks(values: &[u64]) -> Vec<SequenceHash> {
    values.iter().copied().map(SequenceHash).collect()
}

/// Worker 0 and a worker in another shard, both registered.
fn workers_on_two_shards(fleet: &MultiWorkerSequences) -> (Worker, Worker) {
    let a = Worker::new(0, 0);
    let b = (1..64)
        .map(|id| Worker::new(id, 0))
        .find(|&w| fleet.shard_of(w) != fleet.shard_of(a))
        .expect("some worker hashes to the other shard");
    fleet.update_workers([a, b]);
    (a, b)
}

/// A tracker of two workers that live in different shards.
fn two_shard_fleet() -> (MultiWorkerSequences, Worker, Worker) {
    let fleet = MultiWorkerSequences::builder(1)
        .worker_shards(2)
        .request_shards(2)
        .expiry(None)
        .build()
        .expect("config");
    let (a, b) = workers_on_two_shards(&fleet);
    (fleet, a, b)
}

fn on(loads: &[PotentialLoad], worker: Worker) -> (usize, usize, usize) {
    let load = loads.iter().find(|l| l.worker == worker).expect("every worker is reported");
    (load.active_requests, load.potential_blocks, load.potential_tokens)
}

#[test]
fn adds_and_frees_on_two_shards_race_an_all_worker_query() {
    loom::model(|| {
        let (fleet, a, b) = two_shard_fleet();
        fleet.add_request("base".into(), a, Some(&blocks(&[1, 2])), 2, 0).expect("add");
        let fleet = Arc::new(fleet);

        let on_a = {
            let fleet = fleet.clone();
            thread::spawn(move || {
                fleet.add_request("ra".into(), a, Some(&blocks(&[1, 2, 3])), 3, 0).expect("add");
                fleet.free(&"ra".into()).expect("free");
            })
        };
        let on_b = {
            let fleet = fleet.clone();
            thread::spawn(move || {
                fleet.add_request("rb".into(), b, Some(&blocks(&[1, 7])), 2, 0).expect("add");
            })
        };

        // A 4-block candidate [1, 2, 3, 4] of 4 tokens, nothing cached.
        let loads = fleet.potential_loads(&blocks(&[1, 2, 3, 4]), 4, &OverlapScores::new());
        // Each worker's figures come from one state of its shard, never a mix.
        let a_states = [(1, 2 + 2, 2 + 4), (2, 3 + 1, 2 + 3 + 4)];
        assert!(a_states.contains(&on(&loads, a)), "worker a: {:?}", on(&loads, a));
        let b_states = [(0, 4, 4), (1, 2 + 3, 2 + 4)];
        assert!(b_states.contains(&on(&loads, b)), "worker b: {:?}", on(&loads, b));

        on_a.join().expect("thread a");
        on_b.join().expect("thread b");
        let load = |w| fleet.load(w).map(|l| (l.active_requests, l.active_blocks, l.active_tokens));
        assert_eq!(load(a), Some((1, 2, 2)));
        assert_eq!(load(b), Some((1, 2, 2)));
        assert_eq!(fleet.worker_of(&"ra".into()), None);
        assert_eq!(fleet.worker_of(&"rb".into()), Some(b));
    });
}

#[test]
fn one_id_added_twice_at_once_lands_exactly_once() {
    loom::model(|| {
        let (fleet, a, b) = two_shard_fleet();
        let fleet = Arc::new(fleet);
        let racer = {
            let fleet = fleet.clone();
            thread::spawn(move || fleet.add_request("same".into(), a, Some(&blocks(&[5])), 1, 0))
        };
        let here = fleet.add_request("same".into(), b, Some(&blocks(&[6])), 1, 0);
        let there = racer.join().expect("racer");
        let winner = match (&here, &there) {
            (Ok(_), Err(AddRequestError::DuplicateRequest { .. })) => b,
            (Err(AddRequestError::DuplicateRequest { .. }), Ok(_)) => a,
            other => panic!("exactly one add must win: {other:?}"),
        };
        assert_eq!(fleet.worker_of(&"same".into()), Some(winner));
        let requests: usize = fleet.loads().iter().map(|l| l.active_requests).sum();
        assert_eq!(requests, 1);
        fleet.free(&"same".into()).expect("free");
        assert!(fleet.loads().iter().all(|l| l.active_requests == 0 && l.active_blocks == 0));
    });
}

/// Collects a replica's published events in the order they were published.
#[derive(Clone, Default)]
struct Outbox(Arc<loom::sync::Mutex<Vec<SequenceEvent>>>);

impl SequencePublisher for Outbox {
    fn publish(&self, event: SequenceEvent) {
        self.0.lock().expect("not poisoned").push(event);
    }
}

/// A replica over two workers in different shards, publishing to the returned outbox.
fn replica_fleet() -> (Arc<MultiWorkerSequences>, Outbox, Worker, Worker) {
    let outbox = Outbox::default();
    let fleet = MultiWorkerSequences::builder(1)
        .worker_shards(2)
        .request_shards(2)
        .expiry(None)
        .replica(1, outbox.clone())
        .peer_lanes(1, 1)
        .build()
        .expect("config");
    let (a, b) = workers_on_two_shards(&fleet);
    (Arc::new(fleet), outbox, a, b)
}

/// What a peer that applies `events` in order ends up with (the naive model): an add of an id
/// in flight and a free of one not in flight are dropped, as the tracker does.
fn peer_view(events: &[SequenceEvent]) -> BTreeMap<String, Worker> {
    let mut live = BTreeMap::new();
    for event in events {
        let id = event.request_id.to_string();
        match event.data {
            SequenceEventData::AddRequest { .. } => {
                live.entry(id).or_insert(event.worker);
            }
            SequenceEventData::Free => {
                live.remove(&id);
            }
            _ => {}
        }
    }
    live
}

fn own_view(fleet: &MultiWorkerSequences, ids: &[&str]) -> BTreeMap<String, Worker> {
    let on = |id: &&str| fleet.worker_of(&(*id).into()).map(|w| (id.to_string(), w));
    ids.iter().filter_map(on).collect()
}

/// A free racing the add of the same request: if the free finds the request, its `Free` must
/// be published after the `AddRequest`, or a peer drops the `Free` and keeps the request.
#[test]
fn a_free_racing_its_add_is_published_after_it() {
    loom::model(|| {
        let (fleet, outbox, a, _) = replica_fleet();
        let adder = {
            let fleet = fleet.clone();
            thread::spawn(move || fleet.add_request("r".into(), a, None, 1, 0).expect("add"))
        };
        let _ = fleet.free(&"r".into()); // unknown if it runs before the add: publishes nothing
        adder.join().expect("adder");
        let events = outbox.0.lock().expect("not poisoned").clone();
        assert_eq!(peer_view(&events), own_view(&fleet, &["r"]), "published: {events:?}");
    });
}

/// A free racing a re-add of the same id on another worker: the events must reach the outbox
/// in the order the changes were made, or a peer rejects the re-add and then frees the id.
#[test]
fn a_free_racing_a_re_add_elsewhere_is_published_before_it() {
    loom::model(|| {
        let (fleet, outbox, a, b) = replica_fleet();
        fleet.add_request("r".into(), a, None, 1, 0).expect("add");
        let freer = {
            let fleet = fleet.clone();
            thread::spawn(move || fleet.free(&"r".into()).expect("in flight"))
        };
        let _ = fleet.add_request("r".into(), b, None, 1, 0); // a duplicate until the free
        freer.join().expect("freer");
        let events = outbox.0.lock().expect("not poisoned").clone();
        assert_eq!(peer_view(&events), own_view(&fleet, &["r"]), "published: {events:?}");
    });
}
