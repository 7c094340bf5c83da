"""Sampling in bfloat16 (model.sampling_precision, engine/sampling/precision.py): when it applies,
what the run log says, the lean decoder's rounded products, the memory estimate's copy."""

from __future__ import annotations

import os

import pytest
import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.sampling import decode, precision, sampler
from tests.support.toy import toy_config

CPU = torch.device("cpu")


def test_bf16_sampling_applies_only_where_it_pays_and_the_log_says_why(monkeypatch):
    assert precision.decode_dtype("same", CPU, torch.float32) is None
    assert precision.describe("same", CPU, torch.float32) is None  # not asked: nothing logged

    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    assert precision.decode_dtype("bfloat16", CPU, torch.float32) is torch.bfloat16
    assert "rounded to bfloat16" in precision.describe("bfloat16", CPU, torch.float32)
    big = 540 * 2**20  # SmolLM2-135M's float32 weights
    assert precision.decode_dtype("bfloat16", CPU, torch.float32, big) is torch.bfloat16
    small = 6 * 2**20  # the demo's: its decode is its small operations, rounding slows it
    assert precision.decode_dtype("bfloat16", CPU, torch.float32, small) is None
    line = precision.describe("bfloat16", CPU, torch.float32, small)
    assert "has no effect here" in line and "the model is small (6 MB of weights)" in line

    cases = [
        (torch.device("cuda"), torch.float32, "CPU sampling only"),
        (CPU, torch.bfloat16, "already bfloat16"),
    ]
    for device, dtype, why in cases:
        assert precision.decode_dtype("bfloat16", device, dtype) is None
        line = precision.describe("bfloat16", device, dtype)
        assert line.startswith("Sampling precision bfloat16 has no effect here") and why in line

    monkeypatch.setattr(precision, "native_bf16", lambda: False)  # e.g. a Zen 3 or Skylake
    assert precision.decode_dtype("bfloat16", CPU, torch.float32) is None
    assert "no bfloat16 instructions" in precision.describe("bfloat16", CPU, torch.float32)


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads Linux's CPU flags")
def test_native_bf16_agrees_with_the_cpus_own_flags():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags |= set(line.split(":", 1)[1].split())
    assert precision.native_bf16() == bool(flags & {"avx512_bf16", "amx_tile", "amx_bf16"})


def _prefilled(model_dir: str, rows: int = 8):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows // 4, 12), generator=g).repeat_interleave(4, 0)  # (N, P)
    mask = torch.ones_like(ids)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits, cache = sampler._prefill(model, ids, mask, positions)
    return model, ids, mask, positions, logits, cache


def test_the_rounded_decode_multiplies_bf16_copies_in_one_buffer_and_stays_close(tiny_model_dir):
    model, ids, mask, positions, logits, cache = _prefilled(tiny_model_dir)
    capacity = ids.size(1) + 8
    with torch.no_grad():
        exact = decode.lean_decoder(model, cache, capacity)
        rounded = decode.lean_decoder(model, cache, capacity, torch.bfloat16)
        assert exact is not None and rounded is not None
        assert not exact.rounded and rounded.rounded
        products = [rounded.head] + [
            p for s in rounded.steps for p in (s.qkv, s.o, s.gate_up, s.down)
        ]
        weights = [w for p in products for w, _ in p.parts]
        assert all(w.dtype == torch.bfloat16 for w in weights)
        # Each product one joined weight, all of them views of one allocation.
        assert all(len(p.parts) == 1 for p in products)
        storages = {w.untyped_storage().data_ptr() for w in weights}
        assert len(storages) == 1
        # The model's own weights are untouched (float32, the training's).
        assert all(p.dtype == torch.float32 for p in model.parameters())
        for d in (exact, rounded):
            d.start(mask, positions[:, -1:] + 1)
        tokens = logits.argmax(-1)  # (N,)
        for _ in range(6):
            a, b = exact.step(tokens), rounded.step(tokens)  # (N, V) each
            scale = a.abs().max()
            assert b.dtype == torch.float32
            assert not torch.equal(a, b)  # rounded products: other numbers...
            assert (a - b).abs().max() < 0.05 * scale  # ...within bfloat16's rounding
            tokens = a.argmax(-1)


