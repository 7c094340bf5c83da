"""engine/ops/fused_attention.py and native_attention.cpp: the passes' attention in the fused
kernels. The kernel against torch's attention in float64 (outputs and all three gradients) over
the masks GRPO's passes make (prompt + causal answers, left padding, packed answers with gaps, a
query that sees nothing, one mask for every row, none), grouped and plain heads and head widths
16-256; a tiny Llama's logits and gradients through transformers with it against without it;
and the calls it must leave to transformers' own function, which then give the same bits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grpo_desktop.engine.ops import fused_attention, native

pytestmark = pytest.mark.skipif(native.decode_ops() is None, reason=native.describe())


@pytest.fixture
def restored():
    """transformers' own sdpa function during the test, and the process's state afterwards."""
    was_on = fused_attention.is_on()
    fused_attention.restore()
    yield
    fused_attention.restore()
    if was_on:
        fused_attention.use_on_cpu()


def _mask(kind: str, N: int, Lq: int, Lk: int) -> torch.Tensor | None:
    """(N or 1, 1, Lq, Lk) bool: the answers' queries see the prompt (the first Lk - Lq keys)
    and the answer up to themselves, plus the kind's twist."""
    if kind == "none":
        return None
    allowed = torch.ones(N, 1, Lq, Lk, dtype=torch.bool).tril(Lk - Lq)
    if kind == "padded":  # left padding of two rows' prompts
        allowed[0, ..., :3] = False
        allowed[-1, ..., :1] = False
    elif kind == "gaps":  # packed answers: each sees the prompt and its own answer only
        half = Lq // 2
        allowed[..., half:, Lk - Lq : Lk - Lq + half] = False
    elif kind == "blind":  # a query that may see no key (torch gives zeros)
        allowed[0, :, 1] = False
    elif kind == "shared":  # one mask for every row
        allowed = allowed[:1].clone()
    return allowed


def _reference(q, k, v, allowed, scale, causal):
    """torch's attention in float64, (N, Lq, H, D)."""
    if allowed is None and causal:
        Lq, Lk = q.size(2), k.size(2)
        allowed = torch.ones(Lq, Lk, dtype=torch.bool).tril(Lk - Lq)
    out = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=allowed, scale=scale, enable_gqa=True
    )
    return out.transpose(1, 2)


CASES = [  # N, H, Hkv, Lq, Lk, D, mask, causal (without a mask)
    (4, 8, 4, 13, 30, 32, "causal", False),
    (4, 8, 4, 13, 30, 32, "padded", False),
    (3, 6, 2, 9, 40, 64, "gaps", False),
    (2, 4, 4, 7, 7, 16, "blind", False),
    (3, 4, 1, 5, 21, 128, "shared", False),
    (2, 2, 1, 6, 6, 256, "none", False),
    (2, 8, 2, 27, 27, 32, "none", True),  # a prompt's shared beginning, run once
    (2, 4, 2, 5, 19, 64, "none", True),  # fewer queries than keys: aligned at the end
    (2, 4, 2, 1, 17, 48, "causal", False),  # one query per row (the prompt's last token)
    (2, 6, 3, 70, 90, 64, "gaps", False),  # the backward's chunks of 32 rows: 32, 32 and 6
    (2, 6, 3, 70, 90, 32, "padded", False),
]


@pytest.mark.parametrize(("N", "H", "Hkv", "Lq", "Lk", "D", "kind", "causal"), CASES)
def test_attend_equals_torch_attention_and_its_gradients(N, H, Hkv, Lq, Lk, D, kind, causal):
    ops = native.decode_ops()
    g = torch.Generator().manual_seed(N * 100 + D)
    # queries strided as transformers' are (N, Lq, H, D) memory seen as (N, H, Lq, D)
    q = torch.randn(N, Lq, H, D, generator=g).transpose(1, 2)
    k, v = (torch.randn(N, Hkv, Lk, D, generator=g) for _ in range(2))
    allowed, scale = _mask(kind, N, Lq, Lk), D**-0.5
    out, lse = ops.attend(q, k, v, allowed, scale, causal)  # (N, Lq, H, D), (N, H, Lq)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    want = _reference(q64, k64, v64, allowed, scale, causal)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=3e-6)
    dout = torch.randn(out.shape, generator=g)
    want.backward(dout.double())
    dq, dk, dv = ops.attend_backward(dout, q, k, v, out, lse, allowed, scale, causal)
    torch.testing.assert_close(dq.transpose(1, 2).double(), q64.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dk.double(), k64.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dv.double(), v64.grad, rtol=1e-4, atol=1e-5)
    if kind == "blind":
        assert torch.equal(out[0, 1], torch.zeros(H, D))
        assert torch.equal(dq[0, 1], torch.zeros(H, D))


