//! Mooncake traces (FAST'25 release): loading, and expansion into synthetic tokens.
//!
//! Each line of a trace is one request: `{"timestamp": 0, "input_length": 6758,
//! "output_length": 500, "hash_ids": [0, 1, ...]}`. Each `hash_id` names a 512-token block
//! *together with its prefix*, so `len(hash_ids) = ceil(input_length / 512)` and the last id
//! covers a partial block.
//!
//! The trace carries no tokens. [`TraceRequest::tokens`] makes them up deterministically so the
//! real hashing path runs: the tokens of a `hash_id` depend only on the id and a salt, so two
//! requests sharing a prefix of ids share a prefix of tokens and hence of KV blocks at any block
//! size. Different salts turn one trace into distinct conversations (to replay it several times).
//!
//! ```
//! use kvroute::hash::BlockHasher;
//! use kvroute::sim::trace::read_trace;
//!
//! let line = r#"{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}"#;
//! let trace = read_trace(line.as_bytes())?;
//! assert_eq!(trace[0].tokens(0).len(), 600);
//! // 64-token KV blocks: 9 full blocks, the partial tenth is not hashed.
//! let hasher = BlockHasher::new(64)?;
//! assert_eq!(trace[0].local_hashes(&hasher, 0).len(), 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::event::LocalBlockHash;
use crate::hash::BlockHasher;

/// Tokens per trace block: each `hash_id` stands for this many tokens (the last one fewer).
pub const TRACE_BLOCK_TOKENS: u32 = 512;

/// Synthetic token ids are drawn below this bound, like a real tokenizer's vocabulary.
pub const SYNTHETIC_VOCAB: u32 = 1 << 17;

/// Seed of the per-(hash_id, salt) token stream; any constant works, it only has to be fixed.
const TOKEN_SEED: u64 = 0x6b76_726f_7574_6531;

/// One request of a Mooncake trace.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct TraceRequest {
    /// Arrival time in milliseconds from the start of the trace (0 when absent).
    #[serde(default)]
    pub timestamp: u64,
    /// Prompt length in tokens.
    pub input_length: u32,
    /// Tokens generated for the request (0 when absent).
    #[serde(default)]
    pub output_length: u32,
    /// One id per 512-token block of the prompt, each naming the block and its whole prefix.
    pub hash_ids: Vec<u64>,
}

impl TraceRequest {
    /// How many tokens [`Self::tokens`] yields: `input_length`, or fewer when `hash_ids` cover
    /// fewer tokens (never for a request [`read_trace`] accepted).
    pub fn token_count(&self) -> usize {
        let covered = self.hash_ids.len().saturating_mul(TRACE_BLOCK_TOKENS as usize);
        covered.min(self.input_length as usize)
    }

    /// The prompt's synthetic tokens for conversation `salt`: 512 per `hash_id`, each depending
    /// only on the id, the salt and its offset in the block, cut at [`Self::token_count`].
    pub fn tokens(&self, salt: u64) -> Vec<u32> {
        let mut tokens = Vec::with_capacity(self.token_count());
        tokens.extend(self.token_iter(salt));
        tokens
    }

    /// Like [`Self::tokens`], without materialising the prompt.
    pub fn token_iter(&self, salt: u64) -> impl Iterator<Item = u32> + '_ {
        self.hash_ids
            .iter()
            .flat_map(move |&hash_id| {
                let seed = block_seed(hash_id, salt);
                (0..TRACE_BLOCK_TOKENS).map(move |offset| token_at(seed, offset))
            })
            .take(self.token_count())
    }

    /// Full KV blocks of `block_size` tokens in the prompt (the hasher drops a partial one).
    pub fn block_count(&self, block_size: u32) -> usize {
        self.token_count() / block_size.max(1) as usize
    }

    /// The local hashes of the prompt's full blocks for conversation `salt`: equal to
    /// `hasher.local_hashes(&self.tokens(salt))`, computed block by block without the prompt.
    pub fn local_hashes(&self, hasher: &BlockHasher, salt: u64) -> Vec<LocalBlockHash> {
        let size = hasher.block_size() as usize;
        let mut hashes = Vec::with_capacity(self.block_count(hasher.block_size()));
        let mut block = Vec::with_capacity(size);
        let mut scratch = Vec::with_capacity(size * 4);
        for token in self.token_iter(salt) {
            block.push(token);
            if block.len() == size {
                hashes.push(hasher.hash_block(&block, &mut scratch));
                block.clear();
            }
        }
        hashes
    }
}

