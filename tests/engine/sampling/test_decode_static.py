"""The fixed-shape decode step for CUDA (engine/sampling/decode_static.py) and its graph wrapper
(engine/sampling/decode_graph.py), on the CPU: the logits of the model's forward at every step, the same
greedy and seeded sampled tokens as the forward path (Llama and Qwen2, LoRA folded, prompts of
different lengths left-padded, several EOS ids), 4-bit LoRA layers called as modules, the graph
wrapper's fallback when capture is unavailable or disagrees, and bf16 weights restored bit for bit
after `lora_merged`."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from grpo_desktop.engine.models.tiny import tiny_model
from grpo_desktop.engine.sampling import decode_graph, sampler
from grpo_desktop.engine.sampling.decode_static import static_decoder
from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts
from tests.support.decoding import forward_step
from tests.support.paths import BENCH

PROMPTS = [
    "<|user|>What is 17 × 24?<|end|><|assistant|>",
    "<|user|>Hi<|end|><|assistant|>",
    "<|user|>Name a prime above 40.<|end|><|assistant|>",
]


def _lora(model, seed: int = 0):
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    model = get_peft_model(model, lora)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # peft starts B at 0 (adapter = identity): make it matter
                p.normal_(0.0, 0.5)
    return model.eval()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def lora_model(request):
    """A tiny model (grouped heads; Qwen2 with biases) under a LoRA adapter that changes it, with
    a second EOS id in its generation_config: the greedy first token of the first prompt, so
    some rows end at once and others run on."""
    model, tok = tiny_model("tiny", seed=1, arch=request.param)
    model = _lora(model)
    ids, mask = _batch(tok)
    with torch.no_grad():
        first = int(model(input_ids=ids[:1], attention_mask=mask[:1]).logits[0, -1].argmax())
    model.generation_config.eos_token_id = [tok.eos_token_id, first]
    return model, tok


def _batch(tok):
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))  # (3, P) left-padded
    return ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)  # (6, P): groups of 2


@torch.no_grad()
def test_each_step_gives_the_logits_of_the_models_forward(lora_model):
    model, tok = lora_model
    ids, mask = _batch(tok)
    assert mask.sum(1).unique().numel() == 3  # three prompt lengths: real left padding
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    steps = 8
    with sampler.lora_merged(model):
        _, cache = sampler._prefill(model, ids, mask, positions)
        static = static_decoder(model, cache, ids.size(1) + steps, mask, positions)
        assert static is not None
        _, hf_cache = sampler._prefill(model, ids, mask, positions)
        attention, pos = mask, positions[:, -1:] + 1
        generator = torch.Generator().manual_seed(0)
        for _ in range(steps):
            tokens = torch.randint(0, len(tok), (ids.size(0),), generator=generator)  # (6,)
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
            ours = static(tokens)  # (6, V)
            logits, hf_cache = forward_step(model, tokens, attention, pos, hf_cache)  # (N, V)
            assert torch.allclose(ours, logits, atol=1e-5, rtol=1e-5)
            pos = pos + 1
        assert static.room == 0  # every slot used: one more step is refused
        with pytest.raises(RuntimeError, match="all are used"):
            static(tokens)


def _completions(model, tok, ids, mask, monkeypatch, path: str, greedy: bool = True, **args):
    """[sampled with seed 11, greedy too when `greedy`] completion ids decoded through `path`."""
    monkeypatch.setattr(sampler, "STATIC_DECODE", "never" if path == "forward" else "always")
    monkeypatch.setattr(sampler, "LEAN_DECODE", False)
    torch.manual_seed(11)
    out = [generate_completions(model, tok, ids, mask, temperature=1.0, **args).completion_ids]
    assert sampler.last_decode_path() == path
    if greedy:
        out.append(generate_completions(model, tok, ids, mask, greedy=True, **args).completion_ids)
    return out


def test_sampled_and_greedy_tokens_are_those_of_the_forward_path(
    lora_model, monkeypatch, choose_linear
):
    # Token for token only with the same products on both sides (kernels.py would route the
    # forward path's prefill through oneDNN differently): near-uniform samples flip at the last bit.
    choose_linear("0")
    model, tok = lora_model
    ids, mask = _batch(tok)
    monkeypatch.setattr(decode_graph, "GRAPHS", False)
    ours = _completions(model, tok, ids, mask, monkeypatch, "static eager", max_new_tokens=16)
    ref = _completions(model, tok, ids, mask, monkeypatch, "forward", max_new_tokens=16)
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    second_eos = model.generation_config.eos_token_id[1]
    assert ours[1][0, 0] == second_eos and (ours[1][0, 1:] == tok.pad_token_id).all()
    assert (ours[1][:, -1] != tok.pad_token_id).any()  # and other rows ran to the limit


def test_graph_wrapper_falls_back_to_the_eager_step_when_capture_is_unavailable(
    lora_model, monkeypatch, choose_linear, caplog
):
    """The real CudaGraph backend on a CPU-only torch: capture raises, one warning is logged and
    the same static step decodes eagerly, giving the same tokens."""
    choose_linear("0")
    model, tok = lora_model
    ids, mask = _batch(tok)
    monkeypatch.setattr(decode_graph, "GRAPHS", False)
    eager = _completions(
        model, tok, ids, mask, monkeypatch, "static eager", greedy=False, max_new_tokens=12
    )
    monkeypatch.setattr(decode_graph, "GRAPHS", True)
    with caplog.at_level(logging.WARNING, logger=decode_graph.__name__):
        torch.manual_seed(11)
        sampled = generate_completions(model, tok, ids, mask, max_new_tokens=12)
    assert sampler.last_decode_path() == "static eager (fallback)"
    warnings = [r for r in caplog.records if r.name == decode_graph.__name__]
    assert len(warnings) == 1 and "without a CUDA graph" in warnings[0].getMessage()
    assert torch.equal(sampled.completion_ids, eager[0])


def test_a_static_step_that_disagrees_with_the_forward_hands_over_to_it(
    lora_model, monkeypatch, choose_linear, caplog
):
    """The first token's check against the model's forward: a static step that computes
    something else (here its logits halved) or fails is dropped after one warning, and the
    forward decodes from that token on, giving the forward path's tokens."""
    from grpo_desktop.engine.sampling import decode_static

    choose_linear("0")
    model, tok = lora_model
    ids, mask = _batch(tok)
    args = dict(greedy=False, max_new_tokens=10)
    monkeypatch.setattr(decode_graph, "GRAPHS", False)
    forward = _completions(model, tok, ids, mask, monkeypatch, "forward", **args)
    real = decode_static.StaticDecoder.step

    def broken(self):
        raise RuntimeError("no kernel for this op")

    for fault in (lambda self: real(self) * 0.5, broken):
        monkeypatch.setattr(decode_static.StaticDecoder, "step", fault)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=sampler.__name__):
            got = _completions(
                model, tok, ids, mask, monkeypatch, "forward (static step disagreed)", **args
            )
        warnings = [r.getMessage() for r in caplog.records if r.name == sampler.__name__]
        assert len(warnings) == 1 and "decoding with the model's forward" in warnings[0]
        assert torch.equal(got[0], forward[0])


