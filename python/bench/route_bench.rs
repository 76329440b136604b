//! `KvRouter::route` from Rust on the same state as `python/bench/route_bench.py` (see there):
//! per-call p50/p99 and throughput under 1 and 4 threads.
//!
//! `cargo run --release -p kvroute-python --example route_bench`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kvroute::hash::BlockHasher;
use kvroute::{KvRouter, RouteRequest, RouterConfig, RouterEvent, StoredBlock, Worker};

const BLOCK: u32 = 16;
const BLOCKS: usize = 128;
const PROMPTS: usize = 64;

fn prompt(p: usize) -> Vec<u32> {
    let half = BLOCKS / 2 * BLOCK as usize;
    let system = (0..half).map(|i| (1_000_000 * (p % 8 + 1) + i) as u32);
    system.chain((0..half).map(|i| (50_000_000 + p * 4096 + i) as u32)).collect()
}

fn build(workers: u64) -> KvRouter {
    let mut config = RouterConfig::new(BLOCK);
    config.seed = Some(42);
    let router = KvRouter::new(config).expect("config");
    let hasher = BlockHasher::new(BLOCK).expect("block size");
    for w in 0..workers {
        router.add_worker(Worker::new(w, 0));
    }
    for p in 0..PROMPTS {
        let w = p as u64 % workers;
        let hashes = hasher.hash_request(&prompt(p));
        let blocks = hashes
            .local
            .iter()
            .zip(&hashes.sequence)
            .map(|(l, s)| StoredBlock::new(l.0, s.0 ^ (w + 1)))
            .collect();
        router
            .apply_event(RouterEvent::stored(Worker::new(w, 0), p as u64 + 1, None, blocks))
            .expect("event");
    }
    router.flush().expect("flush");
    router
}

fn per_call(router: &KvRouter, prompts: &[Vec<u32>], calls: usize) -> Vec<u64> {
    (0..calls)
        .map(|i| {
            let tokens = &prompts[i % PROMPTS];
            let t0 = Instant::now();
            let decision = router.route(&RouteRequest::tokens(tokens));
            let elapsed = t0.elapsed().as_nanos() as u64;
            std::hint::black_box(decision.expect("route"));
            elapsed
        })
        .collect()
}

fn throughput(router: &Arc<KvRouter>, prompts: &Arc<Vec<Vec<u32>>>, threads: usize) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|k| {
            let (router, prompts, stop) =
                (Arc::clone(router), Arc::clone(prompts), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    for j in 0..64 {
                        let tokens = &prompts[(n + j + k) % PROMPTS];
                        std::hint::black_box(router.route(&RouteRequest::tokens(tokens)).ok());
                    }
                    n += 64;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let total: usize = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    total as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    for workers in [16u64, 64] {
        let router = Arc::new(build(workers));
        let prompts = Arc::new((0..PROMPTS).map(prompt).collect::<Vec<_>>());
        per_call(&router, &prompts, 2000);
        let mut times = per_call(&router, &prompts, 20_000);
        times.sort_unstable();
        let p50 = times[times.len() / 2] as f64 / 1000.0;
        let p99 = times[times.len() * 99 / 100] as f64 / 1000.0;
        println!("rust workers={workers}: p50 {p50:.2} us  p99 {p99:.2} us");
        let one = throughput(&router, &prompts, 1);
        let four = throughput(&router, &prompts, 4);
        println!(
            "rust workers={workers} throughput: 1 thread {one:.0}/s, 4 threads {four:.0}/s ({:.2}x)",
            four / one
        );
    }
}
