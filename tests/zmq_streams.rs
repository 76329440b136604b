//! The ZMQ subscriber against an in-process engine (a PUB socket and a replay ROUTER speaking
//! vLLM's protocol): an engine restart (its `seq` from 0 again) replaces the endpoint's state,
//! an undecodable batch is counted and skipped without stalling the stream, duplicates are
//! dropped, a publisher that goes away and comes back is reconnected (what it sent meanwhile is
//! replayed), and an endpoint without a replay socket counts what it lost. Every wait is bounded.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kvroute::hash::BlockHasher;
use kvroute::index::ReferenceIndex;
use kvroute::recovery::RecoveryConfig;
use kvroute::wire::zmq::{EndpointStats, SubscriberConfig, ZmqEndpoint, ZmqError, ZmqSubscriber};
use kvroute::{LocalBlockHash, Worker, WorkerId};
use serde_json::json;

const BLOCK: u32 = 4;
const DEADLINE: Duration = Duration::from_secs(20);
const WORKER: Worker = Worker::new(3, 0);

/// An engine's publishing side, vLLM's framing.
struct Engine {
    publisher: zmq::Socket,
    replay: zmq::Socket,
    buffer: Vec<(u64, Vec<u8>)>,
}

impl Engine {
    fn bind(context: &zmq::Context) -> Self {
        let publisher = context.socket(zmq::PUB).unwrap();
        publisher.bind("tcp://127.0.0.1:*").unwrap();
        let replay = context.socket(zmq::ROUTER).unwrap();
        replay.bind("tcp://127.0.0.1:*").unwrap();
        Self { publisher, replay, buffer: Vec::new() }
    }