class _SkewedReplay(decode_graph.EagerReplay):
    """A capture whose replay computes something else (other kernels, other numerics)."""

    def replay(self) -> None:
        self.out.copy_(self.fn() * 1.5 + 1.0)


class _StaleReplay(decode_graph.EagerReplay):
    """A capture that baked in the first token: its replay keeps giving the captured logits,
    right on the first token and wrong from the second."""

    def replay(self) -> None:
        pass


def test_replayed_steps_are_used_when_they_agree_and_dropped_when_they_differ(
    lora_model, monkeypatch, choose_linear, caplog
):
    """Through the capture/replay plumbing (static input copied in, static output read, the
    counter advanced outside the step, warm-up and check on the first token): replaying gives the
    eager tokens; a replay that disagrees with the eager step is caught on the first token, one
    that baked in the first token's values on the second, and the rest decodes eagerly, still
    the same tokens."""
    choose_linear("0")
    model, tok = lora_model
    ids, mask = _batch(tok)
    monkeypatch.setattr(decode_graph, "GRAPHS", False)
    args = dict(greedy=False, max_new_tokens=12)
    eager = _completions(model, tok, ids, mask, monkeypatch, "static eager", **args)
    monkeypatch.setattr(decode_graph, "GRAPHS", True)
    monkeypatch.setattr(decode_graph, "BACKEND", decode_graph.EagerReplay)
    replayed = _completions(model, tok, ids, mask, monkeypatch, "static graph", **args)
    assert all(torch.equal(a, b) for a, b in zip(replayed, eager))
    for backend, when in ((_SkewedReplay, "replayed logits"), (_StaleReplay, "second token")):
        monkeypatch.setattr(decode_graph, "BACKEND", backend)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=decode_graph.__name__):
            wrong = _completions(
                model, tok, ids, mask, monkeypatch, "static eager (fallback)", **args
            )
        warnings = [r.getMessage() for r in caplog.records if r.name == decode_graph.__name__]
        assert len(warnings) == 1 and when in warnings[0] and "differ" in warnings[0]
        assert all(torch.equal(a, b) for a, b in zip(wrong, eager))


