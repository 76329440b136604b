//! The pre-tokenizer's regex split, found by Rust's regex engine on the text as it is.
//!
//! A byte-level BPE tokenizer (GPT-2's, Llama 3's, Qwen's, DeepSeek's) cuts text into pieces
//! with one regex, then maps each piece's bytes to characters for the model. HF runs that regex
//! on Oniguruma through a `NormalizedString` that tracks every byte's offsets, then maps the
//! bytes through another one: once the model's ids are kept per piece, that is about 70% of
//! encoding a new prompt. [`RegexSplit`] finds the same pieces with `regex-automata` and hands
//! them over as they are (the piece map is keyed by them; only a piece not seen before is
//! byte-mapped, by HF's own `ByteLevel`).
//!
//! Rust's engine has no look-around, and these patterns have one: `\s+(?!\S)`, a run of white
//! space not followed by anything else (all of the run at the end of the text, all but its last
//! character otherwise). That alternative becomes two patterns, searched together with the
//! rest as one alternation in the same order: `\s+\z`, and `\s+\s`, whose last character is
//! given back. A pattern with any other look-around, one Rust's engine does not take, or one
//! that can match nothing, stays with HF. So does a tokenizer whose split, tried on a varied
//! text when it loads, gives one piece other than HF's.
//!
//! Exactness is tested piece for piece against HF on every Unicode scalar value in several
//! contexts and on a varied corpus, for GPT-2's pattern and Llama 3's.

use regex_automata::meta::Regex;
use regex_automata::{Input, PatternID};
use serde_json::Value;
use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

/// HF's `ByteLevel` pre-tokenizer's own pattern (used when `use_regex` is on).
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// The look-around alternative this module rewrites.
const TRAILING_SPACE: &str = r"\s+(?!\S)";
/// The rewritten alternative that gives its last character back.
const SPACE_BEFORE_SPACE: &str = r"\s+\s";

/// A tokenizer's pre-tokenizer split, on Rust's regex engine.
#[derive(Debug)]
pub(super) struct RegexSplit {
    regex: Regex,
    /// The pattern whose match gives back its last character (`\s+\s`), if any.
    give_back: Option<PatternID>,
    /// HF's byte-to-character mapping, for pieces on their way to the model.
    byte_level: tokenizers::pre_tokenizers::byte_level::ByteLevel,
}

impl RegexSplit {
    /// The split of `tokenizer`'s pre-tokenizer, if it is a regex split followed by the
    /// byte-level mapping (HF's `ByteLevel` with its regex, or a `Sequence` of an isolating
    /// regex `Split` and a `ByteLevel` without one, neither adding a prefix space) that this
    /// module reproduces exactly on a varied text.
    pub(super) fn for_tokenizer(tokenizer: &tokenizers::Tokenizer) -> Option<Self> {
        let config = serde_json::to_value(tokenizer.get_pre_tokenizer()?).ok()?;
        let pattern = match config["type"].as_str()? {
            "ByteLevel" if is_byte_level(&config, true) => GPT2_PATTERN.to_owned(),
            "Sequence" => match config["pretokenizers"].as_array()?.as_slice() {
                [split, byte_level] if is_byte_level(byte_level, false) => {
                    isolating_regex(split)?.to_owned()
                }
                _ => return None,
            },
            _ => return None,
        };
        let split = Self::new(&pattern)?;
        split.agrees_with(tokenizer.get_pre_tokenizer()?, SELF_TEST).then_some(split)
    }

