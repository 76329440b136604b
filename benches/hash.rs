//! Criterion benches of request hashing: [`BlockHasher::hash_request_into`], the local and
//! sequence hashes a routing decision starts with, into reused buffers, on a prompt fresh in
//! cache. Block sizes on both of XXH3's paths (16 and 32 tokens: 64- and 128-byte blocks;
//! 64 and 128 tokens: the AVX2 path of `src/hash/xxh3_long.rs` where the machine has it), for a
//! short and a long prompt.
//!
//! `cargo bench --bench hash`; to compare two builds, run it on the first with
//! `-- --save-baseline before`, then on the second with `-- --baseline before`.

#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvroute::hash::{BlockHasher, RequestHashes};

fn tokens(count: usize) -> Vec<u32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as u32
        })
        .collect()
}

fn hash_request_into(c: &mut Criterion) {
    let mut group = c.benchmark_group("hash_request_into");
    for block_size in [16u32, 32, 64, 128] {
        let hasher = BlockHasher::new(block_size).expect("a block size above zero");
        for count in [512usize, 8_192] {
            let prompt = tokens(count);
            let (mut out, mut scratch) = (RequestHashes::default(), Vec::new());
            group.throughput(Throughput::Elements(count as u64));
            let id = BenchmarkId::new(format!("block_{block_size}"), count);
            group.bench_with_input(id, &prompt, |b, prompt| {
                b.iter(|| {
                    hasher.hash_request_into(black_box(prompt), &[], &mut out, &mut scratch);
                    black_box(&out);
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, hash_request_into);
criterion_main!(benches);
