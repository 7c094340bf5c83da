"""Realistic-shape test models: a real model family's width, vocabulary and tokenizer behaviour,
random weights and two layers, saved as a local folder that load_policy opens like any other.

tiny.py's models are right for speed but hide what real models do: a 151,936-token vocabulary
(logits memory), several EOS ids in generation_config.json, no pad token, a BOS that the
tokenizer adds itself, chat templates that write the BOS and a default system prompt, a
generation_config with its own sampling settings. `SHAPES` reproduces exactly that for Qwen2.5
(0.5B and 1.5B widths, with and without a pad token) and Llama-3 (instruct and base); each
entry says what it copies. The BPE merges are learnt quickly from a small corpus generated here;
the rest of the vocabulary is filler entries (" w123") that no text encodes to but a model can
emit. Weights are bfloat16 (the 0.5B-shaped folder is ~330 MB). `favour=` makes a model that
emits one token whatever the input (its embedding dominates the final hidden state), for EOS
tests. Not a real model: nothing here is downloaded, and the outputs are noise.

Try it:  python -m grpo_desktop.engine.models.shapes /tmp/qwen-shaped --shape qwen2.5-0.5b-shaped
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\n" + QWEN_SYSTEM + "<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if not (m['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LLAMA_SYSTEM = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
LLAMA_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '' %}"
    "{%- set rest = messages %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n"
    + LLAMA_SYSTEM.replace("\n", "\\n")
    + "' + system + '<|eot_id|>' }}"
    "{%- for m in rest %}"
    "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] + "
    "'<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
QWEN_SPECIAL_TEXT = (
    "endoftext im_start im_end object_ref_start object_ref_end box_start box_end quad_start "
    "quad_end vision_start vision_end vision_pad image_pad video_pad"
)
QWEN_FIM_TEXT = "fim_prefix fim_middle fim_suffix fim_pad repo_name file_sep"
QWEN_ADDED = [  # (text, special), ids 151643 ... 151664 as in Qwen2.5
    *[(f"<|{name}|>", True) for name in QWEN_SPECIAL_TEXT.split()],
    ("<tool_call>", False),
    ("</tool_call>", False),
    *[(f"<|{name}|>", True) for name in QWEN_FIM_TEXT.split()],
]
LLAMA_SPECIAL_TEXT = (
    "begin_of_text end_of_text reserved_special_token_0 reserved_special_token_1 "
    "finetune_right_pad_id reserved_special_token_2 start_header_id end_header_id eom_id eot_id "
    "python_tag"
)
LLAMA_ADDED = [  # ids 128000 ... 128255 as in Llama-3.1/3.2
    *[f"<|{name}|>" for name in LLAMA_SPECIAL_TEXT.split()],
    *[f"<|reserved_special_token_{i}|>" for i in range(3, 248)],
]


MAX_LAYERS = 36  # tests use 2; bench/gpu.py builds the 1.5B shape at its full 28


@dataclass(frozen=True)
class Shape:
    arch: str  # "qwen2" or "llama"
    base_vocab: int  # BPE entries before the added tokens
    vocab_size: int  # embedding rows
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    rope_theta: float
    eos: str  # the tokenizer's eos_token
    pad: str | None
    bos: str | None  # added by the tokenizer to every encoding
    template: str | None
    generation: dict = field(default_factory=dict)  # generation_config.json
    extra: dict = field(default_factory=dict)  # more config.json fields


QWEN_GENERATION = {
    "bos_token_id": 151643,
    "pad_token_id": 151643,
    "eos_token_id": [151645, 151643],
    "do_sample": True,
    "repetition_penalty": 1.1,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
}
_QWEN = dict(
    arch="qwen2", base_vocab=151_643, vocab_size=151_936, hidden=896, heads=14, kv_heads=2,
    intermediate=4864, rope_theta=1e6, eos="<|im_end|>", bos=None, template=QWEN_TEMPLATE,
    generation=QWEN_GENERATION,
    extra={"bos_token_id": 151643, "eos_token_id": 151645, "max_position_embeddings": 32768,
           "rms_norm_eps": 1e-6},
)  # fmt: skip
_LLAMA = dict(
    arch="llama", base_vocab=128_000, vocab_size=128_256, hidden=256, heads=4, kv_heads=2,
    intermediate=768, rope_theta=5e5, pad=None, bos="<|begin_of_text|>",
    extra={"bos_token_id": 128000, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
           "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "high_freq_factor": 4.0,
                            "low_freq_factor": 1.0, "original_max_position_embeddings": 8192}},
)  # fmt: skip
SHAPES = {
    # Qwen2.5-0.5B-Instruct's width (hidden 896, 14/2 heads, tied embeddings, rope theta 1e6) and
    # vocabulary layout: 151,643 byte-level BPE entries plus Qwen's 22 added tokens (151,665 ids;
    # 151,936 embedding rows, as the real one has); pad <|endoftext|>, eos <|im_end|>, the
    # instruct model's generation_config (two EOS ids, repetition_penalty, top_k ...); ChatML with
    # a default system prompt; no BOS.
    "qwen2.5-0.5b-shaped": Shape(**_QWEN, pad="<|endoftext|>"),
    "qwen2.5-0.5b-shaped-nopad": Shape(**_QWEN, pad=None),  # the same without a pad token
    # Qwen2.5-1.5B-Instruct's width (28 layers in the real model): for bench/gpu.py at full depth.
    "qwen2.5-1.5b-shaped": Shape(
        **{**_QWEN, "hidden": 1536, "heads": 12, "intermediate": 8960}, pad="<|endoftext|>"
    ),
    # Llama-3.2-Instruct's tokenizer (128,000 BPE entries + 256 specials), a BOS the tokenizer
    # adds, no pad, three EOS ids, the Llama-3 chat template (it writes the BOS itself) with a
    # system header; a small width (hidden 256).
    "llama-3-shaped": Shape(
        **_LLAMA,
        eos="<|eot_id|>",
        template=LLAMA_TEMPLATE,
        generation={
            "bos_token_id": 128000,
            "eos_token_id": [128001, 128008, 128009],
            "do_sample": True,
            "temperature": 0.6,
            "top_p": 0.9,
        },
    ),
    "llama-3-base-shaped": Shape(  # base Llama-3: eos <|end_of_text|>, no chat template
        **_LLAMA,
        eos="<|end_of_text|>",
        template=None,
        generation={"bos_token_id": 128000, "eos_token_id": 128001},
    ),
}

_WORDS_TEXT = (
    "the a of to and in is that it for was on are as with be at by this have from or one had "
    "not but what all were when we there can an your which their said if do will each about how "
    "up out them then she many some so these would other into has more her two like him see time "
    "could no make than first been its who now people my made over did down only way find use may "
    "water long little very after words called just where most know get through back much before "
    "go good new write our used me man too any day same right look think also around another came "
    "come work three word must because does part even place well such here take why things help "
    "answer number sum product total apples each costs how many left more less equals step reason "
    "Qwen Llama assistant user system think answer"
)


def _corpus() -> list[str]:
    """A few thousand made-up lines of words, numbers, code and tags (deterministic)."""
    import random

    rng = random.Random(0)
    words_list = _WORDS_TEXT.split()
    lines = []
    for i in range(3000):
        words = rng.choices(words_list, k=rng.randint(4, 14))
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        lines.append(f"{' '.join(words).capitalize()}? {a} + {b} = {a + b}.")
        if i % 5 == 0:
            lines.append(f"<think>{a} * {b} is {a * b}</think><answer>{a * b}</answer>")
        if i % 7 == 0:
            lines.append(f"def f{i}(x):\n    return x ** {b} - {a}  # {words[0]}")
    return lines


def build_tokenizer(shape: Shape):
    """A fast byte-level BPE tokenizer with the shape's vocabulary size, added tokens, BOS rule,
    special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    learner = Tokenizer(models.BPE())
    learner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=4000,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    learner.train_from_iterator(_corpus(), trainer)
    learnt = json.loads(learner.to_str())["model"]
    vocab: dict[str, int] = dict(learnt["vocab"])
    filler = 0
    while len(vocab) < shape.base_vocab:  # entries no text encodes to ("Ġ" is a space)
        vocab.setdefault(f"Ġw{filler}", len(vocab))
        filler += 1
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learnt["merges"]]
    core = Tokenizer(models.BPE(vocab, merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    added = QWEN_ADDED if shape.arch == "qwen2" else [(t, True) for t in LLAMA_ADDED]
    from tokenizers import AddedToken

    for text, special in added:  # one by one: ids follow the list's order
        core.add_tokens([AddedToken(text, special=special, normalized=False)])
    if shape.bos is not None:
        bos_id = core.token_to_id(shape.bos)
        core.post_processor = processors.TemplateProcessing(
            single=f"{shape.bos} $A",
            pair=f"{shape.bos} $A {shape.bos} $B",
            special_tokens=[(shape.bos, bos_id)],
        )
    specials = {"eos_token": shape.eos}
    if shape.pad is not None:
        specials["pad_token"] = shape.pad
    if shape.bos is not None:
        specials["bos_token"] = shape.bos
    tok = PreTrainedTokenizerFast(tokenizer_object=core, **specials)
    if shape.template is not None:
        tok.chat_template = shape.template
    return tok


def model_config(shape: Shape, layers: int = 2):
    from transformers import LlamaConfig, Qwen2Config

    config_class = Qwen2Config if shape.arch == "qwen2" else LlamaConfig
    fields = dict(shape.extra)
    rope_scaling = fields.pop("rope_scaling", None)
    config = config_class(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        tie_word_embeddings=True,
        rope_theta=shape.rope_theta,
        **({"rope_scaling": rope_scaling} if rope_scaling else {}),
        **fields,
    )
    config.dtype = "bfloat16"
    return config


def _random_weights(model, seed: int, std: float = 0.02) -> None:
    """Normal(0, std) matrices, unit norms, zero biases. A matrix of over 4M entries (the
    embedding) is the sum of two small random tables, row i = A[i % 512] + B[i // 512]: distinct
    rows with the same spread, ten times faster than drawing 136M numbers."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0 if "norm" in name else 0.0)
            elif p.numel() <= 4_000_000:
                p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=gen))
            else:
                rows, width = p.shape
                a = torch.empty(512, width).normal_(0.0, std / 2**0.5, generator=gen)
                b = torch.empty(-(-rows // 512), width).normal_(0.0, std / 2**0.5, generator=gen)
                p.copy_((b[:, None, :] + a[None, :, :]).reshape(-1, width)[:rows])  # (rows, width)


def _favour(model, token_id: int) -> None:
    """Make `token_id` win at every position: every embedding row gets +1 in hidden dimension 0,
    the favoured row +40. The residual stream then carries a large positive dimension 0 (random
    layers add little), which the final norm keeps dominant, and the tied output matrix scores
    the favoured row 40 times higher there than any other."""
    import torch

    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        emb[:, 0] = 1.0
        emb[token_id, 0] = 40.0
        out = model.get_output_embeddings().weight
        if out.data_ptr() != emb.data_ptr():
            out[:, 0] = 1.0
            out[token_id, 0] = 40.0


def build_shaped(
    folder: str, name: str, layers: int = 2, seed: int = 0, favour: str | None = None
) -> str:
    """Save the `name` shape (SHAPES) with `layers` random layers (bfloat16) into `folder`; with
    `favour` (a token's text) the model emits that token whatever it is given. Returns `folder`."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.initialization import no_init_weights

    if name not in SHAPES:
        raise ValueError(f"Unknown shape {name!r}: choose one of {', '.join(SHAPES)}.")
    if not 1 <= layers <= MAX_LAYERS:
        raise ValueError(f"layers must be 1 to {MAX_LAYERS}, not {layers}.")
    shape = SHAPES[name]
    tok = build_tokenizer(shape)
    config = model_config(shape, layers)
    with no_init_weights():  # transformers' init draws every weight twice as slowly
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.tie_weights()  # skipped with the init: lm_head would be a second 136M-entry matrix
    _random_weights(model, seed)
    if favour is not None:
        token_id = tok.convert_tokens_to_ids(favour)
        if token_id is None or token_id == tok.unk_token_id:
            raise ValueError(f"{favour!r} is not a token of {name}.")
        _favour(model, token_id)
    model.generation_config = GenerationConfig(**shape.generation)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if shape.pad is None:  # say so: transformers' Qwen2Tokenizer defaults to <|endoftext|>
        _set_json(os.path.join(folder, "tokenizer_config.json"), pad_token=None)
    return folder


def _set_json(path: str, **values) -> None:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data.update(values)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_desktop.engine.models.shapes",
        description="Save a realistic-shape model with random weights into a folder.",
    )
    parser.add_argument("out_dir", help="the folder to write (created if missing)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b-shaped")
    parser.add_argument(
        "--layers", type=int, default=2, help=f"decoder layers (1-{MAX_LAYERS}, default 2)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--favour", default=None, help="a token the model always emits")
    args = parser.parse_args(argv)
    build_shaped(args.out_dir, args.shape, args.layers, args.seed, args.favour)
    print(args.out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
