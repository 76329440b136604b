//! Wire throughput and latency: how fast [`VllmDecoder`] decodes vLLM KV event batches,
//! and how long a published batch takes to become visible in the index through the ZMQ
//! subscriber on loopback.
//!
//! Decode: batches of 16 `BlockStored` events (4 blocks of 16 tokens each) and 4 `BlockRemoved`
//! (4 blocks each), in vLLM 0.33's map encoding and in the tuple encoding; reported as events/s
//! and block ops/s (stored + removed blocks) on one thread, local hashing included.
//!
//! Lag: a PUB socket and a replay ROUTER in this process (vLLM's framing), the subscriber
//! feeding an `EventPool`; each batch stores one new block, and the publishing thread spins on
//! `find_matches` until the block is visible. One batch in flight at a time; p50/p90/p99/max over
//! the samples after a warm-up.
//!
//! `cargo run --release --features zmq --example wire_bench [-- --samples N]`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvroute::hash::BlockHasher;
use kvroute::index::{EventPool, PoolConfig};
use kvroute::wire::VllmDecoder;
use kvroute::wire::zmq::{SubscriberConfig, ZmqEndpoint, ZmqSubscriber};
use kvroute::{Worker, WorkerId};
use serde_json::{Value, json};

const BLOCK: u32 = 16;

fn stored_map(hashes: &[u64], parent: Option<u64>, tokens: &[u32]) -> Value {
    json!({"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
        "token_ids": tokens, "block_size": BLOCK, "lora_id": null, "medium": "GPU",
        "lora_name": null})
}

fn stored_tuple(hashes: &[u64], parent: Option<u64>, tokens: &[u32]) -> Value {
    json!(["BlockStored", hashes, parent, tokens, BLOCK, null, "GPU", null])
}

/// One batch of 16 stores and 4 removes, 80 block ops, as MessagePack.
fn batch(k: u64, tuple: bool) -> Vec<u8> {
    let mut events = Vec::new();
    for e in 0..16u64 {
        let base = (k * 16 + e) * 4;
        let hashes: Vec<u64> = (base..base + 4).collect();
        let tokens: Vec<u32> = (0..4 * BLOCK).map(|t| (base as u32).wrapping_mul(31) ^ t).collect();
        let parent = (e > 0).then(|| base - 1);
        events.push(if tuple {
            stored_tuple(&hashes, parent, &tokens)
        } else {
            stored_map(&hashes, parent, &tokens)
        });
    }
    for r in 0..4u64 {
        let hashes: Vec<u64> = (r * 4..r * 4 + 4).collect();
        events.push(if tuple {
            json!(["BlockRemoved", hashes, "GPU"])
        } else {
            json!({"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"})
        });
    }
    rmp_serde::to_vec(&json!([1.7e9, events, 0])).expect("encode")
}

fn decode_throughput(tuple: bool) {
    let payloads: Vec<Vec<u8>> = (0..64).map(|k| batch(k, tuple)).collect();
    let bytes: usize = payloads.iter().map(Vec::len).sum::<usize>() / payloads.len();
    let mut decoder = VllmDecoder::new(WorkerId(1));
    let (mut events, mut ops, mut rounds) = (0usize, 0usize, 0usize);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        for (seq, payload) in payloads.iter().enumerate() {
            let batch = decoder.decode_batch(seq as u64, payload).expect("decode");
            events += batch.events.len();
            ops += batch.block_ops();
            black_box(&batch);
        }
        rounds += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "decode {:<6} {:>5} B/batch  {:>6.2} M events/s  {:>6.2} M block ops/s  {:>7.0} batches/s",
        if tuple { "tuple" } else { "map" },
        bytes,
        events as f64 / secs / 1e6,
        ops as f64 / secs / 1e6,
        (rounds * payloads.len()) as f64 / secs,
    );
}

