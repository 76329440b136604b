//! The load trackers at the edges of their sizes: absurd settings are typed errors, and load
//! counters saturate instead of wrapping, whatever input length a caller passes.

use kvroute::sequences::{
    ActiveSequences, MultiWorkerSequences, SequenceEvent, SequencePublisher, SequencesBuilder,
};
use kvroute::{OverlapScores, Worker};

struct Nowhere;

impl SequencePublisher for Nowhere {
    fn publish(&self, _: SequenceEvent) {}
}

#[test]
fn absurd_sizes_are_typed_errors() {
    let builder = || MultiWorkerSequences::builder(16);
    let cases: [(&str, SequencesBuilder); 4] = [
        ("worker_shards", builder().worker_shards(usize::MAX)),
        ("request_shards", builder().request_shards(usize::MAX)),
        ("peer_lanes", builder().replica(1, Nowhere).peer_lanes(usize::MAX, 8)),
        ("peer_queue", builder().replica(1, Nowhere).peer_lanes(1, usize::MAX)),
    ];
    for (setting, builder) in cases {
        let error = builder.build().expect_err(setting);
        assert!(error.to_string().contains(setting), "{setting}: {error}");
    }
    let fine = builder().worker_shards(0).request_shards(1 << 16).build().expect("in range");
    assert_eq!(fine.shard_count(), 1);
}

/// A request with an absurd input length used to wrap a worker's 16 pending tokens to 15.
#[test]
fn an_absurd_input_length_saturates_the_fleet_load() {
    let fleet = MultiWorkerSequences::builder(16).build().expect("valid");
    let worker = Worker::new(1, 0);
    fleet.add_worker(worker);
    fleet.add_request("small".into(), worker, None, 16, 0).expect("added");
    let tokens = |fleet: &MultiWorkerSequences| fleet.load(worker).map(|l| l.active_tokens);
    let potential = |fleet: &MultiWorkerSequences, isl| {
        fleet.potential_loads(&[], isl, &OverlapScores::new())[0].potential_tokens
    };
    assert_eq!(potential(&fleet, usize::MAX), usize::MAX, "16 + usize::MAX saturates");
    fleet.add_request("huge".into(), worker, None, usize::MAX, 0).expect("added");
    assert_eq!(tokens(&fleet), Some(usize::MAX));
    assert_eq!(potential(&fleet, 1), usize::MAX);
    fleet.add_request("huge 2".into(), worker, None, usize::MAX, 0).expect("added");
    fleet.free(&"huge".into()).expect("in flight");
    assert_eq!(tokens(&fleet), Some(usize::MAX), "one huge request is still in flight");
    fleet.mark_prefill_completed(&"huge 2".into()).expect("in flight");
    assert_eq!(tokens(&fleet), Some(16), "the exact count is back once they are gone");
    assert_eq!(potential(&fleet, 4), 20);
}

#[test]
fn an_absurd_input_length_saturates_one_workers_load() {
    let mut worker = ActiveSequences::new(16).expect("valid");
    worker.add_request("small".into(), None, 16, 0).expect("added");
    assert_eq!(worker.potential_blocks_and_tokens(&[], usize::MAX, 0).1, usize::MAX);
    worker.add_request("huge".into(), None, usize::MAX, 0).expect("added");
    assert_eq!(worker.active_tokens(), usize::MAX);
    assert_eq!(worker.potential_blocks_and_tokens(&[], 1, 0).1, usize::MAX);
    worker.free(&"huge".into()).expect("in flight");
    assert_eq!(worker.active_tokens(), 16);
}
