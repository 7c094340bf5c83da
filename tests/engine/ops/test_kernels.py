"""Float32 linears in oneDNN (engine/ops/kernels.py): the same values and gradients as F.linear, used
only inside `fast_linear()` for float32 CPU tensors, only when the op checks out, and off with
GRPO_DESKTOP_ONEDNN=0. A tiny model's log-probs and gradients, full and LoRA, are unchanged."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grpo_desktop.engine.ops import kernels
from grpo_desktop.engine.sampling.rollout import token_logps

pytestmark = pytest.mark.skipif(kernels._op() is None, reason="this torch has no oneDNN linear")


@pytest.fixture
def decided(choose_linear):
    """kernels decides afresh, by its timing (tests set GRPO_DESKTOP_ONEDNN to change that)."""
    choose_linear("")
    return choose_linear


@pytest.fixture
def forced_on(decided):
    """oneDNN used whatever the timing on this machine says (the op is still checked)."""
    decided("1")
    assert kernels.enabled()


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and bool(((a - b).abs().max() <= tol * (1 + b.abs().max())).item())


@pytest.mark.parametrize("shape", [(7, 48), (3, 5, 48), (2, 3, 4, 48), (48,)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_values_and_all_three_gradients_equal_f_linear(forced_on, shape, with_bias):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=g, requires_grad=True)
    w = torch.randn(29, 48, generator=g, requires_grad=True)
    b = torch.randn(29, generator=g, requires_grad=True) if with_bias else None
    leaves = [t for t in (x, w, b) if t is not None]
    up = torch.randn(*shape[:-1], 29, generator=g)  # upstream gradient
    expected = F.linear(x, w, b)
    want = torch.autograd.grad((expected * up).sum(), leaves)
    ours = kernels.onednn_linear(x, w, b)
    got = torch.autograd.grad((ours * up).sum(), leaves)
    assert ours.grad_fn is not None and "OneDnnLinear" in type(ours.grad_fn).__name__
    assert _close(ours, expected)
    for a, e in zip(got, want, strict=True):
        assert _close(a, e)


def test_strided_input_and_frozen_weight(forced_on):
    g = torch.Generator().manual_seed(3)
    base = torch.randn(6, 48, 5, generator=g, requires_grad=True)
    x = base.transpose(1, 2)  # (6, 5, 48), not contiguous
    w = torch.randn(17, 48, generator=g)  # frozen, as a LoRA base weight
    up = torch.randn(6, 5, 17, generator=g)
    (want,) = torch.autograd.grad((F.linear(x, w) * up).sum(), [base])
    out = kernels.onednn_linear(x, w)
    (got,) = torch.autograd.grad((out * up).sum(), [base])
    assert _close(got, want)
    assert w.grad is None


def test_fast_linear_routes_float32_cpu_linears_and_passes_the_rest(forced_on):
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(2, kernels.MIN_ROWS // 2, 16, requires_grad=True)
    with kernels.fast_linear():
        routed = layer(x)
        few_rows = layer(x[:, :2])  # too few rows: the per-call cost decides, F.linear
        double = layer.double()(x.double())
        half = layer.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert "OneDnnLinear" in type(routed.grad_fn).__name__
    for other in (few_rows, double, half, layer.float()(x)):  # the last one outside the block
        assert "OneDnnLinear" not in type(other.grad_fn).__name__


def test_switched_off_by_the_environment(decided):
    decided("0")
    assert not kernels.enabled()
    assert kernels.product_for(32, torch.randn(8, 16)) is F.linear
    with kernels.fast_linear():
        out = torch.nn.Linear(16, 8)(torch.randn(4, 16, requires_grad=True))
    assert "OneDnnLinear" not in type(out.grad_fn).__name__


def test_an_op_that_computes_something_else_is_never_used(decided, monkeypatch):
    real = kernels._op()

    def off_by_a_bit(x, w, b, *rest):
        return real(x, w, b, *rest) * 1.001

    monkeypatch.setattr(kernels, "_op", lambda: off_by_a_bit)
    decided("1")
    assert not kernels.enabled()
    monkeypatch.setattr(kernels, "_op", lambda: None)  # no oneDNN in this torch
    decided("1")
    assert not kernels.enabled()


def test_decided_by_timing_once(decided, monkeypatch):
    calls = []
    monkeypatch.setattr(kernels, "_faster", lambda op: calls.append(op) or False)
    assert not kernels.enabled() and not kernels.enabled()
    assert len(calls) == 1  # MKL won the timing: stays off, and is not timed again


def _grads(model, with_onednn: bool, choose):
    choose("1" if with_onednn else "0")
    assert kernels.enabled() == with_onednn
    calls = []
    if with_onednn:
        op = kernels._state["op"]
        kernels._state["op"] = lambda *args: calls.append(1) or op(*args)
    model.zero_grad()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 60, (2, 9), generator=g).repeat_interleave(4, 0)  # (8, 9) shared
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[4:, :2] = 0  # the second prompt left-padded
    completion = torch.randint(3, 60, (8, 10), generator=g)  # 80 rows: enough for oneDNN
    completion_mask = torch.ones_like(completion)
    logps, _ = token_logps(model, prompt, prompt_mask, completion, completion_mask)  # (8, 10)
    logps.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert bool(calls) == with_onednn  # forward and backward products went through oneDNN
    return logps.detach(), grads


@pytest.mark.parametrize("lora", [False, True])
def test_a_models_logps_and_gradients_are_unchanged(decided, tiny_model_dir, lora):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
        for name, p in model.named_parameters():  # B = 0 at init would hide A's gradient
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
    logps, grads = _grads(model, False, decided)
    logps_dnn, grads_dnn = _grads(model, True, decided)
    assert _close(logps_dnn, logps)
    assert grads.keys() == grads_dnn.keys() and grads
    assert all("lora_" in n for n in grads) if lora else len(grads) > 10
    for name in grads:
        assert _close(grads_dnn[name], grads[name], 1e-4), name


def test_decode_products_take_the_faster_kernel_per_shape(decided, monkeypatch):
    timed = []

    def times(op, x, weight, bias=None):
        timed.append(tuple(x.shape) + tuple(weight.shape))
        return (1.0, 2.0) if weight.size(0) == 8 else (2.0, 1.0)  # (MKL, oneDNN) seconds

    monkeypatch.setattr(kernels, "_times", times)
    monkeypatch.setattr(kernels, "_faster", lambda op: True)
    small, large = torch.randn(8, 16), torch.randn(64, 16)
    assert kernels.product_for(32, small) is F.linear  # MKL faster for this shape
    assert kernels.product_for(32, large) is kernels._product
    assert kernels.product_for(32, large.clone()) is kernels._product
    assert timed == [(32, 16, 8, 16), (32, 16, 64, 16)]  # once per shape
    assert kernels.product_for(32, small.double()) is F.linear  # not float32: never timed
    x = torch.randn(32, 1, 16)  # (N, 1, K), as a decode step
    assert torch.allclose(kernels._product(x, large, None), F.linear(x, large), atol=1e-5)


def test_a_decode_product_needs_the_same_margin_as_training_products(decided, monkeypatch):
    """oneDNN a few percent faster on one shape is not worth leaving F.linear: a decode whose
    products are all F.linear runs its layers in TorchScript, which pays more."""
    speedups = {8: 0.95 * kernels.MIN_SPEEDUP, 16: 1.05 * kernels.MIN_SPEEDUP}  # per width

    def times(op, x, weight, bias=None):
        return speedups[weight.size(0)], 1.0  # (MKL, oneDNN) seconds

    monkeypatch.setattr(kernels, "_times", times)
    monkeypatch.setattr(kernels, "_faster", lambda op: True)
    assert kernels.product_for(32, torch.randn(8, 16)) is F.linear
    assert kernels.product_for(32, torch.randn(16, 16)) is kernels._product


def test_times_are_medians_so_one_lucky_run_does_not_decide(monkeypatch):
    """A best-of-five timing let one lucky run pick oneDNN; the median of the runs does not move
    for one outlier. Here the 'oneDNN' op is F.linear itself plus one very fast run."""
    calls = []

    def op(x, weight, bias, *rest):
        calls.append(1)
        return F.linear(x, weight, bias)

    clock = iter(range(1000))
    fake = {"now": 0.0}

    def perf_counter():  # each timed run takes 1 s, but oneDNN's third takes 0.01 s
        tick = next(clock)
        if tick % 2 == 0:
            return fake["now"]
        run = tick // 2  # 0: MKL warm-up, 1: oneDNN warm-up, 2: MKL, 3: oneDNN, ...
        fake["now"] += 0.01 if run == 7 else 1.0
        return fake["now"]

    monkeypatch.setattr(kernels.time, "perf_counter", perf_counter)
    mkl, onednn = kernels._times(op, torch.randn(4, 8), torch.randn(3, 8), rounds=5)
    assert (mkl, onednn) == (pytest.approx(1.0), pytest.approx(1.0))
    assert len(calls) == 6  # a warm-up and five timed runs


def test_timing_a_decode_product_leaves_the_global_random_stream_alone(decided, monkeypatch):
    """The first decode of a process times each product on random rows; drawn from the global
    generator, they shifted the seeded sampling stream, so a seeded Try or a seeded step sampled
    other tokens the first time than every time after (seen on a CPU where oneDNN is faster)."""
    monkeypatch.setattr(kernels, "_faster", lambda op: True)  # enabled, the per-shape timing runs
    weight = torch.randn(24, 16)  # (N, K)
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    kernels.product_for(32, weight)  # a new shape: timed now
    assert kernels._choices  # it was timed, not skipped
    assert torch.equal(torch.rand(4), expected)


def test_describe_says_which_library_and_why(decided, monkeypatch):
    decided("0")
    assert kernels.describe() == "MKL (oneDNN switched off by GRPO_DESKTOP_ONEDNN=0)"
    assert kernels.library() == "MKL"
    decided("1")
    assert kernels.describe() == "oneDNN (GRPO_DESKTOP_ONEDNN=1)"
    assert kernels.library() == "oneDNN"
    decided("")
    monkeypatch.setattr(kernels, "_faster", lambda op: False)
    assert kernels.describe() == "MKL (oneDNN not faster on this CPU)"
    decided("")
    monkeypatch.setattr(kernels, "_faster", lambda op: True)
    assert kernels.describe() == "oneDNN (faster than MKL here)"
    decided("")
    monkeypatch.setattr(kernels, "_op", lambda: None)
    assert kernels.describe() == "MKL (this torch has no oneDNN linear)"
