//! Tokenization token for token against the engines' own Python stack: HF `tokenizers` and the
//! chat template rendered by `jinja2` as `transformers`' `apply_chat_template` renders it.
//! Needs python3 with `tokenizers` and `jinja2` (scripts/install-test-deps installs them).

#![cfg(not(loom))]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use kvroute_gateway::tokenize::Tokenizer;
use serde_json::{Value, json};

/// Renders and tokenizes every case in Python; prints one JSON list of token lists.
const PYTHON: &str = r#"
import json, sys
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.exceptions import TemplateError
from tokenizers import Tokenizer

job = json.load(sys.stdin)
tokenizer = Tokenizer.from_file(job["dir"] + "/tokenizer.json")
def raise_exception(message):
    raise TemplateError(message)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.globals["raise_exception"] = raise_exception
out = []
for case in job["cases"]:
    if "messages" in case:
        template = env.from_string(case["template"])
        text = template.render(messages=case["messages"], add_generation_prompt=case["generation"],
                               bos_token=case["bos"], eos_token=case["eos"])
        out.append({"text": text, "tokens": tokenizer.encode(text, add_special_tokens=False).ids})
    else:
        text = case["prompt"]
        out.append({"text": text, "tokens": tokenizer.encode(text, add_special_tokens=True).ids})
print(json.dumps(out))
"#;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/tokenizer")
}

/// Templates as models ship them: the bundled ChatML one, a Llama-3-style one with a BOS and
/// loop controls, a Mistral-style one that checks roles alternate and strips with a Python method.
fn templates() -> Vec<String> {
    let config: Value =
        serde_json::from_slice(&std::fs::read(dir().join("tokenizer_config.json")).unwrap())
            .unwrap();
    vec![
        config["chat_template"].as_str().unwrap().to_owned(),
        "{{ bos_token }}{% for message in messages %}{% if loop.index0 > 5 %}{% break %}{% endif %}\
         <|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>\
         {% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
            .to_owned(),
        "{{ bos_token }}{% for message in messages %}\
         {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\
         {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}\
         {% if message['role'] == 'user' %}{{ '[INST] ' + message['content'].strip() + ' [/INST]' }}\
         {% else %}{{ ' ' + message['content'].strip() + eos_token }}{% endif %}{% endfor %}"
            .to_owned(),
    ]
}

fn conversations() -> Vec<Value> {
    let turns = [
        "Hello!",
        "  Explain KV caches in two sentences.\n\n",
        "日本語のテキストと中文，还有 emoji 🦀🚀 and combining marks: é (e\u{301}) ñ",
        "שלום עולם — مرحبا بالعالم",
        "```rust\nfn main() { println!(\"{}\", 1 + 1); }\n```",
        "Tabs\tand\r\nwindows line ends, trailing spaces   ",
        "A long one: the quick brown fox jumps over the lazy dog. ",
    ];
    let mut conversations = Vec::new();
    for (i, first) in turns.iter().enumerate() {
        let mut messages = vec![json!({"role": "user", "content": first})];
        for j in 0..i % 4 {
            messages
                .push(json!({"role": "assistant", "content": turns[(i + j + 1) % turns.len()]}));
            messages.push(
                json!({"role": "user", "content": turns[(i + j + 2) % turns.len()].repeat(j + 1)}),
            );
        }
        conversations.push(Value::Array(messages));
    }
    conversations.push(json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Why?"},
    ]));
    conversations
}

fn prompts() -> Vec<String> {
    vec![
        "Hello, world!".into(),
        " leading space and  double  spaces".into(),
        "unicode: ÅÄÖ åäö ß 你好世界 🙂👍🏽 \u{200b}zero width".into(),
        "<|im_start|>user\nspecial tokens in text<|im_end|>".into(),
        "numbers 1234567890 3.14159 -42 0x1F".into(),
        "x".repeat(3000),
        "It's 10:30 -- the fox's 3 friends didn't jump; they'll (maybe) run 1,234.5 km!\n\t "
            .repeat(60),
        "\n\n\n".into(),
    ]
}

#[test]
fn tokens_equal_python_tokenizers_and_jinja2() {
    let tokenizer = Tokenizer::from_dir(dir()).unwrap();
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for (t, template) in templates().iter().enumerate() {
        let (bos, eos) = ("<|endoftext|>", "<|im_end|>");
        // The template under test, in place of the tokenizer's own.
        let mut with_template = Tokenizer::from_dir(dir()).unwrap();
        with_template.set_chat_template(template, bos, eos).unwrap();
        for messages in conversations() {
            for generation in [true, false] {
                // The Mistral-style template refuses a system turn, as Python does: skip those.
                let Ok(text) = with_template.apply_chat_template(&messages, generation) else {
                    assert_eq!(t, 2, "only the alternation check raises");
                    continue;
                };
                ours.push(json!({"text": text, "tokens": tokenizer.encode(&text, false).unwrap()}));
                cases.push(json!({
                    "template": template, "messages": messages, "generation": generation,
                    "bos": bos, "eos": eos,
                }));
            }
        }
    }
    for prompt in prompts() {
        ours.push(json!({"text": prompt, "tokens": tokenizer.encode(&prompt, true).unwrap()}));
        cases.push(json!({"prompt": prompt}));
    }
    assert!(cases.len() > 40, "{} cases", cases.len());

    let mut python = Command::new("python3")
        .args(["-c", PYTHON])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs (scripts/install-test-deps installs it with tokenizers and jinja2)");
    let job = json!({"dir": dir(), "cases": cases});
    python.stdin.take().unwrap().write_all(job.to_string().as_bytes()).unwrap();
    let output = python.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "python3 failed (pip install tokenizers jinja2): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let theirs: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(theirs.len(), ours.len());
    for (i, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(ours["text"], theirs["text"], "case {i}: rendered text");
        assert_eq!(ours["tokens"], theirs["tokens"], "case {i}: tokens of {:?}", ours["text"]);
    }
}

#[test]
fn a_template_that_raises_gives_its_message() {
    let mut tokenizer = Tokenizer::from_dir(dir()).unwrap();
    tokenizer.set_chat_template(&templates()[2], "<s>", "</s>").unwrap();
    let messages = json!([{"role": "assistant", "content": "first"}]);
    let error = tokenizer.apply_chat_template(&messages, true).unwrap_err().to_string();
    assert!(error.contains("roles must alternate"), "{error}");
}
