//! XXH3-64 of inputs over 240 bytes with a derived secret: the block hash of every block of
//! 61 tokens or more.
//!
//! `xxhash-rust` picks its SIMD width when it is compiled, which for the default x86-64 target
//! means SSE2 (two 64-bit lanes per instruction). Inputs of 241–1,024 bytes (blocks of 61–256
//! tokens) take a path of our own here on x86-64 machines that have AVX2, detected at run
//! time: all eight accumulators in two registers for the whole input, four lanes per
//! instruction. Everything else, and every other machine, goes to `xxhash-rust`. The result is
//! XXH3's, bit for bit: the tests compare both paths on every length and several secrets.
//!
//! For these lengths XXH3 consumes the input in one partial block, so there is no scramble
//! step: `acc` starts at the fixed initial values, each 64-byte stripe `n` but the last is
//! accumulated with the secret at `8n`, the input's last 64 bytes with the secret at
//! `192 − 64 − 7`, and the accumulators are merged with the secret at 11 and `len × PRIME64_1`.

use xxhash_rust::xxh3::xxh3_64_with_secret;

/// Bytes of the secret the block hasher derives from its seed.
pub(crate) const SECRET_LEN: usize = 192;

/// The longest input the AVX2 path takes: one partial XXH3 block (`(192 − 64) / 8` stripes).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const LONGEST: usize = 1_024;

/// XXH3-64 of `input` (over 240 bytes) with `secret`.
#[inline]
pub(crate) fn hash(input: &[u8], secret: &[u8; SECRET_LEN]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if input.len() <= LONGEST && std::is_x86_feature_detected!("avx2") {
        debug_assert!(input.len() > 240);
        // SAFETY: the CPU supports AVX2 (just detected), the only requirement of the
        // `target_feature` function.
        return unsafe { avx2::hash([input], secret) }[0];
    }
    xxh3_64_with_secret(input, secret)
}

/// XXH3-64 of each `block_len`-byte block of `bytes` (over 240 bytes each; a trailing partial
/// block is ignored), in order, handed to `emit`.
///
/// On the AVX2 path blocks go [`INTERLEAVED`] at a time: one block's hash is a chain of
/// dependent multiplies, so hashing several side by side keeps the multipliers busy.
pub(crate) fn hash_blocks(
    bytes: &[u8],
    block_len: usize,
    secret: &[u8; SECRET_LEN],
    mut emit: impl FnMut(u64),
) {
    debug_assert!(block_len > 240);
    #[cfg(target_arch = "x86_64")]
    if block_len <= LONGEST && std::is_x86_feature_detected!("avx2") {
        let group_len = INTERLEAVED * block_len;
        prefetch(bytes, 0, PREFETCH_AHEAD);
        let mut groups = bytes.chunks_exact(group_len);
        for (i, group) in (&mut groups).enumerate() {
            prefetch(bytes, PREFETCH_AHEAD + i * group_len, group_len);
            let blocks: [&[u8]; INTERLEAVED] =
                std::array::from_fn(|i| &group[i * block_len..(i + 1) * block_len]);
            // SAFETY: the CPU supports AVX2 (just detected).
            unsafe { avx2::hash(blocks, secret) }.into_iter().for_each(&mut emit);
        }
        for block in groups.remainder().chunks_exact(block_len) {
            // SAFETY: as above.
            emit(unsafe { avx2::hash([block], secret) }[0]);
        }
        return;
    }
    bytes.chunks_exact(block_len).for_each(|block| emit(xxh3_64_with_secret(block, secret)));
}

/// Bytes the AVX2 path asks the cache for ahead of the block it hashes, every line of them: the
/// hardware's stream prefetcher stops at every 4 KiB page, and a prompt read from memory (not
/// fresh from a tokenizer) would otherwise stall at each. Measured on cold prompts
/// (`router --cold`, 16 workers, decision p50 over Dynamo's): 2 KiB ahead .47–.50, 4 KiB
/// .50–.52, 6 KiB .53–.55; every second or fourth line only, .67–.71.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const PREFETCH_AHEAD: usize = 2048;

/// Asks for `bytes[from..from + len]` (what of it exists) to be brought into the cache.
#[cfg(target_arch = "x86_64")]
#[inline]
fn prefetch(bytes: &[u8], from: usize, len: usize) {
    let end = from.saturating_add(len).min(bytes.len());
    crate::prefetch::prefetch_slice(&bytes[from.min(end)..end], usize::MAX);
}

