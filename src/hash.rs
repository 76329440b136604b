//! Block and sequence hashing, byte-compatible with Dynamo's `dynamo-kv-router` (DESIGN.md §3).
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

use xxhash_rust::xxh3::xxh3_64_with_seed;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHasher {
    block_size: NonZeroU32,
    seed: u64,
}

/// The local and sequence hashes of one request, computed once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHashes {
    /// One content hash per full block.
    pub local: Vec<LocalBlockHash>,
    /// One prefix hash per full block.
    pub sequence: Vec<SequenceHash>,
}

impl BlockHasher {
    /// A hasher for blocks of `block_size` tokens, unsalted.
    pub fn new(block_size: u32) -> Result<Self, HashError> {
        let block_size = NonZeroU32::new(block_size).ok_or(HashError::ZeroBlockSize)?;
        Ok(Self { block_size, seed: SEED })
    }

    /// Salts the hashes with a LoRA adapter name (an empty name adds no salt).
    pub fn with_lora(mut self, lora_name: &str) -> Self {
        if !lora_name.is_empty() {
            self.seed = self.seed.wrapping_add(xxh3_64_with_seed(lora_name.as_bytes(), 0));
        }
        self
    }

    /// Salts the hashes with a cache namespace (an empty namespace adds no salt).
    pub fn with_namespace(mut self, cache_namespace: &str) -> Self {
        if !cache_namespace.is_empty() {
            self.seed = self.seed.wrapping_add(xxh3_64_with_seed(cache_namespace.as_bytes(), 1));
        }
        self
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
        let mut bytes = Vec::with_capacity(size * 4);
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
                    LocalBlockHash(xxh3_64_with_seed(&bytes, self.seed))
                }
            })
            .collect()
    }

    /// The content hash of one text-only block (`block` is not checked against the block size);
    /// `scratch` is reused between calls to avoid an allocation per block.
    pub(crate) fn hash_block(&self, block: &[u32], scratch: &mut Vec<u8>) -> LocalBlockHash {
        scratch.clear();
        scratch.resize(block.len() * 4, 0);
        for (bytes, token) in scratch.chunks_exact_mut(4).zip(block) {
            bytes.copy_from_slice(&token.to_le_bytes());
        }
        LocalBlockHash(xxh3_64_with_seed(scratch, self.seed))
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
        out.local.clear();
        if block_mm.iter().all(Vec::is_empty) {
            let size = self.block_size.get() as usize;
            out.local
                .extend(tokens.chunks_exact(size).map(|block| self.hash_block(block, scratch)));
        } else {
            out.local = self.local_hashes_mm(tokens, block_mm);
        }
        out.sequence.clear();
        extend_sequence_hashes(&out.local, &mut out.sequence);
    }

    /// [`Self::hash_request`] with multimodal objects, as in [`Self::local_hashes_mm`].
    pub fn hash_request_mm(&self, tokens: &[u32], block_mm: &[Vec<u64>]) -> RequestHashes {
        let local = self.local_hashes_mm(tokens, block_mm);
        let sequence = sequence_hashes(&local);
        RequestHashes { local, sequence }
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
