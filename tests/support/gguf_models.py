"""Small models for the GGUF export tests, with the tokenizers of real model families.

engine/models/shapes.py's Llama-3 and Qwen2.5 shapes shrunk to a 4,000-entry BPE vocabulary plus the
family's added tokens (so the special tokens, BOS rule, EOS lists and chat templates are the
real ones) and a 64-wide, 2-layer float32 model, with 32 embedding rows more than the tokenizer
has ids (as Qwen2.5's embedding has). The ids in generation_config.json and config.json are
moved to where the added tokens now sit. `real_pre_tokenizer=True` gives the tokenizer the
family's real pre-tokenizer regex (Llama 3: digits in threes; Qwen2: one by one) instead of
shapes.py's GPT-2 one; `sentencepiece_llama` builds a Llama-2-style SentencePiece tokenizer.
`export_all` builds and exports them once per test process; `field`, `values` ... read the files.
`tiny_run_config` is a one-step LoRA run of the demo's task on such a model (or its GGUF).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.export.gguf_vocab import PRE_TOKENIZER_REGEXES
from grpo_desktop.engine.models import shapes
from tests.support.paths import ROOT

DEMO = os.path.join(ROOT, "grpo_desktop", "resources", "demo_model")

BASE = 4000
EXTRA_ROWS = 32


def _moved(value, shift):
    if isinstance(value, list):
        return [v - shift for v in value]
    return None if value is None else value - shift


def small_shape(name: str, hidden: int = 64, heads: int = 4, kv_heads: int = 2):
    base = shapes.SHAPES[name]
    added = len(shapes.LLAMA_ADDED) if base.arch == "llama" else len(shapes.QWEN_ADDED)
    shift = base.base_vocab - BASE
    generation = {
        k: _moved(v, shift) if k.endswith("_id") else v for k, v in base.generation.items()
    }
    extra = {k: _moved(v, shift) if k.endswith("token_id") else v for k, v in base.extra.items()}
    return dataclasses.replace(
        base,
        base_vocab=BASE,
        vocab_size=BASE + added + EXTRA_ROWS,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        intermediate=2 * hidden,
        generation=generation,
        extra=extra,
    )


def _real_pre_tokenizer(tok, arch: str):
    """`tok` with the family's pre-tokenizer regex; Llama 3's also takes a word that is a whole
    token without merging (tokenizer.json's "ignore_merges": true)."""
    import json

    from tokenizers import Regex, Tokenizer, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pattern = PRE_TOKENIZER_REGEXES["llama-bpe" if arch == "llama" else "qwen2"]
    state = json.loads(tok.backend_tokenizer.to_str())
    state["model"]["ignore_merges"] = arch == "llama"
    core = Tokenizer.from_str(json.dumps(state))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    specials = {k: getattr(tok, k) for k in ("bos_token", "eos_token", "pad_token")}
    out = PreTrainedTokenizerFast(
        tokenizer_object=core, **{k: v for k, v in specials.items() if v is not None}
    )
    out.chat_template = tok.chat_template
    return out


def build_small(
    folder: str, name: str, seed: int = 0, real_pre_tokenizer: bool = False, tied: bool = True
):
    """Save the small `name` model (float32) and its tokenizer into `folder`; return
    (model, tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    shape = small_shape(name)
    tok = shapes.build_tokenizer(shape)
    if real_pre_tokenizer:
        tok = _real_pre_tokenizer(tok, shape.arch)
    config = shapes.model_config(shape, layers=2)
    config.dtype = "float32"
    config.tie_word_embeddings = tied
    config.initializer_range = 0.1  # at 0.02 a 64-wide model emits one token over and over
    if shape.arch == "qwen2":
        config.attention_bias = True  # Qwen2 always has q/k/v biases
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # non-zero biases and norms, so their order and values count
        for param_name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in param_name else 0.0))
    model.generation_config = GenerationConfig(**shape.generation)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model, tok


def sentencepiece_llama(folder: str, seed: int = 0):
    """A Llama with a Llama-2-style SentencePiece tokenizer: <unk> <s> </s>, 256 byte pieces,
    BPE pieces learnt with "▁" for spaces, byte fallback, BOS added; saved into `folder`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    learner = Tokenizer(models.BPE())
    learner.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=800, show_progress=False)
    learner.train_from_iterator(shapes._corpus(), trainer)
    learnt = learner.get_vocab()
    import json

    merges = json.loads(learner.to_str())["model"]["merges"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece, _ in sorted(learnt.items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]
    core = Tokenizer(
        models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    )
    core.normalizer = normalizer
    core.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model, tok


_EXPORTED: dict = {}


def export_all(tmp_path_factory) -> dict:
    """{kind: (model, tokenizer, model_dir, {outtype: (result, GGUFReader)})} for "llama" (Llama
    3 shape), "qwen" (Qwen2.5 shape) and "spm" (SentencePiece Llama), each exported as f16 and
    q8_0; built once per test process and shared by the GGUF test modules."""
    from gguf import GGUFReader

    from grpo_desktop.engine.export.gguf import write_gguf

    if _EXPORTED:
        return _EXPORTED
    root = tmp_path_factory.mktemp("gguf")
    builders = {
        "llama": lambda d: build_small(d, "llama-3-shaped", real_pre_tokenizer=True),
        "qwen": lambda d: build_small(d, "qwen2.5-0.5b-shaped", real_pre_tokenizer=True),
        "spm": sentencepiece_llama,
    }
    for kind, build in builders.items():
        model_dir = str(root / kind)
        model, tok = build(model_dir)
        files = {}
        for outtype in ("f16", "q8_0"):
            result = write_gguf(model_dir, str(root / f"{kind}-{outtype}"), outtype=outtype)
            files[outtype] = (result, GGUFReader(result["path"]))
        _EXPORTED[kind] = (model, tok, model_dir, files)
    return _EXPORTED


# Reading the files back.


def field(reader, key):
    """A metadata value as Python data."""
    return reader.fields[key].contents()


def read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def tensors_of(reader) -> dict:
    return {t.name: t for t in reader.tensors}


def values(tensor) -> np.ndarray:
    """A GGUF tensor as float32 in numpy order (rows, columns)."""
    shape = tuple(int(n) for n in reversed(tensor.shape))
    if tensor.tensor_type == GGMLQuantizationType.Q8_0:
        return dequantize(np.asarray(tensor.data), GGMLQuantizationType.Q8_0).reshape(shape)
    return np.asarray(tensor.data, dtype=np.float32).reshape(shape)


def hf_weight(model, name) -> np.ndarray:
    return model.state_dict()[name].float().numpy()


def tiny_run_config(model: str, max_completion_length: int = 4, **run):
    """The demo's task on `model` (a folder or a .gguf) cut to one short LoRA step: 2 answers to
    1 prompt, 2 held-out problems, no system prompt; `run` overrides the run section."""
    return demo_config().replace(
        model={"name_or_path": model},
        lora={"enabled": True, "r": 4, "alpha": 8},
        data={"eval_size": 2, "system_prompt": ""},
        algorithm={
            "num_generations": 2,
            "prompts_per_step": 1,
            "max_completion_length": max_completion_length,
        },
        run={"max_steps": 1, "eval_every": 0, **run},
    )
