"""Tiny causal LMs and a character-level tokenizer, built locally with no download.

Used by the tests, the benchmarks and (until trained demo weights ship) the built-in demo. The
tokenizer knows digits, letters, common punctuation, the reasoning/answer tags as single tokens,
and a small chat template, so prompts look exactly like a real chat model's.

Try it:  python -c "from grpo_desktop.engine.models.tiny import build_tiny_model; print(build_tiny_model('/tmp/m'))"
"""

from __future__ import annotations

import os
import string

SPECIAL_TOKENS = ["<|pad|>", "<|unk|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]
CHARS = list(string.digits + string.ascii_letters + " \n+-*/=×().,:;?!'\"#%<>[]{}_^\\|&$@`~")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# Model shapes by name: (hidden, layers, heads, kv heads, intermediate). Every projection's output
# size is a multiple of 32, which bitsandbytes' CPU 4-bit kernels require.
SIZES = {
    "micro": (64, 1, 2, 1, 128),  # ~20k params: unit tests
    "tiny": (64, 2, 2, 1, 192),  # ~0.1M params: end-to-end tests
    "demo": (192, 4, 6, 2, 512),  # ~1.6M params: the built-in demo model (build_demo_model.py)
    "small": (256, 4, 8, 4, 688),  # ~3M params: benchmarks
    "medium": (512, 8, 8, 4, 1376),  # ~25M params: benchmarks
}


def build_tokenizer():
    """A character-level fast tokenizer with chat template, EOS = <|end|>, PAD = <|pad|>."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + TAG_TOKENS + CHARS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<|unk|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<|pad|>", unk_token="<|unk|>", eos_token="<|end|>"
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[3:]})
    tok.add_tokens(TAG_TOKENS)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def tiny_model(size: str = "tiny", seed: int = 0, arch: str = "llama"):
    """(model, tokenizer): a randomly initialised model of `size`, in memory, float32."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    hidden, layers, heads, kv, inter = SIZES[size]
    tok = build_tokenizer()
    common = dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=inter,
        max_position_embeddings=1024,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    config = LlamaConfig(**common) if arch == "llama" else Qwen2Config(**common)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def build_tiny_model(folder: str, size: str = "tiny", seed: int = 0, arch: str = "llama") -> str:
    """Save a randomly initialised model of `size` plus the tokenizer into `folder`; return it."""
    model, tok = tiny_model(size, seed, arch)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
