//! Replica sync end to end: a replica's published events, applied by a peer's lanes, leave the
//! peer with the replica's view of every request, whatever the interleaving.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;

use kvroute::sequences::{MultiWorkerSequences, RequestId, SequenceEvent, SequencePublisher};
use kvroute::{SequenceHash, Worker};

/// Sends published events down a channel, in publish order.
struct Transport(Mutex<Sender<SequenceEvent>>);

impl SequencePublisher for Transport {
    fn publish(&self, event: SequenceEvent) {
        let _ = self.0.lock().expect("not poisoned").send(event);
    }
}

/// A leader publishing into a channel whose far end a forwarding thread applies to a
/// follower with `lanes` peer lanes; `finish` joins the forwarder and flushes the follower.
struct Pair {
    leader: Arc<MultiWorkerSequences>,
    follower: Arc<MultiWorkerSequences>,
    forwarder: thread::JoinHandle<()>,
}

impl Pair {
    fn new(lanes: usize, workers: &[Worker]) -> Self {
        let (send, receive) = channel();
        let leader = MultiWorkerSequences::builder(4)
            .expiry(None)
            .replica(1, Transport(Mutex::new(send)))
            .build()
            .expect("valid");
        let follower = MultiWorkerSequences::builder(4)
            .expiry(None)
            .worker_shards(2)
            .replica(2, Transport(Mutex::new(channel().0)))
            .peer_lanes(lanes, 1 << 16)
            .build()
            .expect("valid");
        leader.update_workers(workers.iter().copied());
        follower.update_workers(workers.iter().copied());
        let follower = Arc::new(follower);
        let forwarder = {
            let follower = follower.clone();
            thread::spawn(move || {
                for event in receive {
                    follower.apply_peer_event(event).expect("lanes up");
                }
            })
        };
        Self { leader: Arc::new(leader), follower, forwarder }
    }

    /// Stops the leader's publishing (its drop closes the channel) and waits for the follower.
    fn finish(self, ids: impl Iterator<Item = RequestId>, workers: &[Worker]) {
        let leader = Arc::try_unwrap(self.leader).expect("the writers are done");
        let views: Vec<_> = ids.map(|id| (leader.worker_of(&id), id)).collect();
        let loads: Vec<_> = workers.iter().map(|&w| leader.load(w)).collect();
        drop(leader);
        self.forwarder.join().expect("forwarder");
        self.follower.flush_peer_events().expect("lanes up");
        for (worker, id) in views {
            assert_eq!(self.follower.worker_of(&id), worker, "request {id}");
        }
        let follower: Vec<_> = workers.iter().map(|&w| self.follower.load(w)).collect();
        assert_eq!(follower, loads);
    }
}

/// Two workers the follower keeps in different shards (so any split by worker parts them).
fn two_workers() -> [Worker; 2] {
    let probe = MultiWorkerSequences::builder(4).worker_shards(2).build().expect("valid");
    let a = Worker::new(0, 0);
    let b = (1..64).map(|id| Worker::new(id, 0)).find(|&w| probe.shard_of(w) != probe.shard_of(a));
    [a, b.expect("some worker hashes to the other shard")]
}

/// An id freed on one worker and reused on another: the peer must apply the free before the
/// re-add even while the first worker's other events keep one of its lanes busy.
#[test]
fn an_id_freed_on_one_worker_and_reused_on_another_converges() {
    let workers = two_workers();
    let [a, b] = workers;
    let pair = Pair::new(2, &workers);
    let leader = &pair.leader;
    leader.add_request("r".into(), a, None, 8, 0).expect("add");
    for n in 0..20_000 {
        let id = RequestId::from(format!("x{n}").as_str());
        leader.add_request(id.clone(), a, Some(&[SequenceHash(n)]), 4, 0).expect("add");
        leader.free(&id).expect("free");
    }
    leader.free(&"r".into()).expect("free");
    leader.add_request("r".into(), b, None, 8, 0).expect("the id is free again");
    pair.finish(std::iter::once("r".into()), &workers);
}

/// Writers on several threads add, progress and free requests of a small shared id space on
/// three workers while a forwarder applies what they publish to a follower.
#[test]
fn concurrent_writers_and_a_follower_converge() {
    const IDS: u64 = 24;
    let [a, b] = two_workers();
    let workers = [a, b, Worker::new(99, 1)];
    let pair = Pair::new(3, &workers);
    let writers: Vec<_> = (0..4u64)
        .map(|seed| {
            let leader = pair.leader.clone();
            thread::spawn(move || {
                let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = move |n: u64| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state % n
                };
                for _ in 0..20_000 {
                    let id = RequestId::from(format!("r{}", next(IDS)).as_str());
                    let worker = workers[next(3) as usize];
                    let _ = match next(8) {
                        0..=3 => {
                            let blocks = [SequenceHash(next(4)), SequenceHash(next(16) + 4)];
                            leader.add_request(id, worker, Some(&blocks), 8, 0).map(drop).ok()
                        }
                        4 => leader.mark_prefill_completed(&id).ok(),
                        5 => leader.add_output_block(&id).ok(),
                        _ => leader.free(&id).ok(),
                    };
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer");
    }
    let ids = (0..IDS).map(|n| RequestId::from(format!("r{n}").as_str()));
    pair.finish(ids, &workers);
}
