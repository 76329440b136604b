//! Criterion benches of the prefix indexes: `find_matches` by depth and matching workers, and
//! store / remove cost per block, with the reference tree beside the concurrent index.
//!
//! `cargo bench --bench index` (add `-- find_matches` etc. to filter).
#![allow(missing_docs)] // criterion_group! generates undocumented functions

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvroute::index::{EventPool, PoolConfig, ReferenceIndex};
use kvroute::{LocalBlockHash, RouterEvent, StoredBlock, Worker};

/// `workers` workers each holding the same chain of `depth` blocks (under their own names).
fn fleet_events(depth: usize, workers: usize) -> (Vec<RouterEvent>, Vec<LocalBlockHash>) {
    let query: Vec<LocalBlockHash> =
        (0..depth as u64).map(|i| LocalBlockHash(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))).collect();
    let events = (0..workers as u64)
        .map(|w| {
            let blocks = query
                .iter()
                .enumerate()
                .map(|(i, local)| StoredBlock { local: *local, hash: (w << 32 | i as u64).into() })
                .collect();
            RouterEvent::stored(Worker::new(w, 0), 1, None, blocks)
        })
        .collect();
    (events, query)
}

fn find_matches(c: &mut Criterion) {
    let mut group = c.benchmark_group("find_matches");
    group.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    for depth in [16, 128, 1024] {
        for workers in [1, 16, 256] {
            let (events, query) = fleet_events(depth, workers);
            let param = format!("depth{depth}_workers{workers}");
            let pool = EventPool::new(PoolConfig::default()).unwrap();
            for event in &events {
                pool.apply_blocking(event.clone()).unwrap();
            }
            pool.flush().unwrap();
            assert_eq!(pool.find_matches(&query).len(), workers);
            group.bench_with_input(BenchmarkId::new("kvroute", &param), &query, |b, q| {
                b.iter(|| black_box(pool.find_matches(black_box(q))))
            });
            let mut reference = ReferenceIndex::new();
            for event in &events {
                reference.apply(event).unwrap();
            }
            group.bench_with_input(BenchmarkId::new("reference", &param), &query, |b, q| {
                b.iter(|| black_box(reference.find_matches(black_box(q))))
            });
        }
    }
    group.finish();
}

/// Stores, then removals tail first, of 16 workers × a 128-block chain.
fn stream(depth: usize, workers: usize) -> (Vec<RouterEvent>, Vec<RouterEvent>) {
    let (stores, _) = fleet_events(depth, workers);
    let removals = stores
        .iter()
        .map(|event| match &event.event.data {
            kvroute::KvEventData::Stored { blocks, .. } => RouterEvent::removed(
                event.worker(),
                2,
                blocks.iter().rev().map(|block| block.hash).collect(),
            ),
            _ => unreachable!("fleet events are stores"),
        })
        .collect();
    (stores, removals)
}

/// Times `timed` on a fresh pool after `setup`, per iteration.
fn time_pool(iters: u64, lanes: usize, setup: &[RouterEvent], timed: &[RouterEvent]) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let pool = EventPool::new(PoolConfig { lanes, ..PoolConfig::default() }).unwrap();
        for event in setup.iter().cloned() {
            pool.apply_blocking(event).unwrap();
        }
        pool.flush().unwrap();
        let events = timed.to_vec();
        let start = Instant::now();
        for event in events {
            pool.apply_blocking(event).unwrap();
        }
        pool.flush().unwrap();
        total += start.elapsed();
    }
    total
}

/// The same for the reference tree.
fn time_reference(iters: u64, setup: &[RouterEvent], timed: &[RouterEvent]) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let mut index = ReferenceIndex::new();
        for event in setup {
            index.apply(event).unwrap();
        }
        let start = Instant::now();
        for event in timed {
            index.apply(event).unwrap();
        }
        total += start.elapsed();
    }
    total
}

fn per_block(c: &mut Criterion) {
    let (stores, removals) = stream(128, 16);
    let blocks: u64 = stores.iter().map(|e| e.block_ops() as u64).sum();
    let mut group = c.benchmark_group("per_block");
    group.throughput(Throughput::Elements(blocks));
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    for lanes in [1, 2] {
        let name = format!("kvroute_{lanes}lanes");
        group.bench_function(BenchmarkId::new(&name, "store"), |b| {
            b.iter_custom(|iters| time_pool(iters, lanes, &[], &stores))
        });
        group.bench_function(BenchmarkId::new(&name, "remove"), |b| {
            b.iter_custom(|iters| time_pool(iters, lanes, &stores, &removals))
        });
    }
    group.bench_function(BenchmarkId::new("reference", "store"), |b| {
        b.iter_custom(|iters| time_reference(iters, &[], &stores))
    });
    group.bench_function(BenchmarkId::new("reference", "remove"), |b| {
        b.iter_custom(|iters| time_reference(iters, &stores, &removals))
    });
    group.finish();
}

criterion_group!(benches, find_matches, per_block);
criterion_main!(benches);