/// A one-block batch whose block is `k`'s own.
fn lag_batch(k: u64) -> (Vec<u8>, Vec<u32>) {
    let tokens: Vec<u32> = (0..BLOCK).map(|t| (k as u32) * BLOCK + t + 1_000_000).collect();
    let payload =
        rmp_serde::to_vec(&json!([0.0, [stored_map(&[k + 1], None, &tokens)], 0])).expect("encode");
    (payload, tokens)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn lag(samples: usize) {
    let context = zmq::Context::new();
    let publisher = context.socket(zmq::PUB).expect("PUB");
    publisher.bind("tcp://127.0.0.1:*").expect("bind PUB");
    let replay = context.socket(zmq::ROUTER).expect("ROUTER");
    replay.bind("tcp://127.0.0.1:*").expect("bind ROUTER");
    let address = |s: &zmq::Socket| s.get_last_endpoint().expect("endpoint").expect("utf-8");

    let pool = Arc::new(EventPool::new(PoolConfig::default()).expect("pool"));
    let worker = Worker::new(1, 0);
    let config = SubscriberConfig {
        endpoints: vec![
            ZmqEndpoint::new(worker.id, address(&publisher)).with_replay(address(&replay)),
        ],
        ..SubscriberConfig::default()
    };
    let subscriber = ZmqSubscriber::start(config, pool.clone()).expect("subscriber");
    let hasher = BlockHasher::new(BLOCK).expect("hasher");
    let mut buffer: Vec<(u64, Vec<u8>)> = Vec::new();
    let serve_replay = |buffer: &[(u64, Vec<u8>)]| {
        while let Ok(frames) = replay.recv_multipart(zmq::DONTWAIT) {
            let [client, _, start] = <[Vec<u8>; 3]>::try_from(frames).expect("3 frames");
            let start = u64::from_be_bytes(start.try_into().expect("8 bytes"));
            for (seq, payload) in buffer.iter().filter(|(seq, _)| *seq >= start) {
                let frames: [&[u8]; 5] = [&client, b"", b"kv", &seq.to_be_bytes(), payload];
                replay.send_multipart(frames, 0).expect("replay");
            }
            let end: [&[u8]; 5] = [&client, b"", b"", &[0xff; 8], b""];
            replay.send_multipart(end, 0).expect("replay end");
        }
    };

    let warmup = 200;
    let mut lags = Vec::with_capacity(samples);
    for k in 0..(warmup + samples) as u64 {
        let (payload, tokens) = lag_batch(k);
        let local = hasher.local_hashes(&tokens);
        buffer.push((k, payload.clone()));
        let sent = Instant::now();
        let frames: [&[u8]; 3] = [b"kv", &k.to_be_bytes(), &payload];
        publisher.send_multipart(frames, 0).expect("publish");
        // The first batches may be lost to the subscription's start: resend them until seen
        // (the replay socket restores the stream from them meanwhile).
        let mut resent = sent;
        while pool.find_matches(&local).get(worker) == 0 {
            serve_replay(&buffer);
            if k < 10 && resent.elapsed() > Duration::from_millis(100) {
                publisher.send_multipart(frames, 0).expect("publish");
                resent = Instant::now();
            }
            assert!(sent.elapsed() < Duration::from_secs(10), "batch {k} never became visible");
            std::thread::yield_now();
        }
        if k as usize >= warmup {
            lags.push(sent.elapsed());
        }
    }
    lags.sort_unstable();
    let stats = subscriber.stats();
    println!(
        "lag publish→visible (loopback, {} samples): p50 {:.1} µs  p90 {:.1} µs  p99 {:.1} µs  max {:.1} µs  ({} events, {} gaps)",
        lags.len(),
        percentile(&lags, 0.5).as_secs_f64() * 1e6,
        percentile(&lags, 0.9).as_secs_f64() * 1e6,
        percentile(&lags, 0.99).as_secs_f64() * 1e6,
        lags.last().map_or(0.0, |d| d.as_secs_f64() * 1e6),
        stats.events(),
        stats.endpoints[0].gaps,
    );
    subscriber.shutdown();
}

fn main() {
    let samples = std::env::args()
        .skip_while(|a| a != "--samples")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5_000);
    decode_throughput(false);
    decode_throughput(true);
    lag(samples);
}
