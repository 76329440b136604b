//! HF's encoding, with the model's tokens kept per piece of text.
//!
//! HF's `encode` cuts the text at added (special) tokens, normalizes, pre-tokenizes (a BPE
//! tokenizer's regex split into words), runs the model on each piece on its own, then builds an
//! `Encoding` of a dozen vectors and a `String` per token. The model's answer for a piece depends
//! on that piece alone, so [`PieceEncoder`] runs HF's own first steps, looks each piece up in a
//! map of the ids it gave before, runs HF's model only on pieces not seen, and collects the ids
//! alone. HF's BPE keeps a cache of its own, but even a hit there clones the word and allocates
//! each token's text.
//!
//! The ids are HF's: the added-token split, the normalizer and the model are HF's code, and the
//! post-processor, truncation and padding run on the ids as HF runs them whenever they could
//! change one. The pre-tokenizer is HF's too, except for a byte-level BPE's regex split, which
//! [`RegexSplit`] finds on Rust's regex engine only when it gives HF's pieces (tested on every
//! character). A model that tokenizes at random (BPE dropout) gets no map.

use parking_lot::RwLock;
use std::collections::HashMap;
use tokenizers::{Encoding, Model, OffsetReferential, OffsetType, PostProcessor, PreTokenizer};

use super::regex_split::RegexSplit;

/// Pieces whose ids are kept at most; the map starts over when full. With the longest piece
/// kept, that bounds it under 8 MB (about 3 MB for words of text).
const CAPACITY: usize = 1 << 15;
/// Longer pieces (runs of spaces, long numbers) are rarely seen twice: not kept.
const MAX_PIECE_BYTES: usize = 32;

type PieceMap = HashMap<Box<str>, Box<[u32]>, ahash::RandomState>;

/// The model's ids for the pieces already seen.
pub(super) struct PieceEncoder {
    pieces: RwLock<PieceMap>,
    /// The pre-tokenizer's split on Rust's regex engine, when it is one [`RegexSplit`] finds
    /// exactly: the map is then keyed by the pieces before their byte-level mapping.
    split: Option<RegexSplit>,
}

impl PieceEncoder {
    /// An encoder for `tokenizer`, or `None` when its model does not give a piece the same ids
    /// every time (BPE with dropout).
    pub(super) fn new(tokenizer: &tokenizers::Tokenizer) -> Option<Self> {
        if let tokenizers::ModelWrapper::BPE(bpe) = tokenizer.get_model()
            && bpe.dropout.is_some_and(|p| p > 0.0)
        {
            return None;
        }
        Some(Self {
            pieces: RwLock::new(PieceMap::default()),
            split: RegexSplit::for_tokenizer(tokenizer),
        })
    }

    /// The ids HF's `tokenizer.encode_fast(text, add_special_tokens)` gives.
    pub(super) fn encode(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        text: &str,
        add_special_tokens: bool,
    ) -> tokenizers::Result<Vec<u32>> {
        let mut pieces = tokenizer
            .get_added_vocabulary()
            .extract_and_normalize(tokenizer.get_normalizer(), text);
        let split = self.split.as_ref();
        if split.is_none()
            && let Some(pre_tokenizer) = tokenizer.get_pre_tokenizer()
        {
            pre_tokenizer.pre_tokenize(&mut pieces)?;
        }
        let mut ids = Vec::with_capacity(text.len() / 3 + 8);
        for (piece, _, tokens) in pieces.get_splits(OffsetReferential::Original, OffsetType::None) {
            match (tokens, split) {
                (Some(tokens), _) => ids.extend(tokens.iter().map(|token| token.id)),
                (None, None) => self.extend_with_piece(tokenizer, piece, &mut ids)?,
                (None, Some(split)) => split.for_each_piece(piece, |piece| {
                    self.extend_with_piece(tokenizer, piece, &mut ids)
                })?,
            }
        }
        if !needs_post_processing(tokenizer, add_special_tokens) {
            return Ok(ids);
        }
        let encoding: Encoding =
            ids.into_iter().map(|id| (id, String::new(), (0, 0), None, 0)).collect();
        Ok(tokenizer.post_process(encoding, None, add_special_tokens)?.get_ids().to_vec())
    }

    /// Appends the model's ids for `piece`: as the pre-tokenizer gave it, or, with a
    /// [`RegexSplit`], before its byte-level mapping.
    fn extend_with_piece(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        piece: &str,
        ids: &mut Vec<u32>,
    ) -> tokenizers::Result<()> {
        if let Some(known) = self.pieces.read().get(piece) {
            ids.extend_from_slice(known);
            return Ok(());
        }
        let start = ids.len();
        let model = tokenizer.get_model();
        let tokens = match &self.split {
            Some(split) => model.tokenize(&split.byte_level(piece)?)?,
            None => model.tokenize(piece)?,
        };
        ids.extend(tokens.iter().map(|token| token.id));
        if piece.len() <= MAX_PIECE_BYTES {
            let mut pieces = self.pieces.write();
            if pieces.len() >= CAPACITY {
                pieces.clear();
            }
            pieces.insert(piece.into(), ids[start..].into());
        }
        Ok(())
    }
}