def test_graph_check_tolerates_bf16_rounding_only():
    eager = torch.randn(4, 50) * 8  # (4, 50) logits of scale ~30
    rounded = eager.to(torch.bfloat16).float()  # one bf16 rounding: within 2^-9 of the scale
    assert decode_graph.agrees(rounded, eager)[0]
    shifted = eager.clone()
    shifted[0, 0] += 0.05 * eager.abs().max()  # 5 % of the scale: a different computation
    assert not decode_graph.agrees(shifted, eager)[0]
    broken = eager.clone()
    broken[1, 3] = float("nan")
    assert not decode_graph.agrees(broken, eager)[0]


def test_lora_merged_folds_bf16_weights_and_restores_them_bit_for_bit():
    model, tok = tiny_model("tiny", seed=2)
    model = _lora(model.to(torch.bfloat16))
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    layers = [m for m in model.modules() if hasattr(m, "lora_A")]
    weights = [m.base_layer.weight for m in layers]
    storage = [w.data_ptr() for w in weights]
    bits = [w.detach().view(torch.int16).clone() for w in weights]  # (out, in) raw bf16 bits
    with torch.no_grad():
        adapted = model(input_ids=ids, attention_mask=mask).logits.float()  # (3, P, V)
        with model.disable_adapter():
            base = model(input_ids=ids, attention_mask=mask).logits.float()  # (3, P, V)
        with sampler.lora_merged(model):  # on the CPU bf16 layers stay unmerged by default
            assert all(not m.disable_adapters for m in layers)
        with sampler.lora_merged(model, half=True):  # as on CUDA
            assert all(m.disable_adapters for m in layers)
            layer, weight = layers[0], weights[0]
            delta = layer.get_delta_weight(layer.active_adapters[0]).float()  # (out, in)
            original = bits[0].view(torch.bfloat16).float()
            assert torch.equal(weight, (original + delta).to(torch.bfloat16))  # one rounding
            merged = model(input_ids=ids, attention_mask=mask).logits.float()
    # bf16 rounding of W + ΔW against bf16 products of the adapter: not equal, but a small
    # fraction of what the adapter changes (measured: about 4 %).
    assert not torch.equal(merged, adapted)
    assert (merged - adapted).norm() <= 0.2 * (base - adapted).norm()
    for weight, ptr, before in zip(weights, storage, bits):
        assert weight.data_ptr() == ptr and torch.equal(weight.detach().view(torch.int16), before)
    assert all(not m.disable_adapters for m in layers)