    /// The split by `pattern` (Oniguruma syntax as HF reads it), if Rust's engine can find
    /// exactly its matches.
    pub(super) fn new(pattern: &str) -> Option<Self> {
        let alternatives = top_level_alternatives(pattern)?;
        let trailing = alternatives.iter().position(|a| *a == TRAILING_SPACE);
        let patterns: Vec<String> = match trailing {
            None => vec![pattern.to_owned()],
            Some(at) => {
                let before = alternatives[..at].iter().copied().chain([r"\s+\z"]);
                let mut patterns =
                    vec![before.collect::<Vec<_>>().join("|"), SPACE_BEFORE_SPACE.into()];
                if at + 1 < alternatives.len() {
                    patterns.push(alternatives[at + 1..].join("|"));
                }
                patterns
            }
        };
        // Rust's parser refuses look-around: any left beside the rewritten one fails here.
        let hirs = regex_automata::util::syntax::parse_many(&patterns).ok()?;
        if hirs.iter().any(|hir| hir.properties().minimum_len() == Some(0)) {
            return None;
        }
        let regex = Regex::builder().build_many_from_hir(&hirs).ok()?;
        Some(Self {
            regex,
            give_back: trailing.map(|_| PatternID::must(1)),
            byte_level: tokenizers::pre_tokenizers::byte_level::ByteLevel::new(false, false, false),
        })
    }

    /// Calls `each` with every piece of `text`, in order: the matches, and the text between
    /// them (HF's `Isolated` behaviour).
    pub(super) fn for_each_piece<'t, E>(
        &self,
        text: &'t str,
        mut each: impl FnMut(&'t str) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut at = 0;
        while at < text.len() {
            let Some(found) = self.regex.search(&Input::new(text).range(at..)) else { break };
            if found.start() > at {
                each(&text[at..found.start()])?;
            }
            let mut end = found.end();
            if Some(found.pattern()) == self.give_back {
                end -= text[..end].chars().next_back().map_or(0, char::len_utf8);
            }
            each(&text[found.start()..end])?;
            at = end;
        }
        if at < text.len() {
            each(&text[at..])?;
        }
        Ok(())
    }

    /// `piece` mapped to the characters the model reads (HF's `ByteLevel`).
    pub(super) fn byte_level(&self, piece: &str) -> tokenizers::Result<String> {
        let mut mapped = PreTokenizedString::from(piece);
        self.byte_level.pre_tokenize(&mut mapped)?;
        Ok(mapped
            .get_splits(OffsetReferential::Original, OffsetType::None)
            .into_iter()
            .map(|(text, _, _)| text)
            .collect())
    }

    /// Whether this split cuts `text` into HF's pieces under `pre_tokenizer` (whose pieces
    /// come byte-mapped).
    fn agrees_with(&self, pre_tokenizer: &impl PreTokenizer, text: &str) -> bool {
        let Ok(hf) = hf_pieces(pre_tokenizer, text) else { return false };
        let mut ours = Vec::new();
        let mapped = self.for_each_piece(text, |piece| {
            ours.push(self.byte_level(piece)?);
            Ok::<_, tokenizers::Error>(())
        });
        mapped.is_ok() && ours == hf
    }
}

/// HF's pieces of `text`.
pub(super) fn hf_pieces(
    pre_tokenizer: &impl PreTokenizer,
    text: &str,
) -> tokenizers::Result<Vec<String>> {
    let mut pieces = PreTokenizedString::from(text);
    pre_tokenizer.pre_tokenize(&mut pieces)?;
    Ok(pieces
        .get_splits(OffsetReferential::Original, OffsetType::None)
        .into_iter()
        .map(|(piece, _, _)| piece.to_owned())
        .collect())
}

/// Whether `config` is a `ByteLevel` pre-tokenizer without a prefix space, with its regex or
/// without.
fn is_byte_level(config: &Value, use_regex: bool) -> bool {
    config["type"] == "ByteLevel"
        && config["add_prefix_space"] == false
        && config["use_regex"] == use_regex
}

/// The pattern of a `Split` by regex that keeps each match as its own piece.
fn isolating_regex(config: &Value) -> Option<&str> {
    (config["type"] == "Split" && config["behavior"] == "Isolated" && config["invert"] == false)
        .then(|| config["pattern"]["Regex"].as_str())
        .flatten()
}

