//! Criterion benches of one routing decision, `KvRouter::route`, on the state of a replayed
//! trace: the bundled conversation trace through the mock fleet of 16, 64 or 256 workers
//! (64-token blocks), its events in the router's index, the trace's last 16 requests per
//! worker active on the worker holding most of each. Queries are trace requests as 128-block
//! prompts (8,192 tokens).
//!
//! Groups: `route` (the whole decision from tokens), `route_hashes` (the same from precomputed
//! local hashes: match, load and select only), `route_approximate` (the whole decision in
//! approximate mode: no events, the index holding the router's own decisions of every trace
//! request, each timed decision queued for indexing too), `hash` (the request's local and
//! sequence hashes alone). The side-by-side figures against Dynamo (its approximate indexer
//! too) come from `cargo run --release -p kvroute-compare --bin router [-- --approximate]`.
//!
//! `cargo bench --features sim --bench router`

#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kvroute::hash::{BlockHasher, RequestHashes};
use kvroute::sequences::RequestId;
use kvroute::sim::trace::{TraceRequest, load_trace};
use kvroute::sim::{FleetConfig, bundled_trace_path, replay_fleet};
use kvroute::{KvRouter, RouteRequest, RouterConfig, Worker};

const BLOCK_SIZE: u32 = 64;
const PROMPT_TOKENS: usize = 128 * BLOCK_SIZE as usize;
const ACTIVE_PER_WORKER: usize = 16;
const QUERIES: usize = 256;

/// A request's prompt as exactly [`PROMPT_TOKENS`] tokens (padded with tokens no one holds).
fn prompt(request: &TraceRequest, filler: u32) -> Vec<u32> {
    let mut tokens: Vec<u32> = request.token_iter(0).take(PROMPT_TOKENS).collect();
    let start = tokens.len() as u32;
    tokens.extend((start..PROMPT_TOKENS as u32).map(|i| 0x8000_0000 | (filler << 14) | i));
    tokens
}

fn state(trace: &[TraceRequest], workers: usize) -> (KvRouter, Vec<Vec<u32>>) {
    let replay = replay_fleet(trace, &FleetConfig { workers, ..FleetConfig::default() });
    let router = KvRouter::new(RouterConfig::new(BLOCK_SIZE)).expect("default config");
    for w in 0..workers as u64 {
        router.add_worker(Worker::new(w, 0));
    }
    for event in replay.events {
        router.apply_event(event).expect("lanes are up");
    }
    router.flush().expect("lanes are up");
    let active = (ACTIVE_PER_WORKER * workers).min(trace.len());
    for (i, request) in trace[trace.len() - active..].iter().enumerate() {
        let tokens = prompt(request, i as u32);
        let worker = (0..workers as u64)
            .map(|w| Worker::new(w, 0))
            .max_by_key(|&w| (router.overlap_blocks(&tokens, w), std::cmp::Reverse(w.id.0)))
            .expect("workers");
        let id = RequestId::from(format!("active-{i}"));
        router.add_request(id.clone(), &tokens, worker).expect("known worker");
        if i % 4 != 0 {
            router.mark_prefill_completed(&id).expect("known request");
        }
    }
    let step = (trace.len() / QUERIES).max(1);
    let prompts = (0..QUERIES).map(|q| prompt(&trace[q * step], 0x3000 + q as u32)).collect();
    (router, prompts)
}

/// A router in approximate mode that has routed every trace request (its first 128 blocks).
fn approximate_state(trace: &[TraceRequest], workers: usize) -> KvRouter {
    let config = RouterConfig { use_kv_events: false, ..RouterConfig::new(BLOCK_SIZE) };
    let router = KvRouter::new(config).expect("approximate config");
    for w in 0..workers as u64 {
        router.add_worker(Worker::new(w, 0));
    }
    for request in trace {
        let tokens: Vec<u32> = request.token_iter(0).take(PROMPT_TOKENS).collect();
        router.route(&RouteRequest::tokens(&tokens)).expect("routes");
    }
    router.flush().expect("lanes are up");
    router
}

fn bench_route(c: &mut Criterion) {
    let trace = load_trace(bundled_trace_path()).expect("the bundled trace loads");
    let hasher = BlockHasher::new(BLOCK_SIZE).expect("block size");
    let mut hash_prompts = Vec::new();
    for workers in [16, 64, 256] {
        let (router, prompts) = state(&trace, workers);
        let hashed: Vec<RequestHashes> = prompts.iter().map(|p| hasher.hash_request(p)).collect();

        let mut group = c.benchmark_group("route");
        group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
        let mut next = 0;
        group.bench_function(BenchmarkId::from_parameter(workers), |b| {
            b.iter(|| {
                next = (next + 1) % prompts.len();
                black_box(router.route(&RouteRequest::tokens(&prompts[next])).expect("routes"))
            })
        });
        group.finish();

        let mut group = c.benchmark_group("route_hashes");
        group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
        group.bench_function(BenchmarkId::from_parameter(workers), |b| {
            b.iter(|| {
                next = (next + 1) % hashed.len();
                let request = RouteRequest::hashes(&hashed[next].local, PROMPT_TOKENS);
                black_box(router.route(&request).expect("routes"))
            })
        });
        group.finish();

        let approximate = approximate_state(&trace, workers);
        let mut group = c.benchmark_group("route_approximate");
        group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
        group.bench_function(BenchmarkId::from_parameter(workers), |b| {
            b.iter(|| {
                next = (next + 1) % prompts.len();
                let request = RouteRequest::tokens(&prompts[next]);
                black_box(approximate.route(&request).expect("routes"))
            })
        });
        group.finish();
        hash_prompts = prompts;
    }

    let mut group = c.benchmark_group("hash");
    let (mut out, mut bytes) = (RequestHashes::default(), Vec::new());
    let mut next = 0;
    group.bench_function("128x64", |b| {
        b.iter(|| {
            next = (next + 1) % hash_prompts.len();
            hasher.hash_request_into(&hash_prompts[next], &[], &mut out, &mut bytes);
            black_box(out.sequence.len())
        })
    });
    let locals: Vec<_> = hash_prompts.iter().map(|p| hasher.local_hashes(p)).collect();
    group.bench_function("128x64_local_only", |b| {
        b.iter(|| {
            next = (next + 1) % hash_prompts.len();
            black_box(hasher.local_hashes(&hash_prompts[next]))
        })
    });
    group.bench_function("128_sequence_only", |b| {
        b.iter(|| {
            next = (next + 1) % locals.len();
            black_box(kvroute::hash::sequence_hashes(&locals[next]))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_route);
criterion_main!(benches);
