//! Replica convergence time over NATS on loopback: from a change on replica A (an
//! `add_request` or a `free` on its tracker) to the change being visible on replica B, one
//! change at a time, p50/p99 over `--events` changes (10,000 by default). Then a burst:
//! `--burst` changes made as fast as one thread can, and the time until B's load view equals A's
//! (sync throughput; changes the bounded outbox had to drop are reported).
//!
//! ```text
//! cargo run --release --features nats --example nats_convergence [-- --events N] [--burst N] [--url nats://…]
//! ```
//!
//! Without `--url` it starts its own `nats-server` on a free loopback port (Debian's package).

#[path = "../tests/support/nats_server.rs"]
mod nats_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvroute::nats::{NatsConfig, NatsReplica};
use kvroute::sequences::{MultiWorkerSequences, RequestId};
use kvroute::{SequenceHash, Worker};

fn replica(url: &str, router_id: u64) -> (NatsReplica, Arc<MultiWorkerSequences>) {
    let nats = NatsReplica::start(NatsConfig::new(url, "bench", router_id)).expect("transport");
    let tracker = MultiWorkerSequences::builder(16)
        .replica(router_id, nats.publisher())
        .build()
        .expect("tracker");
    let tracker = Arc::new(tracker);
    tracker.update_workers((0..8).map(|id| Worker::new(id, 0)));
    nats.attach(tracker.clone()).expect("attach");
    assert!(nats.wait_connected(Duration::from_secs(10)), "connected");
    (nats, tracker)
}

/// Spins (yielding) until `visible`; the time it took from `start`.
fn until(start: Instant, mut visible: impl FnMut() -> bool) -> Duration {
    let deadline = start + Duration::from_secs(10);
    while !visible() {
        assert!(Instant::now() < deadline, "a change took over 10 s to converge");
        std::thread::yield_now();
    }
    start.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut events, mut burst, mut url) = (10_000usize, 200_000usize, None);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--events", Some(n)) => events = n.parse().expect("--events N"),
            ("--burst", Some(n)) => burst = n.parse().expect("--burst N"),
            ("--url", Some(u)) => url = Some(u),
            _ => {
                panic!("usage: nats_convergence [--events N] [--burst N] [--url nats://host:port]")
            }
        }
    }
    let server = url.is_none().then(nats_server::NatsServer::start);
    let url = url.unwrap_or_else(|| server.as_ref().map(|s| s.url()).unwrap_or_default());
    let (nats_a, a) = replica(&url, 1);
    let (nats_b, b) = replica(&url, 2);

    let blocks: Vec<SequenceHash> = (0..32).map(SequenceHash).collect();
    let mut adds = Vec::with_capacity(events / 2);
    let mut frees = Vec::with_capacity(events / 2);
    let started = Instant::now();
    for i in 0..events / 2 {
        let id = RequestId::from(format!("r{i}").as_str());
        let worker = Worker::new(i as u64 % 8, 0);
        let t = Instant::now();
        a.add_request(id.clone(), worker, Some(&blocks), 512, 0).expect("add");
        adds.push(until(t, || b.worker_of(&id).is_some()));
        let t = Instant::now();
        a.free(&id).expect("free");
        frees.push(until(t, || b.worker_of(&id).is_none()));
    }
    let wall = started.elapsed();
    let mut all: Vec<Duration> = adds.iter().chain(&frees).copied().collect();
    for samples in [&mut adds, &mut frees, &mut all] {
        samples.sort_unstable();
    }
    println!("replica convergence over NATS (loopback), {} changes, one at a time", all.len());
    println!("{:<8} {:>10} {:>10} {:>10} {:>10}", "change", "p50", "p90", "p99", "max");
    for (name, samples) in [("add", &adds), ("free", &frees), ("all", &all)] {
        println!(
            "{name:<8} {:>10.1?} {:>10.1?} {:>10.1?} {:>10.1?}",
            percentile(samples, 0.5),
            percentile(samples, 0.9),
            percentile(samples, 0.99),
            samples[samples.len() - 1],
        );
    }
    println!("wall {wall:.2?}; A: {}; B: {}", nats_a.stats(), nats_b.stats());

    // The burst: `burst` changes (adds, and frees of 9 requests in 10) as fast as one thread
    // makes them; then the time until B's load view equals A's.
    let before = nats_a.stats();
    let started = Instant::now();
    let mut total = 0u64;
    for i in 0..burst / 2 {
        let id = RequestId::from(format!("burst{i}").as_str());
        let worker = Worker::new(i as u64 % 8, 0);
        a.add_request(id.clone(), worker, Some(&blocks), 512, 0).expect("add");
        total += 1;
        if i % 10 != 0 {
            a.free(&id).expect("free");
            total += 1;
        }
    }
    let made = started.elapsed();
    let handled = || {
        let s = nats_a.stats();
        (s.published + s.dropped + s.unsent) - (before.published + before.dropped + before.unsent)
    };
    until(started, || handled() == total);
    let sorted = |tracker: &MultiWorkerSequences| {
        let mut loads = tracker.loads();
        loads.sort_by_key(|load| load.worker);
        loads
    };
    let wait = Instant::now() + Duration::from_secs(30);
    while sorted(&a) != sorted(&b) && Instant::now() < wait {
        std::thread::sleep(Duration::from_micros(200));
    }
    let converged = sorted(&a) == sorted(&b);
    let done = started.elapsed();
    let (sa, sb) = (nats_a.stats(), nats_b.stats());
    println!(
        "burst: {total} changes made in {made:.2?} ({:.0}/s); B {} A after {done:.2?} \
         ({:.0} changes/s end to end); A published {}, dropped (outbox full) {}; B gaps {}, \
         snapshots applied {}",
        total as f64 / made.as_secs_f64(),
        if converged { "equals" } else { "still differs from (30 s)" },
        total as f64 / done.as_secs_f64(),
        sa.published - before.published,
        sa.dropped - before.dropped,
        sb.gaps,
        sb.snapshots_applied,
    );
}