@torch.no_grad()
def test_4bit_lora_layers_are_called_as_modules_and_match_the_forward(tiny_model_dir):
    import bitsandbytes as bnb

    from grpo_desktop.engine.config import TrainConfig
    from grpo_desktop.engine.models.loading import load_policy

    cfg = TrainConfig().replace(
        model={"name_or_path": tiny_model_dir}, quantization={"mode": "4bit"}
    )
    policy = load_policy(cfg)
    model, tok = policy.model.eval(), policy.tokenizer
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.normal_(0.0, 0.1)
    ids, mask = _batch(tok)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with sampler.lora_merged(model):  # 4-bit bases cannot be folded: adapters stay on
        _, cache = sampler._prefill(model, ids, mask, positions)
        static = static_decoder(model, cache, ids.size(1) + 4, mask, positions)
        _, hf_cache = sampler._prefill(model, ids, mask, positions)
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj.base_layer, bnb.nn.Linear4bit) and not q_proj.disable_adapters
    assert static is not None and static.layers[0].q is q_proj  # the LoRA module itself runs
    attention, pos = mask, positions[:, -1:] + 1
    for token in (5, 17, 30):
        tokens = torch.full((ids.size(0),), token)  # (6,)
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        ours = static(tokens)  # (6, V)
        logits, hf_cache = forward_step(model, tokens, attention, pos, hf_cache)  # (N, V)
        assert torch.allclose(ours, logits, atol=1e-4, rtol=1e-4)
        pos = pos + 1


def test_it_runs_only_models_it_can_run_exactly(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    positions = (mask.cumsum(1) - 1).clamp(min=0)

    def decoder(capacity=64):
        with torch.no_grad():
            _, cache = sampler._prefill(model, ids, mask, positions)
        return static_decoder(model, cache, capacity, mask, positions)

    model.enable_input_require_grads()  # as gradient checkpointing does: no change under no_grad
    assert decoder() is not None
    assert decoder(capacity=ids.size(1)) is None  # no room for a new token
    hook = model.model.layers[1].self_attn.o_proj.register_forward_hook(lambda *a: None)
    assert decoder() is None  # F.linear would skip the hook
    hook.remove()
    model.model.rotary_emb.rope_type = "dynamic"
    assert decoder() is None  # frequencies that follow the length: not a fixed step
    model.model.rotary_emb.rope_type = "default"
    with torch.no_grad():
        _, cache = sampler._prefill(model, ids, mask, positions)
    model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    assert static_decoder(model, cache, 64, mask, positions) is None  # not full attention


def test_decode_benchmark_and_the_op_counts_run_on_the_cpu(monkeypatch):
    """bench/decode_overhead.py: decode_benchmark (bench/gpu.py's CUDA measurement) reports the
    path that really ran and puts the sampler's switches back; the op counts order the paths."""

    bench = BENCH
    monkeypatch.syspath_prepend(bench)
    import decode_overhead

    shape = dict(hidden=32, heads=4, kv_heads=2, intermediate=64, vocab=96, layers=2)
    model = decode_overhead.qwen_like(shape, lora_r=4)
    ids = torch.randint(0, 96, (2, 5))  # (2, 5)
    for static, graphs, path in (
        (True, True, "static eager (fallback)"),
        (False, False, "forward"),
    ):
        out = decode_overhead.decode_benchmark(
            model, ids, 4, graphs=graphs, static=static, repeats=1
        )
        # A difference of two timings: on a busy machine it can come out below 0, so only its
        # presence is checked here (speed belongs to the benchmark, not the tests).
        assert out["path"] == path and math.isfinite(out["ms_per_token"]) and out["tokens"] == 4
    assert sampler.STATIC_DECODE == "cuda" and sampler.LEAN_DECODE and decode_graph.GRAPHS
    rows = {r["path"]: r["ops_per_token"] for r in decode_overhead.measure(model, 2, 6, 2, 96)}
    assert rows["graph"] <= 3 < rows["static"] < rows["forward"]
