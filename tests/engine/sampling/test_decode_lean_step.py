"""The lean decoder's per-token path (engine/sampling/decode.py `start` + `step`, issue 28): the
mask and rotary angles worked out once, q/k/v and gate/up joined into one product each. It gives
the forward's logits with left padding and shared prompts, the very bits of the per-call path
(so the same tokens for the same seed), on the demo model the sampler's own tokens as before,
and it calls torch less than half as often per token as the modules' own code did."""

from __future__ import annotations

from importlib import resources

import pytest
import torch
from torch.overrides import TorchFunctionMode

from grpo_desktop.engine.models.tiny import build_tiny_model
from grpo_desktop.engine.ops import kernels, native
from grpo_desktop.engine.sampling import decode, sampler
from grpo_desktop.engine.sampling.rollout import tokenize_prompts
from tests.support.decoding import forward_step

PROMPTS = ["<|user|>What is 17 × 24?<|end|><|assistant|>", "<|user|>Hi<|end|><|assistant|>"]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model_and_tokenizer(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_model(str(tmp_path_factory.mktemp(request.param)), "tiny", 5, request.param)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return model, AutoTokenizer.from_pretrained(folder)


@pytest.fixture(params=["f.linear", "onednn"])
def linear_kernel(request, choose_linear):
    if request.param == "onednn" and kernels._op() is None:
        pytest.skip("this torch has no oneDNN linear")
    choose_linear("1" if request.param == "onednn" else "0")
    return request.param


def _prefilled(model, tok, capacity_extra: int = 12):
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))  # left-padded
    ids, mask = ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)  # (6, P) shared prompts
    assert bool((mask == 0).any())  # padding is covered
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    logits, cache = sampler._prefill(model, ids, mask, positions)
    lean = decode.lean_decoder(model, cache, ids.size(1) + capacity_extra)
    assert lean is not None
    return ids, mask, positions, lean


@torch.no_grad()
@pytest.mark.parametrize("join", [True, False])
def test_steps_give_the_forwards_logits_and_the_per_call_paths_bits(
    model_and_tokenizer, linear_kernel, join, monkeypatch
):
    """Joined products (a small model) and separate ones (weights over decode.JOIN_LIMIT)."""
    monkeypatch.setattr(decode, "JOIN_LIMIT", decode.JOIN_LIMIT if join else 0)
    model, tok = model_and_tokenizer
    ids, mask, positions, lean = _prefilled(model, tok)
    _, _, _, per_call = _prefilled(model, tok)
    assert len(lean.steps[0].qkv.parts) == (1 if join else 3)
    _, hf_cache = sampler._prefill(model, ids, mask, positions)
    lean.start(mask, positions[:, -1:] + 1)
    attention, pos = mask, positions[:, -1:] + 1
    generator = torch.Generator().manual_seed(0)
    for _ in range(12):
        tokens = torch.randint(0, model.config.vocab_size, (ids.size(0),), generator=generator)
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        ours = lean.step(tokens)  # (N, V)
        assert torch.equal(ours, per_call(tokens, attention, pos))  # same bits, same tokens
        logits, hf_cache = forward_step(model, tokens, attention, pos, hf_cache)  # (N, V)
        assert torch.allclose(ours, logits, atol=1e-5, rtol=1e-5)
        pos = pos + 1


class _Calls(TorchFunctionMode):
    """Counts the torch functions and tensor methods called from Python inside its block."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _demo_model():
    from transformers import AutoModelForCausalLM

    folder = resources.files("grpo_desktop") / "resources" / "demo_model"
    return AutoModelForCausalLM.from_pretrained(str(folder)).eval()


@torch.no_grad()
@pytest.mark.parametrize("path", ["python", "script", "whole"])
def test_a_demo_step_calls_torch_at_most_36_times_per_layer(monkeypatch, path, choose_linear):
    """The overhead the issue measured is per call: the modules' own code made ~74 calls per
    layer and token (305 for the demo's 4 layers); the lean step makes about 33 (141) from
    Python, with its layers in TorchScript (decode_script.py) a handful per token, and with the
    whole step in one call of the fused kernels (native_decode.cpp's decode_step) as many."""
    if path == "whole":
        if native.decode_ops() is None or not native.has_step(native.decode_ops()):
            pytest.skip(f"no fused decode step here: {native.describe()}")
    else:
        choose_linear("0")  # F.linear products (a timing may pick oneDNN's, which is not scripted)
        monkeypatch.setattr(decode, "WHOLE_STEP", False)
    monkeypatch.setattr(decode, "SCRIPTED", path != "python")
    model = _demo_model()
    layers = model.config.num_hidden_layers
    ids = torch.randint(3, 100, (32, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # one padded row: the masked path, the costlier one
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    logits, cache = sampler._prefill(model, ids, mask, positions)
    lean = decode.lean_decoder(model, cache, 50)
    lean.start(mask, positions[:, -1:] + 1)
    calls = _Calls()
    with calls:
        lean.step(logits.argmax(-1))
    assert (lean.script is not None) == (path != "python")
    assert lean.whole == (path == "whole")
    assert calls.count <= (36 * layers + 12 if path == "python" else 9), calls.count


@torch.no_grad()
def test_demo_greedy_and_sampled_tokens_are_the_forwards(monkeypatch, choose_linear):
    """On the shipped demo model, 32 rows as a demo step holds them (groups of 8): the sampler's
    lean path draws the same tokens as the model's own forward, greedy and at temperature 1."""
    choose_linear("0")
    model = _demo_model()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (4, 30), generator=g).repeat_interleave(8, 0)  # (32, 30)
    mask = torch.ones_like(ids)
    mask[8:16, :4] = 0  # one group's prompt is shorter
    runs = {}
    for lean in (True, False):
        monkeypatch.setattr(sampler, "LEAN_DECODE", lean)
        args = dict(max_new_tokens=40, eos_id=[model.config.eos_token_id], pad_id=0)
        greedy = sampler.sample_tokens(model, ids, mask, greedy=True, **args)
        torch.manual_seed(3)
        sampled = sampler.sample_tokens(model, ids, mask, temperature=1.0, **args)
        runs[lean] = (greedy, sampled, sampler.last_decode_path())
    assert runs[True][2] == "lean" and runs[False][2] == "forward"
    assert torch.equal(runs[True][0], runs[False][0])
    assert torch.equal(runs[True][1], runs[False][1])
