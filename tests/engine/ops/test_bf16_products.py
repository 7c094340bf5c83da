"""bfloat16 on the CPU for full fine-tuning (engine/ops/bf16_products.py): the linear layers'
products in bfloat16 with float32 weights and outputs, attention and the rest in float32; the
gradients close to float32's; the sampler's lean decode still used (autocast had sent it to the
model's slow forward); oneDNN's float32 routing steps aside inside the block."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.models.loading import load_policy
from grpo_desktop.engine.ops import bf16_products as bp
from grpo_desktop.engine.sampling import sampler


def test_products_are_bfloat16_values_in_float32_and_grads_flow():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 48, generator=g, requires_grad=True)  # (M, K)
    w = torch.randn(24, 48, generator=g, requires_grad=True)  # (N, K)
    b = torch.randn(24, generator=g, requires_grad=True)
    exact = F.linear(x, w, b)
    with bp.bf16_products():
        assert bp.active()
        out = F.linear(x, w, b)
    assert not bp.active()
    assert out.dtype == torch.float32
    expected = F.linear(x.bfloat16(), w.bfloat16()).float() + b
    assert torch.equal(out, expected)
    assert not torch.equal(out, exact) and torch.allclose(out, exact, rtol=0.05, atol=0.1)
    out.sum().backward()
    assert x.grad.dtype == w.grad.dtype == b.grad.dtype == torch.float32
    assert torch.equal(b.grad, torch.full_like(b, 37.0))
    x16 = x.detach().bfloat16().float()
    assert torch.allclose(w.grad, torch.ones(37, 24).t() @ x16, rtol=0.02, atol=0.05)


def test_other_tensors_and_operations_are_left_alone():
    g = torch.Generator().manual_seed(1)
    a, c = torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g)
    with bp.bf16_products():
        assert torch.equal(a @ c, torch.mm(a, c))  # matmul is not routed
        half = F.linear(a.double(), c.t().double())  # not float32
    assert half.dtype == torch.float64


def _cfg(folder: str, dtype: str) -> TrainConfig:
    return TrainConfig().replace(
        model={"name_or_path": folder, "dtype": dtype, "device": "cpu"},
        lora={"enabled": False},
        algorithm={"beta": 0.0},
    )


def test_bfloat16_full_finetuning_on_the_cpu_keeps_float32_and_the_lean_decode(tiny_model_dir):
    policy = load_policy(_cfg(tiny_model_dir, "bfloat16"))
    model = policy.model
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # master weights
    assert model.autocast_forward[0] == "bf16-products"
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        exact = load_policy(_cfg(tiny_model_dir, "float32")).model(input_ids=ids).logits
    assert logits.dtype == torch.float32
    assert torch.equal(logits.bfloat16().float(), logits)  # bfloat16 products' values
    assert torch.allclose(logits, exact, atol=0.05) and not torch.equal(logits, exact)
    mask = torch.ones_like(ids)
    out = sampler.sample_tokens(model, ids, mask, max_new_tokens=6, eos_id=[10**6], pad_id=0)
    assert out.shape == (2, 6) and sampler.last_decode_path() == "lean"


def test_onednn_float32_routing_steps_aside_inside_the_block(choose_linear):
    from grpo_desktop.engine.ops import kernels

    if kernels._op() is None:
        import pytest

        pytest.skip("this torch has no oneDNN linear")
    choose_linear("1")  # oneDNN's float32 product for every large F.linear
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(300, 64, generator=g), torch.randn(32, 64, generator=g)
    with kernels.fast_linear("cpu"), bp.bf16_products():
        inside = F.linear(x, w)
    with bp.bf16_products(), kernels.fast_linear("cpu"):  # either order
        nested = F.linear(x, w)
    expected = F.linear(x.bfloat16(), w.bfloat16()).float()
    assert torch.equal(inside, expected) and torch.equal(nested, expected)


def test_gradient_checkpointing_recomputes_with_the_same_bfloat16_products(tiny_model_dir):
    """torch's checkpoint requires the recomputation to save what the forward saved: without
    the products' mode again in the backward, a bfloat16 CPU run with gradient checkpointing
    failed with a CheckpointError (the forward saved bfloat16 copies, the recomputation float32
    weights). With it, the gradients are those of the run without checkpointing."""
    from grpo_desktop.engine.sampling.logps import token_logps

    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(3, 60, (4, 6), generator=g)
    prompt_mask = torch.ones_like(prompt)
    completion = torch.randint(3, 60, (4, 7), generator=g)
    completion_mask = torch.ones(4, 7)
    grads = []
    for checkpointing in (False, True):
        cfg = _cfg(tiny_model_dir, "bfloat16").replace(
            model={"gradient_checkpointing": checkpointing}
        )
        model = load_policy(cfg).model.train()
        logps, _ = token_logps(model, prompt, prompt_mask, completion, completion_mask, 1.0)
        (logps * completion_mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 3
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-5)