/// `pattern`'s alternatives at the top level: split at each `|` outside groups and classes.
/// `None` if it has a possessive quantifier (`?+`, `++`, `*+`, `{n}+`), which Rust's syntax
/// reads as a repetition of a repetition.
fn top_level_alternatives(pattern: &str) -> Option<Vec<&str>> {
    let (mut groups, mut classes) = (0usize, 0usize);
    // The character escaped by the previous one's backslash, the backslash itself, whether
    // the previous character ended a quantifier, whether a `\p{...}` name is open.
    let (mut escaped, mut backslash, mut after_quantifier, mut in_property) =
        (None, false, false, false);
    let mut alternatives = Vec::new();
    let mut start = 0;
    for (i, c) in pattern.char_indices() {
        if backslash {
            (backslash, escaped, after_quantifier) = (false, Some(c), false);
            continue;
        }
        let quantifier = classes == 0 && !in_property && matches!(c, '?' | '+' | '*' | '}');
        if quantifier && c == '+' && after_quantifier {
            return None;
        }
        after_quantifier = quantifier;
        match c {
            '\\' => backslash = true,
            '{' if matches!(escaped, Some('p' | 'P')) => in_property = true,
            '}' if in_property => in_property = false,
            '[' => classes += 1,
            ']' if classes > 0 => classes -= 1,
            '(' if classes == 0 => groups += 1,
            ')' if classes == 0 => groups = groups.saturating_sub(1),
            '|' if classes == 0 && groups == 0 => {
                alternatives.push(&pattern[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        escaped = None;
    }
    alternatives.push(&pattern[start..]);
    Some(alternatives)
}

/// Llama 3's pattern (Qwen 2's has `\p{N}` for `\p{N}{1,3}`), for tests.
#[cfg(test)]
pub(super) const LLAMA3_PATTERN: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
);

/// The text a split is tried on when it loads: every class of character the patterns tell
/// apart, in the contexts where they differ.
const SELF_TEST: &str = concat!(
    "Hello, world! It's they'll we've I'd DON'T you'RE\n\n",
    " leading space and  double  spaces   \n  \n\t\ttabs\r\nwindows\u{a0}\u{a0}nbsp\u{3000}x",
    "unicode: ÅÄÖ åäö ß 你好世界 🙂👍🏽 \u{200b}zero width, e\u{301} Ⅻ ½ ٣٤ ſ K",
    "numbers 1234567890 3.14159 -42 0x1F 12345678901234\n",
    "```rust\nfn main() { println!(\"{}\", 1 + 1); }\n```\n",
    "<|im_start|>user\nquestion?<|im_end|>   \n   trailing   "
);

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::pre_tokenizers::PreTokenizerWrapper;

    fn gpt2() -> PreTokenizerWrapper {
        serde_json::from_value(serde_json::json!({
            "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true,
        }))
        .unwrap()
    }

    fn llama3() -> PreTokenizerWrapper {
        serde_json::from_value(serde_json::json!({
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
                 "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                 "use_regex": false},
            ],
        }))
        .unwrap()
    }

    fn split_of(pre_tokenizer: &PreTokenizerWrapper) -> RegexSplit {
        let mut tokenizer = tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default());
        tokenizer.with_pre_tokenizer(Some(pre_tokenizer.clone()));
        RegexSplit::for_tokenizer(&tokenizer).expect("a split this module reproduces")
    }

    fn assert_same_pieces(pre_tokenizer: &PreTokenizerWrapper, split: &RegexSplit, text: &str) {
        let hf = hf_pieces(pre_tokenizer, text).unwrap();
        let mut ours = Vec::new();
        split
            .for_each_piece(text, |piece| {
                ours.push(split.byte_level(piece)?);
                Ok::<_, tokenizers::Error>(())
            })
            .unwrap();
        if ours != hf {
            let at = ours.iter().zip(&hf).position(|(a, b)| a != b).unwrap_or(ours.len());
            let (from, to) = (at.saturating_sub(2), at + 3);
            panic!(
                "pieces differ at {at}: ours {:?}, HF's {:?}",
                &ours[from..to.min(ours.len())],
                &hf[from..to.min(hf.len())]
            );
        }
    }

    /// Every Unicode scalar value after and before letters, digits, white space, apostrophes
    /// and punctuation, and next to itself: where a character's class decides the pieces.
    #[test]
    fn every_character_is_cut_as_hf_cuts_it() {
        for pre_tokenizer in [gpt2(), llama3()] {
            let split = split_of(&pre_tokenizer);
            let chars: Vec<char> = (0..=u32::from(char::MAX)).filter_map(char::from_u32).collect();
            for chunk in chars.chunks(4096) {
                let mut text = String::new();
                for &c in chunk {
                    for context in ["a", "1", " ", "\n", "'", ".", "  "] {
                        text.push_str(context);
                        text.push(c);
                    }
                    text.push(c);
                    text.push('\'');
                    text.push(c);
                    text.push(c);
                }
                assert_same_pieces(&pre_tokenizer, &split, &text);
            }
        }
    }

    #[test]
    fn a_varied_corpus_is_cut_as_hf_cuts_it() {
        let texts = [
            "",
            " ",
            "   ",
            "\n",
            "a",
            "trailing \n",
            "x  \n  y",
            " \u{a0} z",
            "'S 'Ll 'VE 'd' '' ' s",
            SELF_TEST,
            crate::bench::probes::short_prompt(3, 64).leak(),
        ];
        for pre_tokenizer in [gpt2(), llama3()] {
            let split = split_of(&pre_tokenizer);
            for text in texts {
                assert_same_pieces(&pre_tokenizer, &split, text);
            }
        }
    }

    #[test]
    fn the_look_ahead_becomes_two_patterns_in_order() {
        assert_eq!(
            top_level_alternatives(r"(?i:'s|'t)|[^\r\n|]+?|\++|\|x|\s+(?!\S)|\s+").unwrap(),
            [r"(?i:'s|'t)", r"[^\r\n|]+?", r"\++", r"\|x", TRAILING_SPACE, r"\s+"]
        );
        let split = RegexSplit::new(GPT2_PATTERN).unwrap();
        assert_eq!(split.regex.pattern_len(), 3);
        assert_eq!(split.give_back, Some(PatternID::must(1)));
        assert_eq!(RegexSplit::new(r"\w+").unwrap().give_back, None);
    }

    #[test]
    fn patterns_rust_cannot_match_exactly_stay_with_hf() {
        for pattern in [
            r"a(?=b)",           // look-ahead other than the trailing space
            r"(?<=a)b",          // look-behind
            r"\s+(?!\S)x|\s+",   // the look-ahead inside a longer alternative
            r"\p{L}++|\s+",      // possessive: (x+)+ to Rust
            r"[^\p{L}]?+\p{L}+", // possessive: (x?)+ to Rust
            r"\p{N}{1,3}+",      // possessive: (x{1,3})+ to Rust
            r"\s*",              // can match nothing
            r"[",                // not a pattern
        ] {
            assert!(RegexSplit::new(pattern).is_none(), "{pattern}");
        }
    }

    #[test]
    fn other_pre_tokenizers_stay_with_hf() {
        for config in [
            serde_json::json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                               "use_regex": true}),
            serde_json::json!({"type": "Whitespace"}),
            serde_json::json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "Removed",
                 "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                 "use_regex": false}]}),
            serde_json::json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated",
                 "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                 "use_regex": false}]}),
        ] {
            let pre_tokenizer: PreTokenizerWrapper = serde_json::from_value(config).unwrap();
            let mut tokenizer = tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default());
            tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
            assert!(RegexSplit::for_tokenizer(&tokenizer).is_none());
        }
    }
}
