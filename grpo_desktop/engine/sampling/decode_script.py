"""The lean CPU decode step's layers as one TorchScript function: the same operations, fewer
Python round trips.

`LeanDecoder._run` (decode.py) calls about twenty torch operations per layer and token; from
Python each costs a few microseconds of dispatch beyond its arithmetic, which on the small
models this app trains on a CPU is a tenth of the step (the demo: 2.60 → 2.35 ms per token-step
on one thread, bench/decode_floor.py). TorchScript's interpreter runs the very same aten
operations in the same order, so the logits are the same bits (tests/engine/sampling/
test_decode_script.py holds them to the eager step's); only the loop around them leaves Python.

The function is compiled from the source text below (`torch.jit.CompilationUnit`), not from a
decorated Python function: a frozen build (PyInstaller) keeps no .py sources for
`torch.jit.script` to read. Compiled once per process on first use (a few milliseconds); if
compiling fails for any reason the lean step stays in Python (`layers_step()` returns None).
It covers what the eager step does when every product is one `F.linear` (MKL's; oneDNN's
product, chosen on some CPUs by ops/kernels.py, keeps the Python step), every norm torch's
rms_norm and the activation SiLU; decode.py checks that before using it.

The layer loop is one TEMPLATE with two versions of its attention, SwiGLU gate and norms: torch's
operations (SOURCE) and the fused kernels of ops/native.py (NATIVE_SOURCE), compiled only where
those are built; decode.py asks for the second when its decoder uses them.

Run with the graph executor's optimisations off (`optimized_execution(False)`): no profiling
runs, no re-specialisation as the attended length grows, and no fusion that could round
differently from the eager step.
"""

from __future__ import annotations

import threading

import torch

from grpo_desktop.engine.ops import native as native_ops

TEMPLATE = """
def layers_step(
    h: Tensor,
    cos: Tensor,
    sin: Tensor,
    blocked: Optional[Tensor],
    L: int,
    input_norms: List[Tensor],
    post_norms: List[Tensor],
    eps: List[float],
    qkv_w: List[Tensor],
    qkv_b: List[Optional[Tensor]],
    o_w: List[Tensor],
    o_b: List[Optional[Tensor]],
    gate_up_w: List[Tensor],
    gate_up_b: List[Optional[Tensor]],
    down_w: List[Tensor],
    down_b: List[Optional[Tensor]],
    keys: List[Tensor],
    values: List[Tensor],
    heads: int,
    kv_heads: int,
    head_dim: int,
    width: int,
    scaling: float,
    norm_w: Tensor,
    norm_eps: float,
    head_w: Tensor,
    head_b: Optional[Tensor],
) -> Tensor:
    N = h.size(0)
    E = h.size(1)
    H = heads
    Hkv = kv_heads
    D = head_dim
    for i in range(len(qkv_w)):
        x = NORM(h, input_norms[i], eps[i])
        qkv = torch.ops.aten.linear(x, qkv_w[i], qkv_b[i]).view(N, H + 2 * Hkv, D)
ATTENTION
        h.add_(torch.ops.aten.linear(out.reshape(N, -1), o_w[i], o_b[i]))
        normed = NORM(h, post_norms[i], eps[i])
        gu = torch.ops.aten.linear(normed, gate_up_w[i], gate_up_b[i])
GATED
        h.add_(torch.ops.aten.linear(gated, down_w[i], down_b[i]))
    return torch.ops.aten.linear(NORM(h, norm_w, norm_eps), head_w, head_b)
"""

# The attention and SwiGLU's gate in torch's operations (SOURCE) ...
TORCH_ATTENTION = """
        qk = qkv[:, : H + Hkv]
        torch.add(qk * cos, qk.roll(D // 2, dims=-1) * sin, out=qk)
        keys[i][:, :, :, L - 1] = qkv[:, H : H + Hkv]
        values[i][:, :, L - 1] = qkv[:, H + Hkv :]
        grouped = qkv[:, :H].reshape(N, Hkv, -1, D)
        scores = torch.matmul(grouped, keys[i][:, :, :, :L]).mul_(scaling)
        if blocked is not None:
            scores.masked_fill_(blocked, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, values[i][:, :, :L])"""
TORCH_GATED = """
        gated = torch.ops.aten.silu(gu[:, :width]).mul_(gu[:, width:])"""
# ... or in the fused kernels of ops/native_decode.cpp (NATIVE_SOURCE), where they are built.
NATIVE_ATTENTION = """
        out = torch.ops.grpo_desktop.rope_attend(
            qkv, cos, sin, keys[i], values[i], L, H, Hkv, scaling, blocked
        )"""
NATIVE_GATED = """
        gated = torch.ops.grpo_desktop.silu_mul(gu, width)"""


TORCH_NORM = "torch.rms_norm(h, [E], "
NATIVE_NORM = "torch.ops.grpo_desktop.rms_norm(h, "


TORCH_LINEAR = "torch.ops.aten.linear("
NATIVE_LINEAR = "torch.ops.grpo_desktop.linear("


def _source(attention: str, gated: str, norm: str, linear: str) -> str:
    source = TEMPLATE.replace("ATTENTION\n", attention[1:] + "\n")
    source = source.replace("GATED\n", gated[1:] + "\n")
    return source.replace("NORM(h, ", norm).replace(TORCH_LINEAR, linear)


SOURCE = _source(TORCH_ATTENTION, TORCH_GATED, TORCH_NORM, TORCH_LINEAR)
NATIVE_SOURCE = _source(NATIVE_ATTENTION, NATIVE_GATED, NATIVE_NORM, NATIVE_LINEAR)

_lock = threading.Lock()
_compiled: dict[str, object] = {}


def layers_step(native: bool = False):
    """The compiled `layers_step`, or None when TorchScript cannot compile it here. `native`:
    the variant whose attention and gate call ops/native.py's fused kernels (NATIVE_SOURCE;
    None unless they are built); else torch's operations (SOURCE)."""
    key = "native" if native else "torch"
    with _lock:
        if key not in _compiled:
            try:
                if native and native_ops.decode_ops() is None:
                    raise RuntimeError("the fused kernels are not built here")
                source = NATIVE_SOURCE if native else SOURCE
                _compiled[key] = torch.jit.CompilationUnit(source).layers_step
            except Exception:  # no TorchScript in this build: the Python step runs instead
                _compiled[key] = None
        return _compiled[key]
