//! Block and sequence hashing, byte-compatible with Dynamo's `dynamo-kv-router`
//! (ARCHITECTURE.md §3).
//!
//! ```
//! use kvroute::hash::BlockHasher;
//!
//! let hasher = BlockHasher::new(4)?.with_lora("my-lora");
//! let tokens: Vec<u32> = (0..10).collect();
//! let request = hasher.hash_request(&tokens);
//! assert_eq!(request.local.len(), 2); // the trailing partial block is not hashed
//! assert_eq!(request.sequence[0].0, request.local[0].0);
//! # Ok::<(), kvroute::hash::HashError>(())
//! ```

use std::fmt;
use std::num::NonZeroU32;

use xxhash_rust::const_xxh3::const_custom_default_secret;
use xxhash_rust::xxh3::xxh3_64_with_seed;

mod xxh3_long;

use xxh3_long::SECRET_LEN;

use crate::event::{LocalBlockHash, SequenceHash};

/// The base seed of every hash (and the chain seed of sequence hashes).
pub const SEED: u64 = 1337;

/// Why a hasher could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HashError {
    /// A block must hold at least one token.
    ZeroBlockSize,
}

impl fmt::Display for HashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBlockSize => f.write_str("block size must be at least one token"),
        }
    }
}

impl std::error::Error for HashError {}

/// Hashes token sequences into blocks for one block size and one salt (LoRA, cache namespace).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BlockHasher {
    block_size: NonZeroU32,
    seed: u64,
    /// XXH3's secret for `seed`, derived once: for inputs over 240 bytes, hashing with it is
    /// exactly hashing with the seed, without deriving the secret again for every block.
    secret: [u8; SECRET_LEN],
}

/// The local and sequence hashes of one request, computed once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHashes {
    /// One content hash per full block.
    pub local: Vec<LocalBlockHash>,
    /// One prefix hash per full block.
    pub sequence: Vec<SequenceHash>,
}

