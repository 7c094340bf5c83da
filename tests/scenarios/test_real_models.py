"""Correct training with real models: what realistic models do that the tiny test
model does not (several EOS ids, a BOS, a generation_config with its own sampling settings,
half-precision weights, 4-bit and 8-bit layers) is handled as the run's settings say.

The 128k/152k-vocabulary models (engine/models/shapes.py) are used where the vocabulary or the tokenizer
matters; the tiny model everywhere else (its forward is cheap on two cores)."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.data.dataset import Example, build_prompt
from grpo_desktop.engine.grpo.evaluate import evaluate
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.models.loading import auto_dtype, load_kwargs, load_policy, load_tokenizer
from grpo_desktop.engine.models.tiny import tiny_model
from grpo_desktop.engine.ops import kernels
from grpo_desktop.engine.sampling.rollout import (
    completion_mask,
    generate_completions,
    overlong_prompts,
    stop_ids,
    token_logps,
    tokenize_prompts,
)

LLAMA, LLAMA_BASE = "llama-3-shaped", "llama-3-base-shaped"
END_OF_TEXT, BOS = 128001, 128000
# A random model's answers are all wrong (no spread, no gradient): score distinct characters.
SPREAD = "def check(completion, answer, prompt):\n    return float(len(set(completion)))\n"


def _cfg(path: str, **sections) -> TrainConfig:
    model = {"name_or_path": path, "device": "cpu", **sections.pop("model", {})}
    return TrainConfig().replace(model=model, **sections)


# --------------------------------------------------------------- full fine-tuning in bfloat16


@pytest.fixture(scope="module")
def bf16_model_dir(tmp_path_factory) -> str:
    """The tiny model saved in bfloat16, as hub models are."""
    folder = tmp_path_factory.mktemp("tiny-bf16")
    model, tok = tiny_model("tiny", seed=0)
    model.to(torch.bfloat16).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def test_full_finetuning_of_a_bf16_model_lands_small_updates(bf16_model_dir, tmp_path):
    """10 AdamW steps at lr 1e-5. In pure bfloat16 an update smaller than half a weight's last
    bit (2^-9 of it) rounds away: |Δ| ≈ lr per step = 1e-5 against weights of ~0.02, whose bit
    is 2^-13 ≈ 1.2e-4: most never move (15.6 % moved on the 0.5B shape). With float32 master
    weights every weight with a gradient moves."""
    cfg = _cfg(
        bf16_model_dir,
        model={"dtype": "bfloat16"},
        lora={"enabled": False},
        data={"eval_size": 0, "arithmetic_size": 50},
        rewards={"accuracy_weight": 0.0, "format_weight": 0.0, "custom_checker": SPREAD},
        algorithm={
            "num_generations": 4,
            "prompts_per_step": 2,
            "max_completion_length": 12,
            "learning_rate": 1e-5,
            "lr_scheduler": "constant",
            "warmup_steps": 0,
            "beta": 0.04,
        },
        run={"max_steps": 10, "eval_every": 0, "checkpoint_every": 100, "seed": 3},
    )
    policy = load_policy(cfg)
    assert {p.dtype for p in policy.trainable_parameters()} == {torch.float32}
    assert {p.dtype for p in policy.ref_model.parameters()} == {torch.bfloat16}
    assert "float32 master weights" in policy.describe()
    with torch.no_grad():  # the products run in bfloat16, as the user chose
        ids = torch.tensor([[5, 6, 7]])
        logits = policy.model(input_ids=ids).logits
        # On the CPU only the linear layers' products (ops/bf16_products.py): float32 logits
        # holding bfloat16 values; on a GPU autocast's bfloat16 logits.
        assert logits.dtype in (torch.float32, torch.bfloat16)
        assert torch.equal(logits.bfloat16().float(), logits.float())
    del policy
    events = list(train(cfg, TrainControl(), run_dir=str(tmp_path / "run")))
    assert events[-1].status == "completed", events[-1].message
    before = load_file(str(Path(bf16_model_dir) / "model.safetensors"))
    (saved,) = (tmp_path / "run" / "checkpoints").glob("step-*/model/model.safetensors")
    after = load_file(str(saved))
    moved = total = 0
    for name, old in before.items():
        new = after[name]
        assert new.dtype == torch.float32  # the master weights are what is saved
        moved += int((new != old.float()).sum())
        total += old.numel()
    assert moved / total > 0.95, f"only {moved / total:.1%} of the weights changed"


# --------------------------------------------------------------------------- every EOS id


def test_completion_mask_ends_at_any_of_several_eos_ids():
    ids = torch.tensor([[5, 9, 7, 2], [5, 2, 9, 9], [5, 5, 5, 5]])
    mask, truncated = completion_mask(ids, [2, 9])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert truncated.tolist() == [False, False, True]


def test_every_eos_id_of_generation_config_ends_a_completion(shaped_model_dir):
    """Llama-3.2-Instruct's tokenizer says <|eot_id|>; its generation_config also lists
    <|end_of_text|> and <|eom_id|>. A model that always says <|end_of_text|> is done after one
    token: when sampling for training, in the evaluation and in the generate() fallback."""
    folder = shaped_model_dir(LLAMA, favour="<|end_of_text|>")
    cfg = _cfg(folder, algorithm={"max_completion_length": 8}, data={"eval_size": 0})
    policy = load_policy(cfg)
    assert policy.tokenizer.eos_token_id == 128009
    assert stop_ids(policy.model, policy.tokenizer) == [128009, 128001, 128008]
    texts = [build_prompt(policy.tokenizer, q) for q in ("What is 2 + 2?", "Name a colour.")]
    ids, mask = tokenize_prompts(policy.tokenizer, texts, 64, policy.device)
    ids, mask = ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)  # (4, P)
    comps = generate_completions(policy.model, policy.tokenizer, ids, mask, max_new_tokens=8)
    assert comps.completion_ids.tolist() == [[END_OF_TEXT]] * 4
    assert comps.lengths.tolist() == [1.0] * 4 and not comps.truncated.any()
    assert comps.texts == [""] * 4  # a special token: not part of the answer text
    result = evaluate(policy, [Example("What is 2 + 2?", "4")], cfg, step=0)
    assert result.mean_length == 1.0
    fallback = generate_completions(
        _NoPositionIds(policy.model), policy.tokenizer, ids, mask, max_new_tokens=8, greedy=True
    )
    assert fallback.lengths.tolist() == [1.0] * 4 and not fallback.truncated.any()


class _NoPositionIds(torch.nn.Module):
    """A model whose forward takes no position_ids (as some remote-code models): the rollout
    falls back to transformers' generate for it."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.generation_config = inner.generation_config

    def forward(self, input_ids, attention_mask=None):  # no position_ids, no cache
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)

    def generate(self, **kw):
        return self.inner.generate(**kw)


