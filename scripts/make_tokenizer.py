#!/usr/bin/env python3
"""Writes data/tokenizer/: the small byte-level BPE tokenizer (HF `tokenizer.json`) and the
ChatML chat template (`tokenizer_config.json`) that `kvroute mocker`, `serve`, `bench` and
`demo` use by default, so the whole stack runs without downloading a model.

It is trained on the repository's own Markdown and Rust sources (2,048 tokens), shaped like
Qwen's tokenizers: GPT-2 byte-level pre-tokenization, `<|im_start|>` / `<|im_end|>` /
`<|endoftext|>` special tokens. Run it again only to change the tokenizer:
    pip install tokenizers && python3 scripts/make_tokenizer.py
"""
import json
import pathlib

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "tokenizer"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def corpus():
    for pattern in ("*.md", "src/**/*.rs", "cli/src/*.rs"):
        for path in sorted(ROOT.glob(pattern)):
            yield path.read_text(encoding="utf-8")


def main():
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUT / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 32768,
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