/// The seed of the token stream of `hash_id` in conversation `salt`.
fn block_seed(hash_id: u64, salt: u64) -> u64 {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hash_id.to_le_bytes());
    bytes[8..].copy_from_slice(&salt.to_le_bytes());
    xxh3_64_with_seed(&bytes, TOKEN_SEED)
}

/// Token `offset` of a block's stream: a SplitMix64 output, so offsets are independent.
fn token_at(seed: u64, offset: u32) -> u32 {
    let mut z = seed.wrapping_add(u64::from(offset + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    // The top bits; SYNTHETIC_VOCAB is a power of two.
    (z >> (64 - SYNTHETIC_VOCAB.trailing_zeros())) as u32
}

/// Why a trace could not be loaded. Line numbers are 1-based.
#[derive(Debug)]
#[non_exhaustive]
pub enum TraceError {
    /// The trace file could not be opened.
    Open {
        /// The path given.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// Reading a line failed (including a line that is not UTF-8).
    Read {
        /// The line.
        line: usize,
        /// What the reader said.
        source: io::Error,
    },
    /// A line is not a JSON request object with the expected fields.
    Parse {
        /// The line.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// `hash_ids` does not hold `ceil(input_length / 512)` ids.
    LengthMismatch {
        /// The line.
        line: usize,
        /// The request's `input_length`.
        input_length: u32,
        /// How many `hash_ids` it has.
        hash_ids: usize,
    },
}

impl TraceError {
    /// The 1-based line the error is about, if it is about one.
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Open { .. } => None,
            Self::Read { line, .. } | Self::Parse { line, .. } => Some(*line),
            Self::LengthMismatch { line, .. } => Some(*line),
        }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open { path, source } => {
                write!(f, "cannot open trace {}: {source}", path.display())
            }
            Self::Read { line, source } => write!(f, "trace line {line}: read error: {source}"),
            Self::Parse { line, message } => write!(f, "trace line {line}: {message}"),
            Self::LengthMismatch { line, input_length, hash_ids } => write!(
                f,
                "trace line {line}: {hash_ids} hash_ids for input_length {input_length} \
                 (expected {})",
                input_length.div_ceil(TRACE_BLOCK_TOKENS)
            ),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open { source, .. } | Self::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Loads a Mooncake JSONL trace file. See [`read_trace`].
pub fn load_trace(path: impl AsRef<Path>) -> Result<Vec<TraceRequest>, TraceError> {
    let path = path.as_ref();
    let file =
        File::open(path).map_err(|source| TraceError::Open { path: path.to_owned(), source })?;
    read_trace(BufReader::new(file))
}

/// Reads a Mooncake JSONL trace: one request object per line, blank lines skipped, in order.
/// Unknown fields are ignored; the first malformed line is an error naming it.
pub fn read_trace(mut reader: impl BufRead) -> Result<Vec<TraceRequest>, TraceError> {
    let mut requests = Vec::new();
    let mut buf = String::new();
    for line in 1.. {
        buf.clear();
        match reader.read_line(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(source) => return Err(TraceError::Read { line, source }),
        }
        let text = buf.trim();
        if text.is_empty() {
            continue;
        }
        let request: TraceRequest = serde_json::from_str(text)
            .map_err(|err| TraceError::Parse { line, message: err.to_string() })?;
        if request.hash_ids.len() != request.input_length.div_ceil(TRACE_BLOCK_TOKENS) as usize {
            return Err(TraceError::LengthMismatch {
                line,
                input_length: request.input_length,
                hash_ids: request.hash_ids.len(),
            });
        }
        requests.push(request);
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(input_length: u32, hash_ids: &[u64]) -> TraceRequest {
        TraceRequest { timestamp: 0, input_length, output_length: 1, hash_ids: hash_ids.to_vec() }
    }

    #[test]
    fn reads_requests_and_skips_blank_lines() {
        let text = "{\"timestamp\": 3, \"input_length\": 513, \"output_length\": 7, \
                    \"hash_ids\": [4, 5], \"extra\": true}\n\n   \n\
                    {\"input_length\": 12, \"hash_ids\": [9]}";
        let trace = read_trace(text.as_bytes()).unwrap();
        let first = TraceRequest { timestamp: 3, output_length: 7, ..request(513, &[4, 5]) };
        let second = TraceRequest { output_length: 0, ..request(12, &[9]) };
        assert_eq!(trace, vec![first, second]);
    }

    #[test]
    fn malformed_line_error_names_the_line() {
        let good = r#"{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}"#;
        for (bad, check) in [
            ("{not json", "key must be a string"),
            (r#"{"input_length": 10}"#, "hash_ids"),
            (r#"{"input_length": -1, "hash_ids": []}"#, "invalid value"),
        ] {
            let text = format!("{good}\n\n{good}\n{bad}\n{good}\n");
            let err = read_trace(text.as_bytes()).unwrap_err();
            assert!(matches!(err, TraceError::Parse { line: 4, .. }), "{err:?}");
            assert_eq!(err.line(), Some(4));
            let shown = err.to_string();
            assert!(shown.starts_with("trace line 4: ") && shown.contains(check), "{shown}");
        }
    }

    #[test]
    fn hash_id_count_must_match_input_length() {
        let text = "{\"input_length\": 1024, \"hash_ids\": [0, 1]}\n\
                    {\"input_length\": 1025, \"hash_ids\": [0, 1]}\n";
        let err = read_trace(text.as_bytes()).unwrap_err();
        assert!(matches!(
            err,
            TraceError::LengthMismatch { line: 2, input_length: 1025, hash_ids: 2 }
        ));
        assert!(err.to_string().contains("expected 3"), "{err}");
    }

    #[test]
    fn io_errors_are_typed() {
        let err = load_trace("/nonexistent/trace.jsonl").unwrap_err();
        assert!(matches!(err, TraceError::Open { .. }) && err.line().is_none());
        let err = read_trace(&b"{\"input_length\": 1, \"hash_ids\": [0]}\n\xff\n"[..]).unwrap_err();
        assert!(matches!(err, TraceError::Read { line: 2, .. }), "{err:?}");
    }

    #[test]
    fn expansion_has_input_length_tokens() {
        for input_length in [0u32, 1, 511, 512, 513, 1500, 2048] {
            let ids: Vec<u64> = (0..u64::from(input_length.div_ceil(512))).collect();
            let req = request(input_length, &ids);
            assert_eq!(req.tokens(0).len(), input_length as usize);
            assert!(req.tokens(3).iter().all(|&t| t < SYNTHETIC_VOCAB));
        }
        // Ids that cover fewer tokens than claimed (never from `read_trace`) stop early.
        assert_eq!(request(2000, &[1]).tokens(0).len(), 512);
    }

    #[test]
    fn same_hash_id_gives_same_tokens_at_any_position() {
        let a = request(1536, &[7, 8, 42]).tokens(5);
        let b = request(700, &[42, 9]).tokens(5);
        assert_eq!(a[1024..1536], b[..512]);
        assert_ne!(a[..512], a[512..1024]);
        // A partial last block is a prefix of the full block.
        let c = request(1100, &[3, 1, 42]).tokens(5);
        assert_eq!(c[1024..], a[1024..1024 + 76]);
    }

    #[test]
    fn different_salts_give_different_tokens() {
        let req = request(1024, &[0, 1]);
        let (a, b) = (req.tokens(0), req.tokens(1));
        assert_eq!(a.len(), b.len());
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same < 16, "{same} of 1024 tokens agree across salts");
        assert_eq!(req.tokens(1), b);
    }

    #[test]
    fn local_hashes_equal_hashing_the_tokens() {
        let req = request(1500, &[0, 11, 12]);
        for block_size in [1, 16, 64, 100, 512, 1024, 4096] {
            let hasher = BlockHasher::new(block_size).unwrap();
            let expected = hasher.local_hashes(&req.tokens(2));
            assert_eq!(req.local_hashes(&hasher, 2), expected, "block size {block_size}");
            assert_eq!(req.block_count(block_size), expected.len());
        }
    }
}
