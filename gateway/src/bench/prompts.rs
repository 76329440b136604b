//! Prompts synthesized from a Mooncake trace's `hash_ids`, as text a chat template wraps.
//!
//! Each id stands for 512 tokens of its own text: 511 words that are single tokens of the
//! tokenizer (each with its leading space), chosen by a hash of the id and the position, then a
//! newline. Pre-tokenization splits at every such word and newline, so a chunk tokenizes to the
//! same 512 tokens wherever it stands: requests whose ids share a prefix share that many tokens
//! exactly, after the same chat template, and the engines' KV blocks inside it are equal.

use std::collections::HashMap;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::tokenize::{TokenizeError, Tokenizer};

/// Tokens per `hash_id` in the Mooncake trace format.
pub const TRACE_BLOCK_TOKENS: usize = 512;

/// Makes (and keeps) the text of each `hash_id`.
pub struct PromptSynth {
    words: Vec<String>,
    chunks: HashMap<u64, String>,
}

impl PromptSynth {
    /// Finds the tokenizer's single-token words (a space and 2+ ASCII letters); at least 16 are
    /// needed.
    pub fn new(tokenizer: &Tokenizer) -> Result<Self, TokenizeError> {
        let mut words = Vec::new();
        for id in 0..tokenizer.vocab_size() as u32 {
            let Ok(text) = tokenizer.decode(&[id], true) else { continue };
            let word = text.strip_prefix(' ').unwrap_or_default();
            if word.len() >= 2
                && word.bytes().all(|b| b.is_ascii_alphabetic())
                && tokenizer.encode(&text, false)?.len() == 1
            {
                words.push(text);
            }
        }
        if words.len() < 16 {
            return Err(TokenizeError::Encode(format!(
                "the tokenizer has {} single-token words; prompts need 16",
                words.len()
            )));
        }
        words.sort();
        Ok(Self { words, chunks: HashMap::new() })
    }

    /// The prompt of `hash_ids`, cut to `input_length` tokens (the last chunk's words).
    pub fn prompt(&mut self, hash_ids: &[u64], input_length: usize) -> String {
        let mut text = String::new();
        let mut left = input_length;
        for &id in hash_ids {
            if left == 0 {
                break;
            }
            let chunk = self.chunk(id);
            if left >= TRACE_BLOCK_TOKENS {
                text.push_str(chunk);
                left -= TRACE_BLOCK_TOKENS;
            } else {
                // The first `left` words of the chunk (each word one token).
                let end = chunk.match_indices(' ').nth(left).map_or(chunk.len(), |(at, _)| at);
                text.push_str(&chunk[..end]);
                left = 0;
            }
        }
        text
    }

    fn chunk(&mut self, id: u64) -> &str {
        let words = &self.words;
        self.chunks.entry(id).or_insert_with(|| {
            let mut chunk = String::with_capacity(TRACE_BLOCK_TOKENS * 8);
            for i in 0..TRACE_BLOCK_TOKENS as u64 - 1 {
                let pick = xxh3_64_with_seed(&i.to_le_bytes(), id) as usize % words.len();
                chunk.push_str(&words[pick]);
            }
            chunk.push('\n');
            chunk
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_ids_give_equal_tokens_and_each_id_512() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/tokenizer");
        let tokenizer = Tokenizer::from_dir(dir).unwrap();
        let mut synth = PromptSynth::new(&tokenizer).unwrap();
        let a = tokenizer.encode(&synth.prompt(&[1, 2, 3], 3 * 512), false).unwrap();
        let b = tokenizer.encode(&synth.prompt(&[1, 2, 4], 2 * 512 + 100), false).unwrap();
        assert_eq!(a.len(), 3 * 512);
        assert_eq!(b.len(), 2 * 512 + 100);
        let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        assert!((2 * 512..2 * 512 + 8).contains(&shared), "shared {shared}");
        // Behind a chat template, too.
        let chat = |text: String| {
            let messages = serde_json::json!([{"role": "user", "content": text}]);
            let text = tokenizer.apply_chat_template(&messages, true).unwrap();
            tokenizer.encode(&text, false).unwrap()
        };
        let (a, b) = (chat(synth.prompt(&[9, 8], 1024)), chat(synth.prompt(&[9, 7], 1024)));
        let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        assert!(shared >= 512, "shared {shared}");
    }
}