    /// The same engine's sockets closed and bound again at the same addresses (a network
    /// blip, or the engine's publisher thread restarting without losing its buffer).
    fn rebind(&mut self, context: &zmq::Context) {
        let (publisher, replay) = (Self::address(&self.publisher), Self::address(&self.replay));
        self.publisher = context.socket(zmq::PUB).unwrap();
        self.replay = context.socket(zmq::ROUTER).unwrap();
        // libzmq closes the old sockets in the background: the ports free up shortly.
        let start = Instant::now();
        for (socket, address) in [(&self.publisher, &publisher), (&self.replay, &replay)] {
            while let Err(e) = socket.bind(address) {
                assert!(start.elapsed() < DEADLINE, "{address} not bound again: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    fn address(socket: &zmq::Socket) -> String {
        socket.get_last_endpoint().unwrap().unwrap()
    }

    fn send(&self, seq: u64, payload: &[u8]) {
        let frames: [&[u8]; 3] = [b"kv", &seq.to_be_bytes(), payload];
        self.publisher.send_multipart(frames, 0).unwrap();
    }

    /// Records and publishes batch `seq`.
    fn publish(&mut self, seq: u64, payload: Vec<u8>) {
        self.send(seq, &payload);
        self.buffer.push((seq, payload));
    }

    /// Answers pending replay requests.
    fn serve(&self) {
        while let Ok(frames) = self.replay.recv_multipart(zmq::DONTWAIT) {
            let [client, _, start] = <[Vec<u8>; 3]>::try_from(frames).unwrap();
            let start = u64::from_be_bytes(start.try_into().unwrap());
            for (seq, payload) in self.buffer.iter().filter(|(seq, _)| *seq >= start) {
                let frames: [&[u8]; 5] = [&client, b"", b"kv", &seq.to_be_bytes(), payload];
                self.replay.send_multipart(frames, 0).unwrap();
            }
            let end: [&[u8]; 5] = [&client, b"", b"", &[0xff; 8], b""];
            self.replay.send_multipart(end, 0).unwrap();
        }
    }

    /// Serves replays until `done`, re-sending the last batch now and then (a subscriber that
    /// joined late missed it).
    fn until(&self, what: &str, done: impl FnMut() -> bool) {
        self.serve_until(what, true, done);
    }

    /// Serves replays until `done`; re-sends the last batch now and then if `resend`.
    fn serve_until(&self, what: &str, resend: bool, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        let mut resent = Instant::now();
        while !done() {
            self.serve();
            if resend
                && resent.elapsed() > Duration::from_millis(100)
                && let Some((seq, payload)) = self.buffer.last()
            {
                self.send(*seq, payload);
                resent = Instant::now();
            }
            assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Batch storing block `hash` (tokens from `first`), child of `parent`.
fn stored(hash: u64, parent: Option<u64>, first: u32) -> (Vec<u8>, LocalBlockHash) {
    let tokens: Vec<u32> = (first..first + BLOCK).collect();
    let event = json!({"type": "BlockStored", "block_hashes": [hash], "parent_block_hash": parent,
        "token_ids": tokens, "block_size": BLOCK, "lora_id": null, "medium": "GPU", "lora_name": null});
    let local = BlockHasher::new(BLOCK).unwrap().local_hashes(&tokens)[0];
    (rmp_serde::to_vec(&json!([0.0, [event], 0])).unwrap(), local)
}

/// [`stored`], stamped `ts`.
fn stored_at(ts: f64, hash: u64, parent: Option<u64>, first: u32) -> (Vec<u8>, LocalBlockHash) {
    let tokens: Vec<u32> = (first..first + BLOCK).collect();
    let event = json!({"type": "BlockStored", "block_hashes": [hash], "parent_block_hash": parent,
        "token_ids": tokens, "block_size": BLOCK, "lora_id": null, "medium": "GPU", "lora_name": null});
    let local = BlockHasher::new(BLOCK).unwrap().local_hashes(&tokens)[0];
    (rmp_serde::to_vec(&json!([ts, [event], 0])).unwrap(), local)
}

/// A subscriber to `engine` (and to its replay socket if `replay`) feeding a fresh index.
fn subscribe(engine: &Engine, replay: bool) -> (Arc<Mutex<ReferenceIndex>>, ZmqSubscriber) {
    subscribe_with(engine, replay, SubscriberConfig::default())
}

/// [`subscribe`] with `config`'s settings.
fn subscribe_with(
    engine: &Engine,
    replay: bool,
    config: SubscriberConfig,
) -> (Arc<Mutex<ReferenceIndex>>, ZmqSubscriber) {
    let index = Arc::new(Mutex::new(ReferenceIndex::new()));
    let mut endpoint = ZmqEndpoint::new(WORKER.id, Engine::address(&engine.publisher));
    if replay {
        endpoint = endpoint.with_replay(Engine::address(&engine.replay));
    }
    let config = SubscriberConfig { endpoints: vec![endpoint], ..config };
    (index.clone(), ZmqSubscriber::start(config, index).unwrap())
}

fn depth(index: &Mutex<ReferenceIndex>, chain: &[LocalBlockHash]) -> u32 {
    index.lock().unwrap().find_matches(chain).get(WORKER)
}

fn stats(subscriber: &ZmqSubscriber) -> EndpointStats {
    subscriber.stats().endpoints[0].clone()
}

#[test]
fn restarts_undecodable_batches_and_duplicates() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    let (index, subscriber) = subscribe(&engine, true);

    // First run: a chain of 4 blocks, batch 2 sent twice, then a batch nobody can decode.
    let mut chain = Vec::new();
    for seq in 0..4u64 {
        let (payload, local) =
            stored(100 + seq, seq.checked_sub(1).map(|p| 100 + p), seq as u32 * 4);
        chain.push(local);
        engine.publish(seq, payload.clone());
        if seq == 0 {
            engine.until("the first batch", || depth(&index, &chain) == 1);
        }
        if seq == 2 {
            engine.send(seq, &payload);
        }
    }
    engine.publish(4, vec![0xc1, 0x00]);
    let (payload, local) = stored(104, Some(103), 16);
    chain.push(local);
    engine.publish(5, payload);
    engine.until("the first run", || depth(&index, &chain) == 5);
    let first = stats(&subscriber);
    assert_eq!((first.decode_errors, first.gaps, first.last_seq), (1, 0, Some(5)), "{first:?}");

    // The engine restarts: new blocks, numbered from 0 again; the old ones are gone.
    engine.buffer.clear();
    let (payload, fresh) = stored(900, None, 1_000);
    engine.publish(0, payload);
    engine.until("the restart", || depth(&index, &[fresh]) == 1 && depth(&index, &chain) == 0);
    let after = stats(&subscriber);
    assert!(after.restores > first.restores, "{after:?}");
    assert_eq!(index.lock().unwrap().block_count(WORKER), 1);
    subscriber.shutdown();
}

#[test]
fn a_publisher_that_comes_back_is_reconnected_and_what_it_sent_meanwhile_replayed() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    let (index, subscriber) = subscribe(&engine, true);
    let (payload, first) = stored(10, None, 0);
    engine.publish(0, payload);
    engine.until("the first batch", || depth(&index, &[first]) == 1);
    // The sockets go away; batch 1 is published into the void; they come back.
    engine.rebind(&context);
    let (payload, second) = stored(11, Some(10), 4);
    engine.publish(1, payload);
    let (payload, third) = stored(12, Some(11), 8);
    engine.buffer.push((2, payload));
    // Batch 2 is re-sent until the reconnected subscriber sees it; batch 1 comes by replay.
    let chain = [first, second, third];
    engine.until("the reconnect", || depth(&index, &chain) == 3);
    // The reconnect restored the endpoint in full (the engine might have restarted).
    let stats = stats(&subscriber);
    assert!(stats.reconnects >= 1 && stats.restores >= 2, "{stats:?}");
    subscriber.shutdown();
}

#[test]
fn a_first_batch_sent_before_the_subscription_and_none_after_still_arrives() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    // Published before anyone subscribed: the PUB drops it, and no later batch shows the gap.
    let (payload, root) = stored(1, None, 0);
    engine.publish(0, payload);
    let (index, subscriber) = subscribe(&engine, true);
    engine.serve_until("the batch, from the replay socket", false, || depth(&index, &[root]) == 1);
    // The engine's next batch applies on top, live.
    let (payload, child) = stored(2, Some(1), 4);
    engine.publish(1, payload);
    engine.until("the next batch", || depth(&index, &[root, child]) == 2);
    let stats = stats(&subscriber);
    assert_eq!(stats.restores, 1, "{stats:?}");
    subscriber.shutdown();
}

#[test]
fn an_engine_that_published_nothing_yet_loses_no_first_batch_to_the_probe() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    let (index, subscriber) = subscribe(&engine, true);
    // Replays answer empty for a while (the probe asks): nothing is restored...
    let quiet = Instant::now();
    engine.serve_until("a few empty probes", false, || quiet.elapsed() > Duration::from_secs(1));
    assert_eq!(stats(&subscriber).restores, 0);
    // ...and batch 0, when it comes, is applied, not taken for a duplicate of an empty dump.
    let (payload, root) = stored(1, None, 0);
    engine.publish(0, payload);
    engine.until("the first batch", || depth(&index, &[root]) == 1);
    subscriber.shutdown();
}

#[test]
fn without_a_replay_socket_losses_are_counted_not_healed() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    let (index, subscriber) = subscribe(&engine, false);
    let (payload, root) = stored(1, None, 0);
    engine.publish(0, payload);
    engine.until("the first batch", || depth(&index, &[root]) == 1);
    // Batch 1 is lost; batch 2 (a new root) still applies, and the loss is counted.
    let (payload, other) = stored(2, None, 40);
    engine.publish(2, payload);
    engine.until("batch 2", || depth(&index, &[other]) == 1);
    let stats = stats(&subscriber);
    assert_eq!((stats.unrecovered_gaps, stats.replay_requests), (1, 0), "{stats:?}");
    subscriber.shutdown();
}

#[test]
fn a_malformed_endpoint_refuses_the_start() {
    let index = Arc::new(Mutex::new(ReferenceIndex::new()));
    let config = SubscriberConfig {
        endpoints: vec![ZmqEndpoint::new(WorkerId(1), "nonsense://here")],
        ..SubscriberConfig::default()
    };
    let error = ZmqSubscriber::start(config, index).unwrap_err();
    assert!(error.to_string().contains("nonsense://here"), "{error}");
}

#[test]
fn a_replay_socket_that_never_answers_keeps_the_stash_bounded_and_says_so() {
    let context = zmq::Context::new();
    let engine = Engine::bind(&context);
    let config = SubscriberConfig {
        recovery: RecoveryConfig { buffer_capacity: 32, ..RecoveryConfig::default() },
        replay_timeout: Duration::from_millis(50),
        ..SubscriberConfig::default()
    };
    // The replay ROUTER is bound but never served: every fetch times out.
    let (_index, subscriber) = subscribe_with(&engine, true, config);
    let (payload, _) = stored(1, None, 0);
    let start = Instant::now();
    let mut seq = 0;
    while stats(&subscriber).messages < 2_000 {
        assert!(start.elapsed() < DEADLINE, "timed out: {:?}", stats(&subscriber));
        for _ in 0..100 {
            engine.send(seq, &payload);
            seq += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = Instant::now();
    while stats(&subscriber).replay_failures == 0 || !stats(&subscriber).recovering {
        assert!(start.elapsed() < DEADLINE, "no failure shown: {:?}", stats(&subscriber));
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = stats(&subscriber);
    assert!(stats.stashed <= 32, "the stash holds {} batches: {stats:?}", stats.stashed);
    assert_eq!(stats.events, 0, "{stats:?}");
    subscriber.shutdown();
}

#[test]
fn a_message_over_the_size_limit_is_refused_before_it_is_read() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    let config = SubscriberConfig { max_message_size: 64 << 10, ..SubscriberConfig::default() };
    let (index, subscriber) = subscribe_with(&engine, true, config);
    let (payload, first) = stored(10, None, 0);
    engine.publish(0, payload);
    engine.until("the first batch", || depth(&index, &[first]) == 1);
    // A 1 MiB frame numbered 1 (never buffered for replay): the socket drops it unread.
    engine.send(1, &vec![0xc1; 1 << 20]);
    let (payload, second) = stored(11, Some(10), 4);
    engine.publish(1, payload);
    engine.until("batch 1", || depth(&index, &[first, second]) == 2);
    let stats = stats(&subscriber);
    assert_eq!(stats.decode_errors, 0, "the oversized frame was read: {stats:?}");
    subscriber.shutdown();
}

#[test]
fn two_endpoints_for_one_worker_and_rank_refuse_the_start() {
    let index = Arc::new(Mutex::new(ReferenceIndex::new()));
    let config = SubscriberConfig {
        endpoints: vec![
            ZmqEndpoint::new(WorkerId(1), "tcp://127.0.0.1:5557"),
            ZmqEndpoint::new(WorkerId(1), "tcp://127.0.0.1:5567").with_dp_rank(1),
            ZmqEndpoint::new(WorkerId(1), "tcp://127.0.0.1:5577"),
        ],
        ..SubscriberConfig::default()
    };
    let error = ZmqSubscriber::start(config, index).unwrap_err();
    assert_eq!(error, ZmqError::DuplicateStream { worker: WorkerId(1), dp_rank: 0 });
}

#[test]
fn an_engine_restart_whose_first_batches_were_lost_is_restored_on_reconnect() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    let (index, subscriber) = subscribe(&engine, true);
    let mut old = Vec::new();
    for seq in 0..10u64 {
        let (payload, local) =
            stored(100 + seq, seq.checked_sub(1).map(|s| 100 + s), 4 * seq as u32);
        engine.publish(seq, payload);
        old.push(local);
    }
    engine.until("the first run", || depth(&index, &old) == 10);
    // The engine restarts: its buffer starts over, and batches 0 and 1 go out before the
    // subscriber is back.
    engine.buffer.clear();
    engine.rebind(&context);
    let mut new = Vec::new();
    for seq in 0..6u64 {
        let first = 1_000 + 4 * seq as u32;
        let (payload, local) = stored(200 + seq, seq.checked_sub(1).map(|s| 200 + s), first);
        engine.publish(seq, payload);
        new.push(local);
    }
    engine.until("the second run", || depth(&index, &new) == 6 && depth(&index, &old) == 0);
    assert_eq!(index.lock().unwrap().block_count(WORKER), 6);
    let stats = stats(&subscriber);
    assert!(stats.reconnects >= 1, "{stats:?}");
    subscriber.shutdown();
}

#[test]
fn a_batch_numbered_as_seen_but_stamped_later_restores_the_endpoint() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    let (index, subscriber) = subscribe(&engine, true);
    let mut old = Vec::new();
    for seq in 0..4u64 {
        let parent = seq.checked_sub(1).map(|s| 100 + s);
        let (payload, local) = stored_at(10.0 + seq as f64, 100 + seq, parent, 4 * seq as u32);
        engine.publish(seq, payload);
        old.push(local);
    }
    engine.until("the first run", || depth(&index, &old) == 4);
    // The engine restarted without the connection dropping (a proxy in between): batches 0
    // and 1 of its new run were lost, 2 and 3 arrive numbered like the old run's.
    engine.buffer.clear();
    let mut new = Vec::new();
    for seq in 0..4u64 {
        let parent = seq.checked_sub(1).map(|s| 200 + s);
        let first = 1_000 + 4 * seq as u32;
        let (payload, local) = stored_at(100.0 + seq as f64, 200 + seq, parent, first);
        engine.buffer.push((seq, payload));
        new.push(local);
    }
    for (seq, payload) in &engine.buffer[2..] {
        engine.send(*seq, payload);
    }
    engine.until("the second run", || depth(&index, &new) == 4 && depth(&index, &old) == 0);
    assert_eq!(index.lock().unwrap().block_count(WORKER), 4);
    let stats = stats(&subscriber);
    assert!(stats.suspected_restarts >= 1, "{stats:?}");
    subscriber.shutdown();
}

#[test]
fn a_replay_answer_over_its_byte_bound_is_a_failed_fetch() {
    let context = zmq::Context::new();
    let mut engine = Engine::bind(&context);
    let mut chain = Vec::new();
    for seq in 0..8u64 {
        let (payload, local) =
            stored(100 + seq, seq.checked_sub(1).map(|s| 100 + s), 4 * seq as u32);
        engine.publish(seq, payload);
        chain.push(local);
    }
    let bytes: usize = engine.buffer.iter().map(|(_, payload)| payload.len()).sum();
    let config = SubscriberConfig { max_replay_bytes: bytes - 1, ..SubscriberConfig::default() };
    let (index, subscriber) = subscribe_with(&engine, true, config);
    // The first batch seen asks for a full replay: all eight, one byte over the bound.
    engine.until("a failed replay", || stats(&subscriber).replay_failures >= 2);
    assert_eq!(depth(&index, &chain), 0);
    assert_eq!(stats(&subscriber).events, 0);
    subscriber.shutdown();
}