# ------------------------------------------------------------------------------------- BOS


def test_base_model_prompts_keep_the_bos_the_tokenizer_adds(shaped_model_dir):
    """Base Llama-3 has no chat template: the plain prompt gets <|begin_of_text|> as the
    tokenizer would add it; the instruct template writes it itself: still once."""
    for name in (LLAMA_BASE, LLAMA):
        tok = load_tokenizer(shaped_model_dir(name))
        text = build_prompt(tok, "What is 2 + 2?", "Answer briefly.")
        assert text.startswith("<|begin_of_text|>") == (name == LLAMA)
        ids, mask = tokenize_prompts(tok, [text, "Hi"], 256, torch.device("cpu"))
        for row, keep in zip(ids.tolist(), mask.tolist()):
            real = [t for t, k in zip(row, keep) if k]
            assert real[0] == BOS and real.count(BOS) == 1, name
        assert (
            ids[0, mask[0].bool()].tolist()
            == tok(text.removeprefix("<|begin_of_text|>"))["input_ids"]
        )  # exactly what the tokenizer makes of the text
        # Cut to 8 tokens: the beginning goes, the BOS stays.
        short, _ = tokenize_prompts(tok, [text], 8, torch.device("cpu"))
        assert short[0, 0] == BOS and short[0, 1:].tolist() == ids[0, -7:].tolist()
        n = len(tok(text.removeprefix("<|begin_of_text|>"))["input_ids"])
        assert overlong_prompts(tok, ["What is 2 + 2?"], n - 1, "Answer briefly.") == [(0, n)]