impl fmt::Debug for BlockHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockHasher")
            .field("block_size", &self.block_size)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl BlockHasher {
    /// A hasher for blocks of `block_size` tokens, unsalted.
    pub fn new(block_size: u32) -> Result<Self, HashError> {
        let block_size = NonZeroU32::new(block_size).ok_or(HashError::ZeroBlockSize)?;
        Ok(Self { block_size, seed: SEED, secret: const_custom_default_secret(SEED) }.reseeded())
    }

    /// Salts the hashes with a LoRA adapter name (an empty name adds no salt).
    pub fn with_lora(mut self, lora_name: &str) -> Self {
        if !lora_name.is_empty() {
            self.seed = self.seed.wrapping_add(xxh3_64_with_seed(lora_name.as_bytes(), 0));
        }
        self.reseeded()
    }

    /// Salts the hashes with a cache namespace (an empty namespace adds no salt).
    pub fn with_namespace(mut self, cache_namespace: &str) -> Self {
        if !cache_namespace.is_empty() {
            self.seed = self.seed.wrapping_add(xxh3_64_with_seed(cache_namespace.as_bytes(), 1));
        }
        self.reseeded()
    }

    /// Tokens per block.
    pub fn block_size(&self) -> u32 {
        self.block_size.get()
    }

    /// The XXH3 seed of local block hashes, salts included.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The content hash of every full block of `tokens`; a trailing partial block is dropped.
    pub fn local_hashes(&self, tokens: &[u32]) -> Vec<LocalBlockHash> {
        self.local_hashes_mm(tokens, &[])
    }

    /// Like [`Self::local_hashes`], with the multimodal objects of each block: `block_mm[i]` holds
    /// the `mm_hash` of every object whose placeholders touch block `i` (missing entries and empty
    /// lists mean none).
    pub fn local_hashes_mm(&self, tokens: &[u32], block_mm: &[Vec<u64>]) -> Vec<LocalBlockHash> {
        let size = self.block_size.get() as usize;
        let mut bytes = Vec::new();
        if block_mm.iter().all(Vec::is_empty) {
            let mut local = Vec::with_capacity(tokens.len() / size);
            self.for_each_text_hash(tokens, &mut bytes, |hash| local.push(hash));
            return local;
        }
        let mut mm_sorted = Vec::new();
        tokens
            .chunks_exact(size)
            .enumerate()
            .map(|(i, block)| match block_mm.get(i).filter(|mm| !mm.is_empty()) {
                None => self.hash_block(block, &mut bytes),
                Some(mm) => {
                    bytes.clear();
                    for token in block {
                        bytes.extend_from_slice(&token.to_le_bytes());
                    }
                    mm_sorted.clone_from(mm);
                    mm_sorted.sort_unstable();
                    for hash in &mm_sorted {
                        bytes.extend_from_slice(&hash.to_le_bytes());
                    }
                    self.hash_bytes(&bytes)
                }
            })
            .collect()
    }

    /// The content hash of one text-only block (`block` is not checked against the block size);
    /// `scratch` is reused between calls to avoid an allocation per block.
    pub(crate) fn hash_block(&self, block: &[u32], scratch: &mut Vec<u8>) -> LocalBlockHash {
        self.hash_bytes(token_bytes(block, scratch))
    }

    /// Hands the content hash of every full block of text-only `tokens` to `emit`, in order.
    #[inline]
    fn for_each_text_hash(
        &self,
        tokens: &[u32],
        scratch: &mut Vec<u8>,
        mut emit: impl FnMut(LocalBlockHash),
    ) {
        let size = self.block_size.get() as usize;
        let full = &tokens[..tokens.len() - tokens.len() % size];
        let block_len = size * 4;
        let bytes = token_bytes(full, scratch);
        if block_len > SHORT_MAX {
            xxh3_long::hash_blocks(bytes, block_len, &self.secret, |h| emit(LocalBlockHash(h)));
        } else {
            for block in bytes.chunks_exact(block_len) {
                emit(LocalBlockHash(xxh3_64_with_seed(block, self.seed)));
            }
        }
    }

    /// XXH3-64 of `bytes` with this hasher's seed.
    #[inline]
    fn hash_bytes(&self, bytes: &[u8]) -> LocalBlockHash {
        if bytes.len() > SHORT_MAX {
            LocalBlockHash(xxh3_long::hash(bytes, &self.secret))
        } else {
            LocalBlockHash(xxh3_64_with_seed(bytes, self.seed))
        }
    }

    /// The secret matching the current seed.
    fn reseeded(mut self) -> Self {
        self.secret = const_custom_default_secret(self.seed);
        self
    }

    /// Local and sequence hashes of a request, in one pass over its tokens.
    pub fn hash_request(&self, tokens: &[u32]) -> RequestHashes {
        self.hash_request_mm(tokens, &[])
    }

    /// [`Self::hash_request_mm`] into reused buffers (cleared first), with `scratch` for the
    /// token bytes: the router's allocation-free path (multimodal blocks still allocate).
    pub fn hash_request_into(
        &self,
        tokens: &[u32],
        block_mm: &[Vec<u64>],
        out: &mut RequestHashes,
        scratch: &mut Vec<u8>,
    ) {
        let RequestHashes { local, sequence } = out;
        local.clear();
        sequence.clear();
        if !block_mm.iter().all(Vec::is_empty) {
            *local = self.local_hashes_mm(tokens, block_mm);
            extend_sequence_hashes(local, sequence);
            return;
        }
        let blocks = tokens.len() / self.block_size.get() as usize;
        local.reserve(blocks);
        sequence.reserve(blocks);
        // Each sequence hash is taken as its block's hash comes out, not in a second pass: the
        // chain of sequence hashes is one dependent multiply after another, and interleaved
        // with the block hashes (independent vector work, and on a prompt read from memory,
        // waits for it) the processor runs it in their shadow.
        let mut parent = None;
        self.for_each_text_hash(tokens, scratch, |hash| {
            let next = next_sequence_hash(parent, hash);
            local.push(hash);
            sequence.push(next);
            parent = Some(next);
        });
    }

    /// [`Self::hash_request`] with multimodal objects, as in [`Self::local_hashes_mm`].
    pub fn hash_request_mm(&self, tokens: &[u32], block_mm: &[Vec<u64>]) -> RequestHashes {
        let mut out = RequestHashes::default();
        self.hash_request_into(tokens, block_mm, &mut out, &mut Vec::new());
        out
    }
}

/// Longest input XXH3 hashes without its secret-driven long loop: above it, hashing with the
/// seed's derived secret equals hashing with the seed (XXH3's spec; checked by the tests).
const SHORT_MAX: usize = 240;

/// The little-endian bytes of `tokens`: the tokens' own memory on little-endian machines,
/// else a copy in `scratch`.
#[inline]
fn token_bytes<'a>(tokens: &'a [u32], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    #[cfg(target_endian = "little")]
    {
        let _ = scratch;
        // SAFETY: `u32` has no padding and every byte pattern is a valid `u8`; the byte slice
        // covers exactly the tokens' `4 × len` bytes, `u8` needs no alignment, and it borrows
        // `tokens` for its lifetime, so the memory stays valid and unchanged. On a little-endian
        // machine these are the tokens' little-endian bytes. (Exercised under miri by the
        // `hash` unit tests.)
        unsafe { std::slice::from_raw_parts(tokens.as_ptr().cast::<u8>(), size_of_val(tokens)) }
    }
    #[cfg(not(target_endian = "little"))]
    {
        scratch.clear();
        scratch.extend(tokens.iter().flat_map(|token| token.to_le_bytes()));
        scratch
    }
}

/// The sequence hash of a block with content hash `local` whose prefix ends in `parent`.
#[inline]
pub fn next_sequence_hash(parent: Option<SequenceHash>, local: LocalBlockHash) -> SequenceHash {
    match parent {
        None => SequenceHash(local.0),
        Some(parent) => {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&parent.0.to_le_bytes());
            bytes[8..].copy_from_slice(&local.0.to_le_bytes());
            SequenceHash(xxh3_64_with_seed(&bytes, SEED))
        }
    }
}

