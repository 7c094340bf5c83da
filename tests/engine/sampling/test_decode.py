"""The lean decode step (engine/sampling/decode.py): the same logits as the model's own forward for Llama
and Qwen2 (biases, grouped heads, left padding, shared prompts), the same sampled tokens, and
only for models it can run exactly."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.models.tiny import build_tiny_model
from grpo_desktop.engine.ops import kernels, native
from grpo_desktop.engine.sampling import decode, sampler
from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts
from tests.support.decoding import forward_step

PROMPTS = ["<|user|>What is 17 × 24?<|end|><|assistant|>", "<|user|>Hi<|end|><|assistant|>"]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model_and_tokenizer(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_model(str(tmp_path_factory.mktemp(request.param)), "tiny", 3, request.param)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return model, AutoTokenizer.from_pretrained(folder)


@pytest.fixture(params=["f.linear", "onednn", "native"])
def linear_kernel(request, choose_linear, monkeypatch):
    """The products the decoder may run on: torch's own and oneDNN's (engine/ops/kernels.py)
    with torch's attention, or the fused kernels' `linear` (ops/native.py) with theirs."""
    if request.param == "onednn" and kernels._op() is None:
        pytest.skip("this torch has no oneDNN linear")
    if request.param == "native" and native.decode_ops() is None:
        pytest.skip(f"fused kernels not built here: {native.describe()}")
    monkeypatch.setattr(decode, "NATIVE", request.param == "native")
    choose_linear("1" if request.param == "onednn" else "0")
    return request.param


def _batch(tok, repeat: int = 3):
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))  # left-padded
    return ids.repeat_interleave(repeat, 0), mask.repeat_interleave(repeat, 0)  # (6, P)


@torch.no_grad()
def test_each_step_gives_the_logits_of_the_models_forward(model_and_tokenizer, linear_kernel):
    model, tok = model_and_tokenizer
    ids, mask = _batch(tok)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    if model.config.model_type == "qwen2":
        assert model.model.layers[0].self_attn.q_proj.bias is not None  # biases are covered
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # grouped heads
    logits, cache = sampler._prefill(model, ids, mask, positions)
    lean = decode.lean_decoder(model, cache, ids.size(1) + 8)
    assert lean is not None
    expected = {
        "f.linear": torch.nn.functional.linear,
        "onednn": kernels._product,
        "native": native.decode_ops() and native.decode_ops().linear,
    }[linear_kernel]
    assert set(lean.products.values()) == {expected}
    _, hf_cache = sampler._prefill(model, ids, mask, positions)
    attention, pos = mask, positions[:, -1:] + 1
    generator = torch.Generator().manual_seed(0)
    for _ in range(8):
        tokens = torch.randint(0, model.config.vocab_size, (ids.size(0),), generator=generator)
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        ours = lean(tokens, attention, pos)  # (N, V)
        logits, hf_cache = forward_step(model, tokens, attention, pos, hf_cache)  # (N, V)
        assert torch.allclose(ours, logits, atol=1e-5, rtol=1e-5)
        pos = pos + 1


def test_sampled_and_greedy_tokens_are_those_of_the_models_forward(
    model_and_tokenizer, monkeypatch, choose_linear
):
    # Token for token only with the same products on both sides (the logits test above covers
    # oneDNN's): a tiny random model's near-uniform samples flip at the last bit of rounding.
    choose_linear("0")
    model, tok = model_and_tokenizer
    ids, mask = _batch(tok)
    args = dict(max_new_tokens=16, min_new_tokens=16)
    runs = {}
    for lean in (True, False):
        monkeypatch.setattr(sampler, "LEAN_DECODE", lean)
        torch.manual_seed(11)
        sampled = generate_completions(model, tok, ids, mask, temperature=1.0, **args)
        greedy = generate_completions(model, tok, ids, mask, greedy=True, **args)
        runs[lean] = (sampled.completion_ids, greedy.completion_ids)
    assert torch.equal(runs[True][0], runs[False][0])
    assert torch.equal(runs[True][1], runs[False][1])
    ref = model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=16,
        min_new_tokens=16, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
    )[:, ids.size(1):]  # fmt: skip
    assert torch.equal(runs[True][1], ref)


def test_it_runs_only_models_it_can_run_exactly(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    positions = (mask.cumsum(1) - 1).clamp(min=0)

    def decoder(m, capacity=64):
        with torch.no_grad():
            _, cache = sampler._prefill(m, ids, mask, positions)
        return decode.lean_decoder(m, cache, capacity)

    assert decoder(model) is not None
    assert decoder(model, capacity=ids.size(1)) is None  # no room for a new token
    hook = model.model.layers[0].mlp.register_forward_hook(lambda *a: None)
    assert decoder(model) is None  # a hook would be skipped
    hook.remove()
    lora = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0))
    assert decoder(lora) is None  # an active adapter: three matmuls the decoder does not run
    with sampler.lora_merged(lora):
        assert decoder(lora) is not None  # folded into the weights: plain layers again
    with torch.no_grad():
        _, cache = sampler._prefill(model, ids, mask, positions)
    model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    assert decode.lean_decoder(model, cache, 64) is None  # sliding windows: not this decoder