def test_tokenizers_without_a_bos_get_none(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    ids, _ = tokenize_prompts(tok, ["ab"], 8, torch.device("cpu"))
    assert ids.tolist() == [tok("ab", add_special_tokens=False)["input_ids"]]


# ---------------------------------------------------------------------------------- 4-bit


def test_four_bit_parameter_count_is_the_real_one(tiny_model_dir):
    """bitsandbytes keeps two 4-bit weights per byte: numel() of a packed weight is half."""
    plain = load_policy(_cfg(tiny_model_dir)).num_parameters()
    four = load_policy(_cfg(tiny_model_dir, quantization={"mode": "4bit"})).num_parameters()
    assert four == plain


def test_four_bit_checkpointed_backward_is_non_reentrant_and_quiet(tiny_model_dir):
    cfg = _cfg(
        tiny_model_dir, model={"gradient_checkpointing": True}, quantization={"mode": "4bit"}
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_policy(cfg).model.train()
        _backward(model)
    # torch's "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly"
    # and the reentrant variant's "None of the inputs have requires_grad=True"
    said = [
        str(w.message)
        for w in caught
        if "reentrant" in str(w.message) or "requires_grad=True" in str(w.message)
    ]
    assert not said, said
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def _backward(model) -> None:
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 60, (4, 6), generator=g)  # (4, 6)
    completion = torch.randint(3, 60, (4, 5), generator=g)  # (4, 5)
    ones = torch.ones_like
    logps, _ = token_logps(model, prompt, ones(prompt), completion, ones(completion))
    logps.sum().backward()


def test_qlora_keeps_embeddings_norms_and_head_in_bf16(tiny_model_dir):
    """peft's preparation made every unquantized weight float32; they stay bfloat16, the
    adapters are float32 (peft's default) and the backward gives finite gradients."""
    cfg = _cfg(tiny_model_dir, model={"dtype": "bfloat16"}, quantization={"mode": "4bit"})
    model = load_policy(cfg).model
    base = model.get_base_model()
    assert base.get_input_embeddings().weight.dtype == torch.bfloat16
    assert base.get_output_embeddings().weight.dtype == torch.bfloat16
    norms = [p for n, p in base.named_parameters() if "norm" in n]
    assert norms and {p.dtype for p in norms} == {torch.bfloat16}
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert lora and {p.dtype for p in lora} == {torch.float32}
    model.train()
    _backward(model)
    assert all(torch.isfinite(p.grad).all() for p in lora)


# ---------------------------------------------------------------------------------- 8-bit


def test_eight_bit_sampling_logs_its_cast_notice_once(tiny_model_dir, caplog):
    """bitsandbytes logs a notice on every 8-bit product outside training mode (sampling):
    a 2-layer model's 14 linears × 128 tokens were the 1,792 lines of one step."""
    import bitsandbytes as bnb

    policy = load_policy(_cfg(tiny_model_dir, quantization={"mode": "8bit"}))
    calls = []
    for module in policy.model.modules():
        if isinstance(module, bnb.nn.Linear8bitLt):
            module.register_forward_hook(lambda *_: calls.append(1))
    ids, mask = tokenize_prompts(policy.tokenizer, ["<|user|>ab<|end|>"] * 2, 16, "cpu")
    with caplog.at_level(logging.WARNING, logger="bitsandbytes"):
        generate_completions(
            policy.model, policy.tokenizer, ids, mask, max_new_tokens=8, min_new_tokens=8
        )
    notices = [r for r in caplog.records if "MatMul8bitLt" in r.getMessage()]
    assert len(calls) >= 14 * 8 and len(notices) <= 1


# ----------------------------------------------------------------------- device and dtype


def test_auto_precision_is_bf16_only_where_the_gpu_runs_it():
    assert auto_dtype("cuda", (9, 0)) == torch.bfloat16  # H100
    assert auto_dtype("cuda", (8, 0)) == torch.bfloat16  # A100
    assert auto_dtype("cuda", (8, 6)) == torch.bfloat16  # RTX 30xx
    assert auto_dtype("cuda", (7, 5)) == torch.float32  # T4, RTX 20xx: bf16 only emulated
    assert auto_dtype("cuda", (7, 0)) == torch.float32  # V100
    assert auto_dtype("cuda", (6, 1)) == torch.float32  # GTX 10xx
    assert auto_dtype("cpu") == torch.float32


def test_weights_load_straight_to_the_gpu_and_the_cpu_is_unchanged():
    cuda = torch.device("cuda", 1)
    assert load_kwargs(torch.bfloat16, cuda, quantized=False) == {
        "dtype": torch.bfloat16,
        "device_map": {"": 1},
    }
    assert load_kwargs(torch.bfloat16, torch.device("cuda"), True)["device_map"] == {"": 0}
    cpu = torch.device("cpu")  # what the CPU path always passed
    assert load_kwargs(torch.float32, cpu, quantized=False) == {"dtype": torch.float32}
    assert load_kwargs(torch.float32, cpu, quantized=True)["device_map"] == {"": "cpu"}


def test_fast_linear_is_never_entered_for_other_devices(choose_linear, monkeypatch):
    """The oneDNN routing mode sees every torch call of its block: only for CPU work. (What
    this shows: the gate, with device objects and CUDA's state faked; no CUDA run.)"""
    choose_linear("1")

    def depth_inside(*args) -> int:
        with kernels.fast_linear(*args):
            return kernels._RouteLinear.depth()

    if not kernels.enabled():
        pytest.skip("this torch has no oneDNN linear")
    assert depth_inside(torch.device("cpu")) == 1
    assert depth_inside(torch.device("cuda", 0)) == 0
    assert depth_inside("meta") == 0
    assert depth_inside() == 1  # CUDA unused in this process: CPU work
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert depth_inside() == 0
    assert depth_inside(torch.device("cpu")) == 1


# ------------------------------------------------------- generate() uses only the run's settings


@pytest.fixture(scope="module")
def opinionated_model_dir(tmp_path_factory) -> str:
    """The tiny model with a generation_config.json as hub models ship them."""
    folder = tmp_path_factory.mktemp("tiny-genconfig")
    model, tok = tiny_model("tiny", seed=1)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    config.update(repetition_penalty=1.5, top_k=3, top_p=0.5, temperature=0.3, do_sample=True)
    (folder / "generation_config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(folder)


def _teacher_forced_logits(model, ids, mask, completion):
    """Logits (N, C, V) the model gives each completion position, in one plain forward."""
    full = torch.cat([ids, completion], 1)
    attention = torch.cat([mask, torch.ones_like(completion)], 1)
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(input_ids=full, attention_mask=attention, position_ids=positions)
    return out.logits[:, ids.size(1) - 1 : -1].float()


def test_generate_fallback_samples_only_with_the_runs_settings(opinionated_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(opinionated_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(opinionated_model_dir)
    assert model.generation_config.repetition_penalty == 1.5
    ids, mask = tokenize_prompts(tok, ["<|user|>abc<|end|><|assistant|>"] * 6, 32, "cpu")
    wrapped = _NoPositionIds(model)
    torch.manual_seed(0)
    sampled = generate_completions(
        wrapped, tok, ids, mask, max_new_tokens=12, min_new_tokens=12, temperature=1.0
    )
    logits = _teacher_forced_logits(model, ids, mask, sampled.completion_ids)  # (6, 12, V)
    rank = (logits > logits.gather(-1, sampled.completion_ids.unsqueeze(-1))).sum(-1)  # (6, 12)
    # At temperature 1 and top-p 1 over 107 tokens, some of 72 tokens fall outside the top 3
    # (top_k 3 and top_p 0.5 from the file would keep every one inside).
    assert int(rank.max()) >= 3
    assert model.generation_config.repetition_penalty == 1.5  # put back after the call
    # Greedy: each token is the argmax of the model's own logits (no repetition penalty).
    greedy = generate_completions(
        wrapped, tok, ids[:2], mask[:2], max_new_tokens=12, min_new_tokens=12, greedy=True
    )
    logits = _teacher_forced_logits(model, ids[:2], mask[:2], greedy.completion_ids)
    assert greedy.completion_ids.tolist() == logits.argmax(-1).tolist()
