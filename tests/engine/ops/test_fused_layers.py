"""engine/ops/fused_layers.py and native_layers.cpp: the passes' RMSNorm, rotary embedding and
SwiGLU gate in the fused kernels. Each kernel and its backward against torch's operations in
float64 over the shapes and layouts the passes make (transposed projections, angles shared by
the batch, widths with a tail); the rotary forward is torch's float32 bits; tiny Llama and Qwen2
models' logits and every gradient through transformers with them against without them; and the
calls they must leave to transformers' own code, which then give the same bits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grpo_desktop.engine.ops import fused_layers, native

pytestmark = pytest.mark.skipif(native.decode_ops() is None, reason=native.describe())


@pytest.fixture
def ops():
    return native.decode_ops()


@pytest.fixture
def restored():
    """transformers' own functions during the test, and the process's state afterwards."""
    was_on = fused_layers.is_on()
    fused_layers.restore()
    yield
    fused_layers.restore()
    if was_on:
        fused_layers.use_on_cpu()


def _norm64(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x):
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@pytest.mark.parametrize("M,E", [(1, 16), (7, 40), (33, 256), (130, 576)])
def test_norm_and_its_backward_equal_torchs(ops, M, E):
    g = torch.Generator().manual_seed(M)
    x = torch.randn(M, E, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(E, generator=g, dtype=torch.float64)
    dy = torch.randn(M, E, generator=g, dtype=torch.float64)
    want = _norm64(x, w, 1e-5)
    want.backward(dy)
    y, rstd = ops.norm_forward(x.detach().float(), w.float(), 1e-5)
    torch.testing.assert_close(y.double(), want.detach(), rtol=1e-5, atol=2e-6)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(x.detach().pow(2).mean(-1) + 1e-5))
    dx = ops.norm_backward(dy.float(), x.detach().float(), w.float(), rstd)
    torch.testing.assert_close(dx.double(), x.grad, rtol=1e-5, atol=5e-6)


@pytest.mark.parametrize("D", [16, 32, 64, 128])
@pytest.mark.parametrize("layout", ["transposed", "contiguous"])
@pytest.mark.parametrize("shared_angles", [False, True])
def test_rotary_is_torchs_bits_forward_and_its_gradient_backward(ops, D, layout, shared_angles):
    g = torch.Generator().manual_seed(D)
    B, H, L = 3, 4, 9
    if layout == "transposed":  # a projection (B, L, H·D) viewed as (B, H, L, D), as transformers
        x = torch.randn(B, L, H, D, generator=g).transpose(1, 2)
    else:
        x = torch.randn(B, H, L, D, generator=g)
    cos, sin = (torch.randn(1 if shared_angles else B, L, D, generator=g) for _ in range(2))
    out = ops.rope_forward(x, cos, sin)
    assert torch.equal(out, x * cos[:, None] + _rotate_half(x) * sin[:, None])
    assert out.stride() == x.stride()  # the input's layout kept
    x64 = x.double().requires_grad_()
    rotated = x64 * cos[:, None].double() + _rotate_half(x64) * sin[:, None].double()
    dy = torch.randn(rotated.shape, generator=g, dtype=torch.float64)
    rotated.backward(dy)
    dx = ops.rope_backward(dy.float(), cos, sin)
    torch.testing.assert_close(dx.double(), x64.grad, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("M,F_", [(1, 8), (5, 40), (64, 688)])
def test_swiglu_gate_and_its_backward_equal_torchs(ops, M, F_):
    g = torch.Generator().manual_seed(F_)
    gate, up = (torch.randn(M, F_, generator=g, dtype=torch.float64) * 4 for _ in "gu")
    gate.requires_grad_(), up.requires_grad_()
    want = F.silu(gate) * up
    dy = torch.randn(M, F_, generator=g, dtype=torch.float64)
    want.backward(dy)
    got = ops.swiglu_forward(gate.detach().float(), up.detach().float())
    torch.testing.assert_close(got.double(), want.detach(), rtol=1e-5, atol=2e-6)
    dg, du = ops.swiglu_backward(dy.float(), gate.detach().float(), up.detach().float())
    torch.testing.assert_close(dg.double(), gate.grad, rtol=1e-5, atol=5e-6)
    torch.testing.assert_close(du.double(), up.grad, rtol=1e-5, atol=5e-6)


def test_the_kernels_refuse_what_they_do_not_handle_with_a_message(ops):
    x = torch.randn(4, 8)
    with pytest.raises(RuntimeError, match="contiguous rows"):
        ops.norm_forward(x.t(), torch.ones(4), 1e-6)
    with pytest.raises(RuntimeError, match="weight must be"):
        ops.norm_forward(x, torch.ones(5), 1e-6)
    with pytest.raises(RuntimeError, match="float32"):
        ops.swiglu_forward(x.double(), x.double())
    with pytest.raises(RuntimeError, match="one shape"):
        ops.swiglu_forward(x, x[:2])
    q = torch.randn(1, 2, 3, 8)
    with pytest.raises(RuntimeError, match="D even"):
        ops.rope_forward(torch.randn(1, 2, 3, 7), torch.randn(1, 3, 7), torch.randn(1, 3, 7))
    with pytest.raises(RuntimeError, match="cos and sin"):
        ops.rope_forward(q, torch.randn(2, 3, 8), torch.randn(2, 3, 8))


def _ran(fn, name: str) -> bool:
    """Whether `fn()` ran the kernels' op `name` (torch's profiler lists every op called)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return any(e.name == f"grpo_desktop::{name}" for e in prof.events())