/// The sequence hash of every block of a chain of content hashes starting at the root.
pub fn sequence_hashes(local: &[LocalBlockHash]) -> Vec<SequenceHash> {
    let mut out = Vec::with_capacity(local.len());
    extend_sequence_hashes(local, &mut out);
    out
}

/// Appends the sequence hashes of `local` (a chain from the root) to `out`.
pub fn extend_sequence_hashes(local: &[LocalBlockHash], out: &mut Vec<SequenceHash>) {
    let mut parent = None;
    out.extend(local.iter().map(|&hash| {
        let seq = next_sequence_hash(parent, hash);
        parent = Some(seq);
        seq
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's way: copy the tokens' bytes and hash them with the seed.
    fn plain(tokens: &[u32], seed: u64) -> u64 {
        let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        xxh3_64_with_seed(&bytes, seed)
    }

    #[test]
    fn the_derived_secret_and_the_token_bytes_hash_as_the_seed_does() {
        // Block sizes on both sides of XXH3's 240-byte boundary, salted and not.
        for block_size in [1, 16, 59, 60, 61, 64, 100, 128] {
            let tokens: Vec<u32> =
                (0..block_size * 3).map(|t: u32| t.wrapping_mul(2_654_435_761)).collect();
            for hasher in [
                BlockHasher::new(block_size).unwrap(),
                BlockHasher::new(block_size).unwrap().with_lora("l").with_namespace("n"),
            ] {
                let expected: Vec<LocalBlockHash> = tokens
                    .chunks_exact(block_size as usize)
                    .map(|block| LocalBlockHash(plain(block, hasher.seed())))
                    .collect();
                assert_eq!(hasher.local_hashes(&tokens), expected, "block size {block_size}");
                let (mut out, mut scratch) = (RequestHashes::default(), Vec::new());
                hasher.hash_request_into(&tokens, &[], &mut out, &mut scratch);
                assert_eq!(out, hasher.hash_request(&tokens));
            }
        }
    }

    #[test]
    fn zero_block_size_is_an_error() {
        assert_eq!(BlockHasher::new(0), Err(HashError::ZeroBlockSize));
    }

    #[test]
    fn partial_block_is_dropped_and_chain_starts_at_local() {
        let hasher = BlockHasher::new(4).unwrap();
        let tokens: Vec<u32> = (0..11).collect();
        let hashes = hasher.hash_request(&tokens);
        assert_eq!(hashes.local.len(), 2);
        assert_eq!(hashes.sequence[0].0, hashes.local[0].0);
        assert_ne!(hashes.sequence[1].0, hashes.local[1].0);
        assert_eq!(hasher.local_hashes(&tokens[..8]), hashes.local);
    }

    /// The one-pass request hash (sequence hashes taken as block hashes come out) equals the
    /// two-pass definition, on every path (short blocks, long AVX2 groups and their remainder)
    /// and into buffers left over from a longer request.
    #[test]
    fn one_pass_request_hashes_equal_local_then_sequence() {
        let tokens: Vec<u32> = (0..4_000u32).map(|t| t.wrapping_mul(2_654_435_761)).collect();
        let (mut out, mut scratch) = (RequestHashes::default(), Vec::new());
        for block_size in [1, 16, 60, 61, 64, 100, 256, 257] {
            let hasher = BlockHasher::new(block_size).unwrap().with_lora("l");
            for len in [0, 1, 61, 640, 1_000, 4_000] {
                let local = hasher.local_hashes(&tokens[..len]);
                let expected = RequestHashes { sequence: sequence_hashes(&local), local };
                hasher.hash_request_into(&tokens[..len], &[], &mut out, &mut scratch);
                assert_eq!(out, expected, "block size {block_size}, {len} tokens");
                assert_eq!(hasher.hash_request(&tokens[..len]), expected);
            }
        }
    }

    #[test]
    fn salts_change_hashes_and_empty_salts_do_not() {
        let base = BlockHasher::new(2).unwrap();
        let tokens = [1, 2, 3, 4];
        assert_eq!(
            base.with_lora("").with_namespace("").local_hashes(&tokens),
            base.local_hashes(&tokens)
        );
        assert_ne!(base.with_lora("a").local_hashes(&tokens), base.local_hashes(&tokens));
        assert_ne!(
            base.with_namespace("a").local_hashes(&tokens),
            base.with_lora("a").local_hashes(&tokens)
        );
    }

    #[test]
    fn multimodal_hashes_are_order_independent() {
        let hasher = BlockHasher::new(2).unwrap();
        let tokens = [7, 7, 7, 7];
        let a = hasher.local_hashes_mm(&tokens, &[vec![], vec![9, 3]]);
        let b = hasher.local_hashes_mm(&tokens, &[vec![], vec![3, 9]]);
        assert_eq!(a, b);
        assert_eq!(a[0], hasher.local_hashes(&tokens)[0]);
        assert_ne!(a[1], hasher.local_hashes(&tokens)[1]);
    }
}
