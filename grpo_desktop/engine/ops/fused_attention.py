"""transformers' sdpa attention on the CPU in the fused kernels' `attend` (native_attention.cpp),
forward and backward, where torch's flash-attention kernel ran it.

A GRPO pass attends each answer's tokens to its prompt and to the answer before them, with a
mask. torch's CPU flash-attention kernel is tiled for long sequences and, given a mask, scores
every key and masks afterwards; its backward recomputes all of it (bench/vs_trl.py --quick's 3M
model, 32 rows of 63 tokens on 100 keys: 2.6 ms forward and 5.3 ms backward a layer on two Zen
4 cores, about 13 % of a step). `attend` reads for each query only the keys from the first to
the last its mask allows, keeps a block of queries' scores in vector registers, and in the
backward adds each key/value head's gradients in the one task that owns it (bench/README.md,
session 28, has the figures).

`use_on_cpu()` (a CPU run calls it once at its start, beside grouped_attention's) puts
`attention` in transformers' attention table under "sdpa". A call it takes is one the kernel
computes as torch's scaled_dot_product_attention defines it: float32 CPU tensors, a head width
that is a multiple of 16 up to 256, keys and values of one width, a bool mask (N or 1, 1, Lq, Lk)
or none (then causal exactly as transformers makes it), no dropout, soft cap, attention sinks,
position bias or sliding window. Every other call goes to transformers' own function unchanged,
as does everything when the kernels are not built (engine/ops/native.py says why) or are the
installer's build for CPUs without AVX2 (there these loops ran 7-12x slower than torch's). The results
equal torch's up to float rounding (the sums run in another order), so sampled tokens can part
from an earlier version's where two candidates tie to that precision. A query that may see no
key gets zeros, as torch's kernel gives.

Try it: python -m pytest -q tests/engine/ops/test_fused_attention.py
"""

from __future__ import annotations

import torch

from grpo_desktop.engine.ops import native

UNSUPPORTED = ("softcap", "sliding_window", "s_aux", "sinks", "position_bias")
_state: dict[str, object] = {}


class _Attend(torch.autograd.Function):
    """out (N, Lq, H, D) of q (N, H, Lq, D), k and v (N, Hkv, Lk, D); its backward in the
    kernel too."""

    @staticmethod
    def forward(ctx, ops, q, k, v, allowed, scale: float, causal: bool):
        out, lse = ops.attend(q, k, v, allowed, scale, causal)  # (N, Lq, H, D), (N, H, Lq)
        ctx.save_for_backward(q, k, v, out, lse, allowed)
        ctx.ops, ctx.scale, ctx.causal = ops, scale, causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, allowed = ctx.saved_tensors
        dq, dk, dv = ctx.ops.attend_backward(
            dout, q, k, v, out, lse, allowed, ctx.scale, ctx.causal
        )  # (N, Lq, H, D), (N, Hkv, Lk, D), (N, Hkv, Lk, D)
        return None, dq.transpose(1, 2), dk, dv, None, None, None


def _ops():
    """The loaded kernels when they have `attend` (not the x86-64-v2 build), else None."""
    ops = native.decode_ops()
    return ops if ops is not None and native.has_attend(ops) else None


def _fits(query, key, value, mask, dropout: float, kwargs: dict) -> bool:
    """Whether `attend` computes this call as sdpa would (see the module docstring)."""
    tensors = (query, key, value)
    if any(t.device.type != "cpu" or t.dtype != torch.float32 or t.dim() != 4 for t in tensors):
        return False
    D = query.size(-1)
    if key.size(-1) != D or value.shape != key.shape or D % 16 or not 16 <= D <= 256:
        return False
    if key.size(0) != query.size(0) or key.size(1) == 0 or query.size(1) % key.size(1):
        return False
    if dropout or any(kwargs.get(name) is not None for name in UNSUPPORTED):
        return False
    if mask is None:
        return True
    N, Lq, Lk = query.size(0), query.size(2), key.size(2)
    return (
        mask.dtype == torch.bool
        and mask.dim() == 4
        and mask.size(0) in (1, N)
        and tuple(mask.shape[1:]) == (1, Lq, Lk)
    )


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention-function signature: (output (N, Lq, H, D), None). The kernel's
    where it fits, else the function it replaced."""
    original = _state["original"]
    is_causal = kwargs.get("is_causal")
    # The shapes first: a GPU or float64 call never asks for (or waits on a build of) the kernels
    fits = _fits(query, key, value, attention_mask, dropout, kwargs)
    ops = _ops() if fits else None
    if ops is None:
        return original(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    Lq, Lk = query.size(2), key.size(2)
    causal = False
    if attention_mask is None:  # transformers' rule: causal for several queries, upper-left
        if is_causal is None:
            is_causal = getattr(module, "is_causal", True)
        causal = bool(Lq > 1 and is_causal)
        if causal and Lk < Lq:
            return original(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
        if causal and Lk > Lq:  # (an empty static cache's prefill: transformers crops the same)
            key, value = key[:, :, :Lq], value[:, :, :Lq]
    else:
        attention_mask = attention_mask.contiguous()
    scale = float(scaling) if scaling is not None else query.size(-1) ** -0.5
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        out = _Attend.apply(ops, query, key, value, attention_mask, scale, causal)
    else:
        out, _ = ops.attend(query, key, value, attention_mask, scale, causal)
    return out, None  # (N, Lq, H, D)


def use_on_cpu() -> bool:
    """From now on transformers' sdpa attention runs in `attend` where it fits (once per
    process); False where this transformers has no attention table to put it in."""
    if is_on():
        return True
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError:
        return False
    original = ALL_ATTENTION_FUNCTIONS.get("sdpa")
    if original is None:
        return False
    _state["original"] = original
    ALL_ATTENTION_FUNCTIONS["sdpa"] = attention
    return True


def is_on() -> bool:
    """Whether `use_on_cpu()` has taken effect (and not been restored)."""
    return "original" in _state


def restore() -> None:
    """transformers' own sdpa function again (tests)."""
    original = _state.pop("original", None)
    if original is not None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        ALL_ATTENTION_FUNCTIONS["sdpa"] = original