/// Blocks hashed side by side on the AVX2 path.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const INTERLEAVED: usize = 4;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_loadu_si256, _mm256_mul_epu32, _mm256_shuffle_epi32,
        _mm256_srli_epi64, _mm256_storeu_si256, _mm256_xor_si256,
    };

    use super::{LONGEST, SECRET_LEN};

    const PRIME32_1: u64 = 0x9E37_79B1;
    const PRIME32_2: u64 = 0x85EB_CA77;
    const PRIME32_3: u64 = 0xC2B2_AE3D;
    const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
    const PRIME64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const PRIME64_3: u64 = 0x1656_67B1_9E37_79F9;
    const PRIME64_4: u64 = 0x85EB_CA77_C2B2_AE63;
    const PRIME64_5: u64 = 0x27D4_EB2F_1656_67C5;
    const INITIAL_ACC: [u64; 8] =
        [PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3, PRIME64_4, PRIME32_2, PRIME64_5, PRIME32_1];
    const STRIPE: usize = 64;
    const LAST_STRIPE_SECRET: usize = SECRET_LEN - STRIPE - 7;
    const MERGE_SECRET: usize = 11;

    /// 32 bytes of `bytes` from `at` as a vector (bounds-checked).
    #[inline(always)]
    fn load(bytes: &[u8], at: usize) -> __m256i {
        let chunk: &[u8; 32] = bytes[at..at + 32].try_into().expect("32 bytes");
        // SAFETY: `chunk` is 32 readable bytes; `loadu` has no alignment requirement; AVX
        // support is guaranteed by the `target_feature` of every caller.
        unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) }
    }

    /// One 64-byte stripe into the accumulators (`acc[0]` lanes 0–3, `acc[1]` lanes 4–7).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn accumulate(acc: &mut [__m256i; 2], input: &[u8], at: usize, secret: &[u8], key: usize) {
        for (half, lane) in acc.iter_mut().enumerate() {
            let data = load(input, at + 32 * half);
            let data_key = _mm256_xor_si256(data, load(secret, key + 32 * half));
            let product = _mm256_mul_epu32(data_key, _mm256_srli_epi64::<32>(data_key));
            // Each lane also takes its neighbour's input word (lanes 0↔1, 2↔3).
            let swapped = _mm256_shuffle_epi32::<0b01_00_11_10>(data);
            *lane = _mm256_add_epi64(product, _mm256_add_epi64(*lane, swapped));
        }
    }

    /// XXH3-64 of each of `inputs` (241–1,024 bytes, all of one length) with `secret`, side by
    /// side.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn hash<const N: usize>(
        inputs: [&[u8]; N],
        secret: &[u8; SECRET_LEN],
    ) -> [u64; N] {
        let len = inputs[0].len();
        assert!(len > 240 && len <= LONGEST && inputs.iter().all(|input| input.len() == len));
        let initial = [load_words(&INITIAL_ACC[..4]), load_words(&INITIAL_ACC[4..])];
        let mut acc = [initial; N];
        for stripe in 0..(len - 1) / STRIPE {
            for (acc, input) in acc.iter_mut().zip(inputs) {
                accumulate(acc, input, stripe * STRIPE, secret, stripe * 8);
            }
        }
        for (acc, input) in acc.iter_mut().zip(inputs) {
            accumulate(acc, input, len - STRIPE, secret, LAST_STRIPE_SECRET);
        }
        acc.map(|acc| merge(acc, len, secret))
    }

    /// XXH3's final merge of the accumulators into the hash.
    #[target_feature(enable = "avx2")]
    fn merge(acc: [__m256i; 2], len: usize, secret: &[u8; SECRET_LEN]) -> u64 {
        let mut words = [0u64; 8];
        for (half, lane) in acc.iter().enumerate() {
            let out: &mut [u64; 4] = (&mut words[4 * half..4 * half + 4]).try_into().expect("4");
            // SAFETY: `out` is 32 writable bytes; `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), *lane) };
        }
        let mut result = (len as u64).wrapping_mul(PRIME64_1);
        for pair in 0..4 {
            let key = MERGE_SECRET + 16 * pair;
            let low = words[2 * pair] ^ read_u64(secret, key);
            let high = words[2 * pair + 1] ^ read_u64(secret, key + 8);
            let product = u128::from(low) * u128::from(high);
            result = result.wrapping_add((product as u64) ^ ((product >> 64) as u64));
        }
        avalanche(result)
    }

    #[inline(always)]
    fn load_words(words: &[u64]) -> __m256i {
        let words: &[u64; 4] = words.try_into().expect("4 words");
        // SAFETY: `words` is 32 readable bytes; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_si256(words.as_ptr().cast()) }
    }

    fn read_u64(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    }

    fn avalanche(mut value: u64) -> u64 {
        value ^= value >> 37;
        value = value.wrapping_mul(0x1656_6791_9E37_79F9);
        value ^ (value >> 32)
    }
}

#[cfg(test)]
mod tests {
    use xxhash_rust::const_xxh3::const_custom_default_secret;

    use super::*;

    fn bytes(len: usize, salt: u64) -> Vec<u8> {
        let mut state = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn equals_xxh3_on_every_length_it_takes_and_past_it() {
        for seed in [0, 1337, u64::MAX, 0x1234_5678_9ABC_DEF0] {
            let secret = const_custom_default_secret(seed);
            for len in 241..=1_100 {
                let input = bytes(len, seed ^ len as u64);
                assert_eq!(
                    hash(&input, &secret),
                    xxh3_64_with_secret(&input, &secret),
                    "len {len}"
                );
            }
        }
    }

    /// The AVX2 path itself, wherever the machine has AVX2 (the dispatching test above would
    /// pass without ever taking it).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_path_equals_xxh3() {
        if !std::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this machine: the AVX2 path is not exercised");
            return;
        }
        let secret = const_custom_default_secret(1337);
        for len in [241, 255, 256, 257, 320, 512, 1_000, 1_023, 1_024] {
            let input = bytes(len, len as u64);
            // SAFETY: AVX2 was detected above.
            let ours = unsafe { avx2::hash([&input[..]], &secret) }[0];
            assert_eq!(ours, xxh3_64_with_secret(&input, &secret), "len {len}");
        }
    }

    #[test]
    fn blocks_hash_as_one_at_a_time_whatever_their_count() {
        let secret = const_custom_default_secret(99);
        for block_len in [244, 256, 512, 1_024, 1_028] {
            // 40 blocks reach past the prefetch distance.
            for blocks in (0..=5).chain([40]) {
                // A trailing partial block is ignored.
                let input = bytes(block_len * blocks + block_len / 2, block_len as u64);
                let mut ours = Vec::new();
                hash_blocks(&input, block_len, &secret, |h| ours.push(h));
                let expected: Vec<u64> = input
                    .chunks_exact(block_len)
                    .map(|block| xxh3_64_with_secret(block, &secret))
                    .collect();
                assert_eq!(ours, expected, "{blocks} blocks of {block_len} bytes");
            }
        }
    }
}