def test_sample_tokens_with_bf16_keeps_the_exact_first_token_and_names_its_path(tiny_model_dir):
    model, ids, mask, _, _, _ = _prefilled(tiny_model_dir)
    eos = model.config.vocab_size + 1  # never drawn: every row runs to the limit
    runs = {}
    with torch.no_grad():
        for dtype in (None, torch.bfloat16):
            torch.manual_seed(3)
            runs[dtype] = sampler.sample_tokens(
                model, ids, mask, max_new_tokens=6, eos_id=eos, pad_id=0, decode_dtype=dtype
            )  # (N, 6)
            path = sampler.last_decode_path()
            assert path == ("lean" if dtype is None else "lean (bfloat16)")
    # The prefill is exact, so the first tokens (the same random numbers) are the same.
    assert torch.equal(runs[None][:, 0], runs[torch.bfloat16][:, 0])
    assert runs[torch.bfloat16].shape == runs[None].shape


def test_a_run_with_bf16_sampling_says_what_it_did_and_finishes(tiny_model_dir, monkeypatch):
    cfg = toy_config(tiny_model_dir).replace(model={"sampling_precision": "bfloat16"})
    assert not cfg.validate()
    seen = []  # what each step's decode was asked to round to
    real = sampler.sample_tokens

    def spy(*args, **kwargs):
        seen.append(kwargs.get("decode_dtype"))
        return real(*args, **kwargs)

    monkeypatch.setattr("grpo_desktop.engine.sampling.rollout.sample_tokens", spy)
    for threshold in (precision.MIN_WEIGHT_BYTES, 0):  # the tiny model as it is, then "large"
        monkeypatch.setattr(precision, "MIN_WEIGHT_BYTES", threshold)
        seen.clear()
        events = list(train(cfg, TrainControl()))
        assert events[-1].status == "completed", events[-1].message
        logs = [e.message for e in events if e.type == "log"]
        lines = [m for m in logs if "Sampling precision" in m]
        assert len(lines) == 1
        applies = threshold == 0 and precision.native_bf16()
        if threshold:
            assert "the model is small" in lines[0]
        elif applies:
            assert "rounded to bfloat16" in lines[0]
        else:
            assert "no bfloat16 instructions" in lines[0]
        # The steps' decodes round exactly when the log says so; evaluation never does.
        steps = sum(e.type == "step" for e in events)
        rounded = [d for d in seen if d is not None]
        assert len(rounded) == (steps if applies else 0)
        assert all(d is torch.bfloat16 for d in rounded)
        assert len(seen) > steps  # the held-out evaluations decoded too, exact


def test_the_estimate_counts_the_bf16_copy_of_the_weights():
    from grpo_desktop.engine.estimate import formulas
    from grpo_desktop.engine.estimate.memory import ModelShape

    cfg = TrainConfig()
    on = cfg.replace(model={"sampling_precision": "bfloat16"})
    plain = formulas.Settings.from_config(cfg, "float32", 64)
    rounded = formulas.Settings.from_config(on, "float32", 64)
    assert not plain.sampling_bf16 and rounded.sampling_bf16
    shape = ModelShape(hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3, vocab=49_152)
    p = formulas.Params(
        total=135_000_000, embedding=28_311_552, output=0, linear=106_000_000, lora=0
    )
    extra = formulas.sampling_other_bytes(shape, p, rounded, "cpu")
    extra -= formulas.sampling_other_bytes(shape, p, plain, "cpu")
    assert extra == (106_000_000 + 28_311_552) * 2  # every product's weight, 2 bytes each
    on_gpu = formulas.sampling_other_bytes(shape, p, rounded, "cuda")
    assert on_gpu == formulas.sampling_other_bytes(shape, p, plain, "cuda")