def _pass(model, ids, mask):
    """Logits (B, T, V) and every parameter's gradient of one forward and backward."""
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask).logits
    (logits.float().log_softmax(-1)[..., 3].sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_transformers_passes_run_them_with_the_same_logits_and_gradients(arch, tmp_path, restored):
    from transformers import AutoModelForCausalLM

    from grpo_desktop.engine.models.tiny import build_tiny_model

    folder = build_tiny_model(str(tmp_path / arch), "tiny", seed=0, arch=arch)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    model.train()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, model.config.vocab_size, (3, 12), generator=g)  # (B, T)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    want_logits, want_grads = _pass(model, ids, mask)
    assert fused_layers.use_on_cpu() is True
    for op in ("norm_backward", "rope_backward", "swiglu_backward"):
        assert _ran(lambda: _pass(model, ids, mask), op)
    got_logits, got_grads = _pass(model, ids, mask)
    real = mask.bool()  # padding positions' logits mean nothing
    torch.testing.assert_close(got_logits[real], want_logits[real], rtol=1e-5, atol=1e-5)
    assert want_grads.keys() == got_grads.keys()  # the norms' weights (full fine-tuning) too
    assert any("norm" in name for name in got_grads)
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6)
    with torch.no_grad():  # a reference pass: the kernels straight, no autograd
        assert _ran(lambda: model(input_ids=ids, attention_mask=mask), "swiglu_forward")
        got = model(input_ids=ids, attention_mask=mask).logits
    fused_layers.restore()
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)


def test_calls_they_cannot_compute_go_to_transformers_unchanged(tiny_model_dir, restored):
    import transformers.models.llama.modeling_llama as llama
    from transformers import AutoModelForCausalLM

    original_rotary = llama.apply_rotary_pos_emb
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    norm, mlp = model.model.norm, model.model.layers[0].mlp
    g = torch.Generator().manual_seed(5)
    x64 = torch.randn(2, 5, model.config.hidden_size, generator=g, dtype=torch.float64)
    q, k = torch.randn(2, 4, 5, 16, generator=g), torch.randn(2, 2, 5, 16, generator=g)
    cos, sin = torch.randn(2, 5, 16, generator=g), torch.randn(2, 5, 16, generator=g)
    want_norm = norm.double()(x64)
    want_mlp = mlp.double()(x64)
    want_half = original_rotary(q, k, cos[..., :8].repeat(1, 1, 2), sin[..., :8].repeat(1, 1, 2))
    assert fused_layers.use_on_cpu() is True
    # float64 (the model's norm and MLP cast above): transformers' own code, the same bits
    assert not _ran(lambda: norm(x64), "norm_forward")
    assert torch.equal(norm(x64), want_norm) and torch.equal(mlp(x64), want_mlp)
    # a rotary embedding unsqueezed on another dimension, or with angles that learn
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)
    got = llama.apply_rotary_pos_emb(qt, kt, cos, sin, unsqueeze_dim=2)
    assert all(torch.equal(a, b) for a, b in zip(got, original_rotary(qt, kt, cos, sin, 2)))
    learnt = cos.clone().requires_grad_()
    assert not _ran(lambda: llama.apply_rotary_pos_emb(q, k, learnt, sin), "rope_forward")
    got = llama.apply_rotary_pos_emb(q, k, learnt, sin)
    assert all(torch.equal(a, b) for a, b in zip(got, original_rotary(q, k, learnt, sin)))
    # one that fits: the kernel, torch's bits
    assert _ran(lambda: llama.apply_rotary_pos_emb(q, k, cos, sin), "rope_forward")
    whole = llama.apply_rotary_pos_emb(q, k, cos[..., :8].repeat(1, 1, 2), sin[..., :8].repeat(1, 1, 2))  # fmt: skip
    assert all(torch.equal(a, b) for a, b in zip(whole, want_half))
    # another activation than SiLU: transformers' MLP as it is
    mlp.float()
    mlp.act_fn = torch.nn.GELU()
    x = x64.float()
    assert not _ran(lambda: mlp(x), "swiglu_forward")
    assert torch.equal(mlp(x), mlp.down_proj(F.gelu(mlp.gate_proj(x)) * mlp.up_proj(x)))


def test_use_on_cpu_once_and_the_restore(restored):
    import transformers.models.llama.modeling_llama as llama
    import transformers.models.qwen2.modeling_qwen2 as qwen2

    originals = (llama.LlamaRMSNorm.forward, llama.LlamaMLP.forward, llama.apply_rotary_pos_emb,
                 qwen2.Qwen2RMSNorm.forward, qwen2.apply_rotary_pos_emb)  # fmt: skip
    assert fused_layers.use_on_cpu() is True
    assert fused_layers.use_on_cpu() is True  # once per process: the originals stay known
    assert llama.LlamaRMSNorm.forward is fused_layers.norm_forward
    assert qwen2.Qwen2MLP.forward is fused_layers.mlp_forward
    assert llama.apply_rotary_pos_emb is not originals[2]
    fused_layers.restore()
    assert not fused_layers.is_on()
    now = (llama.LlamaRMSNorm.forward, llama.LlamaMLP.forward, llama.apply_rotary_pos_emb,
           qwen2.Qwen2RMSNorm.forward, qwen2.apply_rotary_pos_emb)  # fmt: skip
    assert now == originals
