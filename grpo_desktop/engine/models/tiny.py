"""Small causal LMs with random weights and a character-level tokenizer, built locally.

The one place the tests, the benchmarks and scripts/build_demo_model.py get a small model from:
named sizes (`SIZES`) from "micro" (~20k parameters) to "medium" (~25M), Llama or Qwen2, plus
"qwen2.5-0.5b", Qwen2.5-0.5B's real width, depth and vocabulary, for benchmarks that need a real
model's cost. Nothing is downloaded. The tokenizer knows digits, letters, common punctuation, the
reasoning/answer tags as single tokens and a small chat template, so prompts look like a real chat
model's. For a real tokenizer's behaviour (byte-level BPE, several EOS ids, BOS, no pad), use
engine/models/shapes.py instead.

    python -c "from grpo_desktop.engine.models.tiny import build_tiny_model as b; print(b('/tmp/m'))"
"""

from __future__ import annotations

import os
import string
from typing import Any, NamedTuple

SPECIAL_TOKENS = ["<|pad|>", "<|unk|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]
CHARS = list(string.digits + string.ascii_letters + " \n+-*/=×().,:;?!'\"#%<>[]{}_^\\|&$@`~")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class Size(NamedTuple):
    """A named model shape. Every projection's output size is a multiple of 32, which
    bitsandbytes' CPU 4-bit kernels require."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int = 0  # 0: the tokenizer's own; more: the tokenizer padded with filler tokens
    arch: str = ""  # "": the caller's choice (llama by default); else only this one
    dtype: str = "float32"  # the weights, as built and saved
    config: tuple[tuple[str, Any], ...] = ()  # further config fields (context, RoPE, norm)


# Qwen2.5-0.5B's context length, RoPE base and norm epsilon.
_QWEN_05B_CONFIG = (
    ("max_position_embeddings", 32768),
    ("rope_theta", 1_000_000.0),
    ("rms_norm_eps", 1e-6),
)

SIZES = {
    "micro": Size(64, 1, 2, 1, 128),  # ~20k params: unit tests
    "tiny": Size(64, 2, 2, 1, 192),  # ~0.1M params: end-to-end tests
    "demo": Size(192, 4, 6, 2, 512),  # ~1.6M params: the built-in demo model
    "small": Size(256, 4, 8, 4, 688),  # ~3M params: benchmarks
    "medium": Size(512, 8, 8, 4, 1376),  # ~25M params: benchmarks
    # Qwen2.5-0.5B's shape (~0.5B params, bfloat16): bench/gpu.py's model. The char tokenizer is
    # padded to the 151,936-row vocabulary; filler tokens decode as "[id]", so any id decodes.
    "qwen2.5-0.5b": Size(896, 24, 14, 2, 4864, 151_936, "qwen2", "bfloat16", _QWEN_05B_CONFIG),
}


def _char_tokenizer(names: list[str]):
    """A fast tokenizer with one token per name, text split into single characters, EOS =
    <|end|>, PAD = <|pad|>, the chat template and left padding."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(names)}, unk_token="<|unk|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<|pad|>", unk_token="<|unk|>", eos_token="<|end|>"
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[3:]})
    return tok


def build_tokenizer():
    """A character-level fast tokenizer with chat template, EOS = <|end|>, PAD = <|pad|>."""
    tok = _char_tokenizer(SPECIAL_TOKENS + TAG_TOKENS + CHARS)
    tok.add_tokens(TAG_TOKENS)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def _padded_tokenizer(vocab_size: int):
    """The character tokenizer padded with "[id]" filler tokens to `vocab_size` rows (the tags
    are in its vocabulary but, not added as tokens, are read character by character)."""
    names = SPECIAL_TOKENS + TAG_TOKENS + CHARS
    names += [f"[{i}]" for i in range(len(names), vocab_size)]
    tok = _char_tokenizer(names)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def tiny_model(size: str = "tiny", seed: int = 0, arch: str | None = None):
    """(model, tokenizer): a randomly initialised model of `size`, in memory, in the size's
    dtype (float32 but for qwen2.5-0.5b). `arch`: llama (default) or qwen2, where the size
    allows it."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    shape = SIZES[size]
    if shape.arch and arch not in (None, shape.arch):
        raise ValueError(f"Size {size!r} is a {shape.arch} model, not {arch}.")
    arch = shape.arch or arch or "llama"
    tok = _padded_tokenizer(shape.vocab) if shape.vocab else build_tokenizer()
    common = dict(
        vocab_size=shape.vocab or len(tok),
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=1024,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    common.update(shape.config)
    config = LlamaConfig(**common) if arch == "llama" else Qwen2Config(**common)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    if shape.dtype != "float32":
        model = model.to(getattr(torch, shape.dtype))
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def build_tiny_model(
    folder: str, size: str = "tiny", seed: int = 0, arch: str | None = None
) -> str:
    """Save a randomly initialised model of `size` plus the tokenizer into `folder`; return it."""
    model, tok = tiny_model(size, seed, arch)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
