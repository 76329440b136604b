//! Tokenizing a templated chat: kvroute's `Tokenizer::encode` (the pieces cut on Rust's regex
//! engine, the model's ids kept per piece) against HF's own `encode_fast` on the same text, on
//! three kinds of prompt, each new on every call (as requests are), so no cache holds the whole
//! prompt:
//! - `probe`: the overhead probe's 64 words ` probe{i} w{w}` (about 520 tokens);
//! - `trace`: one `hash_id` of the trace replay's synthesized text (512 one-token words);
//! - `prose`: English prose, code and unicode with a request number in it (about 400 tokens).
//!
//! `cargo bench -p kvroute-gateway --bench tokenize`
#![allow(missing_docs)] // criterion_group! generates undocumented functions

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kvroute_gateway::bench::probes::short_prompt;
use kvroute_gateway::bench::prompts::PromptSynth;
use kvroute_gateway::tokenize::Tokenizer;
use serde_json::json;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/tokenizer");

const PROSE: &str = "The quick brown fox jumps over the lazy dog, then explains KV caches: \
    each block of 16 tokens is hashed with its parent, so a prefix shared by two prompts \
    gives equal hashes. ```rust\nfn main() { println!(\"{}\", 1 + 1); }\n``` \
    Unicode too: 日本語のテキスト, emoji 🦀🚀, accents é ñ ü. ";

fn bench(c: &mut Criterion) {
    let ours = Tokenizer::from_dir(DIR).expect("tokenizer");
    let hf = tokenizers::Tokenizer::from_file(format!("{DIR}/tokenizer.json")).expect("HF");
    let mut synth = PromptSynth::new(&ours).expect("synth");
    let mut n = 0u64;
    let mut prompt = |kind: &str| -> String {
        n += 1;
        let i = n;
        let content = match kind {
            "probe" => short_prompt(i as usize, 64),
            "trace" => synth.prompt(&[i], 512),
            _ => format!("Request {i}: {}", PROSE.repeat(3)),
        };
        let messages = json!([{"role": "user", "content": content}]);
        ours.apply_chat_template(&messages, true).expect("template")
    };
    for kind in ["probe", "trace", "prose"] {
        let mut group = c.benchmark_group(format!("tokenize/{kind}"));
        group.bench_function("kvroute", |b| {
            b.iter_batched(|| prompt(kind), |text| ours.encode(&text, false), BatchSize::SmallInput)
        });
        group.bench_function("hf_encode_fast", |b| {
            b.iter_batched(
                || prompt(kind),
                |text| hf.encode_fast(text.as_str(), false).map(|e| e.get_ids().len()),
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