def test_the_kernel_refuses_what_it_cannot_compute():
    ops = native.decode_ops()
    q, k = torch.randn(1, 2, 3, 24), torch.randn(1, 1, 5, 24)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        ops.attend(q, k, k, None, 0.2, False)
    q, k = torch.randn(1, 3, 3, 16), torch.randn(1, 2, 5, 16)
    with pytest.raises(RuntimeError, match="multiple of Hkv"):
        ops.attend(q, k, k, None, 0.2, False)
    q, k = torch.randn(1, 2, 3, 16), torch.randn(1, 1, 5, 16)
    with pytest.raises(RuntimeError, match="mask must be"):
        ops.attend(q, k, k, torch.ones(1, 1, 3, 4, dtype=torch.bool), 0.2, False)


def _pass(model, ids, mask):
    """Logits and gradients of one forward and backward over left-padded rows."""
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
    weights = torch.linspace(-1, 1, logits.numel()).view_as(logits)
    ((logits * weights) * mask[..., None]).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def _ran_attend(fn) -> bool:
    """Whether `fn()` ran the kernel's op (torch's profiler lists every op called)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return any(e.name == "grpo_desktop::attend" for e in prof.events())


def test_transformers_passes_run_it_with_the_same_logits_and_gradients(tiny_model_dir, restored):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    model.train()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, model.config.vocab_size, (3, 12), generator=g)  # (B, T)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    mask[2, :1] = 0
    assert not _ran_attend(lambda: _pass(model, ids, mask))
    want_logits, want_grads = _pass(model, ids, mask)
    assert fused_attention.use_on_cpu() is True
    assert _ran_attend(lambda: _pass(model, ids, mask))
    got_logits, got_grads = _pass(model, ids, mask)
    real = mask.bool()  # padding positions' logits mean nothing
    torch.testing.assert_close(got_logits[real], want_logits[real], rtol=1e-5, atol=1e-5)
    assert want_grads.keys() == got_grads.keys()
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6)
    with torch.no_grad():  # without a mask (no padding): causal, as transformers makes it
        plain = ids[1:2]
        assert _ran_attend(lambda: model(input_ids=plain))
        got = model(input_ids=plain).logits
        fused_attention.restore()
        torch.testing.assert_close(got, model(input_ids=plain).logits, rtol=1e-5, atol=1e-5)


class _Module:
    num_key_value_groups = 2
    is_causal = True


@pytest.mark.parametrize(
    "change",
    ["float64", "head width 24", "dropout", "float mask", "soft cap", "fewer keys than queries"],
)
def test_calls_it_cannot_compute_go_to_transformers_unchanged(change, restored):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    g = torch.Generator().manual_seed(1)
    D = 24 if change == "head width 24" else 32
    dtype = torch.float64 if change == "float64" else torch.float32
    q = torch.randn(2, 4, 6, D, generator=g, dtype=dtype)
    k, v = (torch.randn(2, 2, 6 if change != "fewer keys than queries" else 4, D, generator=g,
                        dtype=dtype) for _ in range(2))  # fmt: skip
    mask = None if change == "fewer keys than queries" else torch.ones(2, 1, 6, 6, dtype=torch.bool)
    if change == "float mask":
        mask = torch.zeros(2, 1, 6, 6)
    kwargs = {"softcap": 30.0} if change == "soft cap" else {}
    dropout = 0.5 if change == "dropout" else 0.0
    assert fused_attention.use_on_cpu() is True
    torch.manual_seed(7)
    if change == "soft cap":  # transformers' sdpa refuses it: so does the route, the same way
        with pytest.raises(ValueError, match="softcap"):
            fused_attention.attention(_Module(), q, k, v, mask, dropout, None, **kwargs)
        return
    assert not _ran_attend(lambda: fused_attention.attention(_Module(), q, k, v, mask, dropout))
    torch.manual_seed(7)
    got, _ = fused_attention.attention(_Module(), q, k, v, mask, dropout, None, **kwargs)
    torch.manual_seed(7)
    want, _ = sdpa_attention_forward(_Module(), q, k, v, mask, dropout, None, **kwargs)
    assert torch.equal(got, want)


def test_other_implementations_and_the_restore(restored):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    original = ALL_ATTENTION_FUNCTIONS["sdpa"]
    assert fused_attention.use_on_cpu() is True
    assert fused_attention.use_on_cpu() is True  # once per process: the original stays known
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is fused_attention.attention
    fused_attention.restore()
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is original
