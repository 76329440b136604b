//! `MultiWorkerSequences` under real threads: writers adding and freeing requests on shared and
//! separate workers while readers run all-worker queries; afterwards the books must balance.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use kvroute::sequences::{AddRequestError, MultiWorkerSequences, RequestId};
use kvroute::{OverlapScores, SequenceHash, Worker};

const WORKERS: u64 = 6;
const WRITERS: u64 = 3;
const REQUESTS_PER_WRITER: u64 = 1_500;

fn blocks(writer: u64, request: u64) -> Vec<SequenceHash> {
    // A shared 4-block prefix, then a per-request tail of 0–5 blocks.
    let mut out: Vec<SequenceHash> = (1..=4).map(SequenceHash).collect();
    let tail = request % 6;
    out.extend((0..tail).map(|i| SequenceHash(1_000_000 * (writer + 1) + request * 8 + i)));
    out
}

#[test]
fn concurrent_writers_and_readers_leave_balanced_books() {
    let fleet = MultiWorkerSequences::builder(4).worker_shards(2).request_shards(4).build();
    let fleet = fleet.expect("config");
    fleet.update_workers((0..WORKERS).map(|w| Worker::new(w, 0)));
    let done = AtomicBool::new(false);

    thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let candidate: Vec<SequenceHash> = (1..=8).map(SequenceHash).collect();
            let overlaps = OverlapScores::from_pairs(vec![(Worker::new(0, 0), 2)]);
            let mut queries = 0u64;
            while !done.load(Ordering::Relaxed) {
                let loads = fleet.potential_loads(&candidate, 32, &overlaps);
                assert_eq!(loads.len(), WORKERS as usize);
                for load in loads {
                    // At least the candidate's 4 blocks past the shared prefix are new; at most
                    // the shared prefix plus, per request, a 5-block tail and a decoded block
                    // are pinned, plus the 8 candidate blocks.
                    assert!(load.potential_blocks >= 4);
                    assert!(load.potential_blocks <= 4 + 8 + load.active_requests * 6);
                }
                queries += 1;
            }
            queries
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let fleet = &fleet;
                scope.spawn(move || {
                    let mut live = Vec::new();
                    for request in 0..REQUESTS_PER_WRITER {
                        let id = RequestId::from(format!("w{writer}-{request}"));
                        let worker = Worker::new((writer + request) % WORKERS, 0);
                        let isl = 4 * blocks(writer, request).len();
                        fleet
                            .add_request(id.clone(), worker, Some(&blocks(writer, request)), isl, 0)
                            .expect("ids are unique per writer");
                        // Every writer also races the others on one shared id.
                        let shared = RequestId::from(format!("shared-{request}"));
                        match fleet.add_request(shared.clone(), worker, None, 1, 0) {
                            Ok(_) | Err(AddRequestError::DuplicateRequest { .. }) => {}
                            Err(other) => panic!("unexpected {other}"),
                        }
                        let _ = fleet.free(&shared);
                        live.push(id);
                        if request % 3 == 2 {
                            fleet.mark_prefill_completed(&live[0]).expect("live");
                            fleet.add_output_block(&live[0]).expect("live");
                            fleet.free(&live.remove(0)).expect("live");
                        }
                    }
                    for id in live {
                        fleet.free(&id).expect("live");
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().expect("writer");
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().expect("reader") > 0);
    });

    for load in fleet.loads() {
        assert_eq!((load.active_blocks, load.active_tokens, load.active_requests), (0, 0, 0));
    }
}
