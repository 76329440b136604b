//! Criterion benches of the active-sequence tracker on a fleet-sized state: 64 workers × 1,000
//! requests of 100–200 blocks (a 32-block system prompt shared by all, per-worker conversation
//! contexts of 0–48 blocks, private tails), against a naive baseline (per worker a plain
//! `HashMap` of block refcounts, no locks, every candidate block looked up on every worker).
//!
//! Groups: `potential_loads` (all-worker query for a 256-block candidate), `churn` (free one
//! request + add a fresh one), `fanout` (what a rayon fork-join over the shards costs by itself,
//! to judge whether parallelising the query could pay on this machine).
//!
//! `cargo bench --features sim --bench sequences`

#![allow(missing_docs)]

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvroute::sequences::{MultiWorkerSequences, RequestId};
use kvroute::sim::load::{LoadRng, SequenceLoad};
use kvroute::{OverlapScores, SequenceHash, Worker};
use rayon::prelude::*;

const WORKERS: usize = SequenceLoad::WORKERS;
const REQUESTS_PER_WORKER: usize = SequenceLoad::REQUESTS_PER_WORKER;
const BLOCK_SIZE: usize = SequenceLoad::BLOCK_SIZE;
const CANDIDATE_BLOCKS: usize = SequenceLoad::CANDIDATE_BLOCKS;
const STATE: &str = "64w-1000r";

/// The baseline: one plain refcount map per worker, recounting every candidate block.
#[derive(Default)]
struct Naive {
    pinned: Vec<HashMap<SequenceHash, u32>>,
    tokens: Vec<usize>,
    outputs: Vec<usize>,
    requests: HashMap<RequestId, (usize, Vec<SequenceHash>, usize)>,
}

impl Naive {
    fn add(&mut self, id: RequestId, worker: usize, blocks: &[SequenceHash], tokens: usize) {
        if self.pinned.is_empty() {
            self.pinned = vec![HashMap::new(); WORKERS];
            self.tokens = vec![0; WORKERS];
            self.outputs = vec![0; WORKERS];
        }
        for &block in blocks {
            *self.pinned[worker].entry(block).or_insert(0) += 1;
        }
        self.tokens[worker] += tokens;
        self.requests.insert(id, (worker, blocks.to_vec(), tokens));
    }

    fn free(&mut self, id: &RequestId) {
        let Some((worker, blocks, tokens)) = self.requests.remove(id) else { return };
        for block in blocks {
            let pinned = &mut self.pinned[worker];
            if let Some(count) = pinned.get_mut(&block) {
                *count -= 1;
                if *count == 0 {
                    pinned.remove(&block);
                }
            }
        }
        self.tokens[worker] -= tokens;
    }

    fn potential(
        &self,
        candidate: &[SequenceHash],
        isl: usize,
        overlaps: &OverlapScores,
    ) -> Vec<(usize, usize)> {
        (0..WORKERS)
            .map(|w| {
                let pinned = &self.pinned[w];
                let new = candidate.iter().filter(|block| !pinned.contains_key(block)).count();
                let cached = overlaps.get(Worker::new(w as u64, 0)) as usize * BLOCK_SIZE;
                (pinned.len() + self.outputs[w] + new, self.tokens[w] + isl.saturating_sub(cached))
            })
            .collect()
    }
}

fn build(
    rng: &mut LoadRng,
    workload: &SequenceLoad,
    shards: usize,
) -> (MultiWorkerSequences, Naive, Vec<Vec<RequestId>>) {
    let fleet = MultiWorkerSequences::builder(BLOCK_SIZE as u32)
        .worker_shards(shards)
        .build()
        .expect("config");
    fleet.update_workers((0..WORKERS as u64).map(|w| Worker::new(w, 0)));
    let mut naive = Naive::default();
    let mut active = vec![Vec::new(); WORKERS];
    for slot in 0..REQUESTS_PER_WORKER {
        for (worker, ids) in active.iter_mut().enumerate() {
            let (blocks, isl, overlap) = workload.request(rng, worker);
            let id = RequestId::from(format!("w{worker}-r{slot}"));
            let w = Worker::new(worker as u64, 0);
            fleet.add_request(id.clone(), w, Some(&blocks), isl, overlap).expect("add");
            naive.add(id.clone(), worker, &blocks, isl - overlap as usize * BLOCK_SIZE);
            ids.push(id);
        }
    }
    (fleet, naive, active)
}

