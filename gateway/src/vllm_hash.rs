//! vLLM's block hashes, computed as vLLM 0.33 computes them by default
//! (`prefix_caching_hash_algo = "sha256"`), so a mock engine publishes the very names a real one
//! would and peers that recompute them (vllm-router's `kv_aware`) find its blocks.
//!
//! A block's digest is `sha256(pickle.dumps((parent_digest, tuple(block_token_ids), None),
//! protocol=5))`; the first block's parent is `NONE_HASH = sha256(pickle.dumps("vllm-none-hash",
//! protocol=5))`. Events carry the digest's low 64 bits (`int.from_bytes(digest, "big") & (2**64
//! - 1)`). Only the few pickle opcodes these values need are written here (no pickle crate
//! produces CPython's protocol-5 bytes); `tests` checks them against Python's own `pickle`.

use sha2::{Digest, Sha256};

/// A block's full sha256 digest: the parent of the next block.
pub type BlockDigest = [u8; 32];

/// `NONE_HASH`: the parent of a sequence's first block (without `PYTHONHASHSEED`).
pub fn none_hash() -> BlockDigest {
    let mut pickle = Pickle::new();
    let text = b"vllm-none-hash";
    pickle.op(SHORT_BINUNICODE);
    pickle.body.push(text.len() as u8);
    pickle.body.extend_from_slice(text);
    pickle.op(MEMOIZE);
    Sha256::digest(pickle.finish()).into()
}

/// The digest of one full block of `tokens` after `parent`.
pub fn block_digest(parent: &BlockDigest, tokens: &[u32]) -> BlockDigest {
    let mut pickle = Pickle::new();
    pickle.op(SHORT_BINBYTES);
    pickle.body.push(32);
    pickle.body.extend_from_slice(parent);
    pickle.op(MEMOIZE);
    match tokens.len() {
        0 => pickle.op(EMPTY_TUPLE),
        n => {
            if n > 3 {
                pickle.op(MARK);
            }
            for &token in tokens {
                pickle.int(token);
            }
            pickle.op(match n {
                1 => TUPLE1,
                2 => TUPLE2,
                3 => TUPLE3,
                _ => TUPLE,
            });
            pickle.op(MEMOIZE);
        }
    }
    pickle.op(NONE);
    pickle.op(TUPLE3);
    pickle.op(MEMOIZE);
    Sha256::digest(pickle.finish()).into()
}

/// The integer vLLM publishes for a block (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`).
pub fn block_id(digest: &BlockDigest) -> u64 {
    u64::from_be_bytes(digest[24..].try_into().expect("8 bytes"))
}

/// The digests of every full block of `tokens`, `block_size` tokens each, in order.
pub fn block_digests(tokens: &[u32], block_size: usize) -> Vec<BlockDigest> {
    let mut parent = none_hash();
    tokens
        .chunks_exact(block_size.max(1))
        .map(|block| {
            parent = block_digest(&parent, block);
            parent
        })
        .collect()
}

const PROTO: u8 = 0x80;
const FRAME: u8 = 0x95;
const STOP: u8 = b'.';
const MEMOIZE: u8 = 0x94;
const SHORT_BINUNICODE: u8 = 0x8c;
const SHORT_BINBYTES: u8 = b'C';
const MARK: u8 = b'(';
const EMPTY_TUPLE: u8 = b')';
const TUPLE: u8 = b't';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const NONE: u8 = b'N';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;

/// A protocol-5 pickle being written: one frame, as CPython writes a small object.
struct Pickle {
    body: Vec<u8>,
}

impl Pickle {
    fn new() -> Self {
        Self { body: Vec::with_capacity(128) }
    }

    fn op(&mut self, op: u8) {
        self.body.push(op);
    }

    /// A non-negative int in the shortest opcode CPython picks.
    fn int(&mut self, value: u32) {
        if value <= 0xff {
            self.body.extend_from_slice(&[BININT1, value as u8]);
        } else if value <= 0xffff {
            self.body.push(BININT2);
            self.body.extend_from_slice(&(value as u16).to_le_bytes());
        } else if value <= 0x7fff_ffff {
            self.body.push(BININT);
            self.body.extend_from_slice(&value.to_le_bytes());
        } else {
            // LONG1: little-endian two's complement, one byte more so the sign bit stays 0.
            self.body.extend_from_slice(&[LONG1, 5]);
            self.body.extend_from_slice(&value.to_le_bytes());
            self.body.push(0);
        }
    }

    /// `PROTO 5`, then the body (with `STOP`) in one `FRAME`.
    fn finish(mut self) -> Vec<u8> {
        self.body.push(STOP);
        let mut out = Vec::with_capacity(self.body.len() + 11);
        out.extend_from_slice(&[PROTO, 5, FRAME]);
        out.extend_from_slice(&(self.body.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.body);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// What CPython's own pickle and hashlib make of the same blocks.
    fn python_digests(tokens: &[u32], block_size: usize) -> Vec<String> {
        let script = format!(
            "import pickle, hashlib\n\
             h = lambda x: hashlib.sha256(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)).digest()\n\
             parent = h('vllm-none-hash')\n\
             tokens = {tokens:?}\n\
             for i in range(0, len(tokens) - len(tokens) % {block_size}, {block_size}):\n\
             \x20   parent = h((parent, tuple(tokens[i:i + {block_size}]), None))\n\
             \x20   print(parent.hex())\n"
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .expect("python3 runs (the tests need it; see scripts/install-test-deps)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
    }

    #[test]
    fn digests_equal_cpythons_pickle_and_sha256() {
        // Every int opcode (1, 2, 4 bytes and LONG1), tuples of 1, 2, 3 and more.
        let tokens: Vec<u32> =
            vec![0, 7, 255, 256, 65535, 65536, 151_643, 0x7fff_ffff, 0x8000_0000, u32::MAX, 42, 9];
        for block_size in [1, 2, 3, 4, 5, 16] {
            let mut long = tokens.clone();
            long.extend((0..40).map(|i| i * 997));
            let ours: Vec<String> =
                block_digests(&long, block_size).iter().map(|d| hex(d)).collect();
            assert_eq!(ours, python_digests(&long, block_size), "block size {block_size}");
        }
    }

    #[test]
    fn the_published_id_is_the_digests_low_64_bits_big_endian() {
        let digest: BlockDigest = std::array::from_fn(|i| i as u8);
        assert_eq!(block_id(&digest), 0x18191a1b1c1d1e1f);
    }
}