/// Whether HF's post-processing could change the ids: truncation or padding is set, or special
/// tokens are asked for and the post-processor adds some.
fn needs_post_processing(tokenizer: &tokenizers::Tokenizer, add_special_tokens: bool) -> bool {
    tokenizer.get_truncation().is_some()
        || tokenizer.get_padding().is_some()
        || (add_special_tokens
            && tokenizer.get_post_processor().is_some_and(|p| p.added_tokens(false) > 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn tokenizer_json() -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/tokenizer/tokenizer.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    fn load(json: &Value) -> tokenizers::Tokenizer {
        tokenizers::Tokenizer::from_bytes(serde_json::to_vec(json).unwrap()).unwrap()
    }

    fn corpus() -> Vec<String> {
        let mut texts: Vec<String> = [
            "",
            "Hello, world!",
            " leading space and  double  spaces\n\n\n",
            "unicode: ÅÄÖ åäö ß 你好世界 🙂👍🏽 \u{200b}zero width, e\u{301}",
            "<|im_start|>user\nspecial tokens in text<|im_end|>\n<|im_start|>assistant\n",
            "<|endoftext|><|endoftext|>back to back<|im_end|>",
            "numbers 1234567890 3.14159 -42 0x1F, It's they'll we've I'd",
            "Tabs\tand\r\nwindows line ends, trailing spaces   ",
            "```rust\nfn main() { println!(\"{}\", 1 + 1); }\n```",
        ]
        .map(str::to_owned)
        .into();
        texts.push("x".repeat(3000));
        texts.push(" ".repeat(200) + "a" + &"9".repeat(200));
        texts.push(crate::bench::probes::short_prompt(17, 64));
        texts
    }

    /// Every text twice (the second time from the map), with and without special tokens.
    fn assert_same_ids_as_hf(tokenizer: &tokenizers::Tokenizer) {
        let encoder = PieceEncoder::new(tokenizer).unwrap();
        for round in 0..2 {
            for text in corpus() {
                for special in [false, true] {
                    let hf = tokenizer.encode_fast(text.as_str(), special).unwrap();
                    let ours = encoder.encode(tokenizer, &text, special).unwrap();
                    assert_eq!(ours, hf.get_ids(), "round {round}, special {special}: {text:?}");
                }
            }
        }
        assert!(!encoder.pieces.read().is_empty());
    }

    /// [`assert_same_ids_as_hf`] for the tokenizer `json` describes, whose pieces are cut by a
    /// [`RegexSplit`] or not, as `regex_split` says.
    fn assert_same_ids_as_hf_for(json: &Value, regex_split: bool) {
        let tokenizer = load(json);
        assert_eq!(PieceEncoder::new(&tokenizer).unwrap().split.is_some(), regex_split);
        assert_same_ids_as_hf(&tokenizer);
    }

    #[test]
    fn gives_hf_ids_for_a_byte_level_bpe() {
        assert_same_ids_as_hf_for(&tokenizer_json(), true);
    }

    #[test]
    fn gives_hf_ids_when_the_post_processor_adds_tokens() {
        let mut json = tokenizer_json();
        json["post_processor"] = json!({
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
            ],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {
                "<|im_start|>": {"id": "<|im_start|>", "ids": [1], "tokens": ["<|im_start|>"]},
                "<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]},
            },
        });
        let tokenizer = load(&json);
        assert_eq!(tokenizer.encode_fast("Hi", true).unwrap().get_ids().first(), Some(&1));
        assert_same_ids_as_hf(&tokenizer);
    }

    #[test]
    fn gives_hf_ids_under_truncation_and_padding() {
        let mut json = tokenizer_json();
        json["truncation"] =
            json!({"direction": "Right", "max_length": 7, "strategy": "LongestFirst", "stride": 0});
        json["padding"] = json!({
            "strategy": {"Fixed": 9}, "direction": "Left", "pad_to_multiple_of": null,
            "pad_id": 0, "pad_type_id": 0, "pad_token": "<|endoftext|>",
        });
        assert_same_ids_as_hf(&load(&json));
    }

    #[test]
    fn gives_hf_ids_with_a_split_regex_and_a_normalizer() {
        let mut json = tokenizer_json();
        json["normalizer"] = json!({"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Lowercase"},
        ]});
        json["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": super::super::regex_split::LLAMA3_PATTERN},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
             "use_regex": false},
        ]});
        assert_same_ids_as_hf_for(&json, true);
    }

    #[test]
    fn gives_hf_ids_through_hf_pre_tokenizer_when_the_split_is_not_reproduced() {
        let mut json = tokenizer_json();
        json["pre_tokenizer"]["add_prefix_space"] = json!(true);
        assert_same_ids_as_hf_for(&json, false);
    }

    #[test]
    fn a_model_that_tokenizes_at_random_gets_no_map() {
        let mut json = tokenizer_json();
        json["model"]["dropout"] = json!(0.5);
        assert!(PieceEncoder::new(&load(&json)).is_none());
        json["model"]["dropout"] = json!(0.0);
        assert!(PieceEncoder::new(&load(&json)).is_some());
    }

    #[test]
    fn a_full_map_starts_over() {
        let tokenizer = load(&tokenizer_json());
        let encoder = PieceEncoder::new(&tokenizer).unwrap();
        // Words of letters alone are one piece each: CAPACITY + 10 distinct pieces.
        let word = |mut i: usize| {
            let mut word = String::from(" ");
            for _ in 0..4 {
                word.push(char::from(b'a' + (i % 26) as u8));
                i /= 26;
            }
            word
        };
        let text: String = (0..CAPACITY + 10).map(word).collect();
        let ids = encoder.encode(&tokenizer, &text, false).unwrap();
        assert_eq!(ids, tokenizer.encode_fast(text.as_str(), false).unwrap().get_ids());
        assert_eq!(encoder.pieces.read().len(), 10);
    }
}