fn benches(c: &mut Criterion) {
    let mut rng = LoadRng::new(0x5EED);
    let workload = SequenceLoad::new(&mut rng);
    let (fleet, mut naive, mut active) =
        build(&mut rng, &workload, kvroute::sequences::DEFAULT_WORKER_SHARDS);
    let mut naive_active = active.clone();
    let candidates: Vec<_> = (0..64)
        .map(|_| workload.candidate(&mut rng))
        .map(|candidate| {
            let overlaps = candidate.overlaps();
            (candidate.blocks, overlaps)
        })
        .collect();
    let isl = CANDIDATE_BLOCKS * BLOCK_SIZE;

    let mut group = c.benchmark_group("potential_loads");
    group.throughput(Throughput::Elements(1));
    let mut next = 0;
    group.bench_function(BenchmarkId::new("kvroute", STATE), |b| {
        b.iter(|| {
            let (blocks, overlaps) = &candidates[next % candidates.len()];
            next += 1;
            black_box(fleet.potential_loads(blocks, isl, overlaps))
        })
    });
    let mut out = Vec::new();
    group.bench_function(BenchmarkId::new("kvroute-into", STATE), |b| {
        b.iter(|| {
            let (blocks, overlaps) = &candidates[next % candidates.len()];
            next += 1;
            fleet.potential_loads_into(blocks, isl, overlaps, &mut out);
            black_box(out.len())
        })
    });
    let none = OverlapScores::new();
    group.bench_function(BenchmarkId::new("kvroute-no-overlaps", STATE), |b| {
        b.iter(|| {
            let (blocks, _) = &candidates[next % candidates.len()];
            next += 1;
            fleet.potential_loads_into(blocks, isl, &none, &mut out);
            black_box(out.len())
        })
    });
    group.bench_function(BenchmarkId::new("naive", STATE), |b| {
        b.iter(|| {
            let (blocks, overlaps) = &candidates[next % candidates.len()];
            next += 1;
            black_box(naive.potential(blocks, isl, overlaps))
        })
    });
    group.finish();

    // How the worker-shard count trades query cost (one trie walk per shard).
    let mut group = c.benchmark_group("potential_loads_by_shards");
    for shards in [1, 4, 16] {
        let mut rng = LoadRng::new(0x5EED);
        let workload = SequenceLoad::new(&mut rng);
        let (fleet, _, _) = build(&mut rng, &workload, shards);
        group.bench_function(BenchmarkId::new("kvroute", shards), |b| {
            b.iter(|| {
                let (blocks, overlaps) = &candidates[next % candidates.len()];
                next += 1;
                fleet.potential_loads_into(blocks, isl, overlaps, &mut out);
                black_box(out.len())
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("fanout");
    let shards = fleet.shard_count();
    group.bench_function(BenchmarkId::new("rayon-empty", shards), |b| {
        b.iter(|| {
            (0..shards).into_par_iter().for_each(|shard| {
                black_box(shard);
            })
        })
    });
    group.finish();

    let mut group = c.benchmark_group("churn");
    group.throughput(Throughput::Elements(1));
    let mut counter = 0u64;
    group.bench_function(BenchmarkId::new("kvroute", STATE), |b| {
        b.iter(|| {
            let (worker, slot) = (rng.below(WORKERS), rng.below(REQUESTS_PER_WORKER));
            fleet.free(&active[worker][slot]).expect("live");
            let (blocks, isl, overlap) = workload.request(&mut rng, worker);
            counter += 1;
            let id = RequestId::from(format!("k{counter}"));
            let w = Worker::new(worker as u64, 0);
            fleet.add_request(id.clone(), w, Some(&blocks), isl, overlap).expect("add");
            active[worker][slot] = id;
        })
    });
    group.bench_function(BenchmarkId::new("naive", STATE), |b| {
        b.iter(|| {
            let (worker, slot) = (rng.below(WORKERS), rng.below(REQUESTS_PER_WORKER));
            naive.free(&naive_active[worker][slot]);
            let (blocks, isl, overlap) = workload.request(&mut rng, worker);
            counter += 1;
            let id = RequestId::from(format!("n{counter}"));
            naive.add(id.clone(), worker, &blocks, isl - overlap as usize * BLOCK_SIZE);
            naive_active[worker][slot] = id;
        })
    });
    group.finish();
}

criterion_group! {
    name = sequences;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(sequences);
