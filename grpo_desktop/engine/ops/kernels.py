"""Float32 linear layers on the CPU through oneDNN when that is the faster library on this machine.

A float32 `nn.Linear` on the CPU runs MKL's sgemm, which picks its code path by CPU vendor: on
some AMD processors its AVX2 kernels, even where AVX-512 runs at full width; oneDNN, which
PyTorch also ships, uses AVX-512 there (bench/README.md, "Where the speed comes from"). Same
float32 arithmetic, rounded differently (within 3e-6 of a float64 result relative to the
output's scale; MKL within 1e-6). `fast_linear()` routes `F.linear` to `onednn_linear` (forward
and backward in oneDNN) for float32 CPU tensors of at least MIN_ROWS rows, inside its `with`
block and only when `enabled()`: oneDNN is present, gives F.linear's result on a check and beats
MKL on a short timing at first use by a clear margin (MIN_SPEEDUP, on medians of interleaved
runs). On a 2-core AMD EPYC whose MKL is fast, oneDNN was 1.1-1.25x faster per product alone, a
best-of-five timing against a 1.15x margin picked it in some processes and not in others, and
the runs that picked it were slower (`vs_trl.py --quick` 1.50-1.52x TRL against 1.71-1.83x with
oneDNN off, alternated; bench/README.md, "Session 17"). A decode step's few-row products, where
oneDNN's fixed cost per call can lose, ask `product_for`, timed once per shape and held to the
same margin. Checkpointed layers recompute under the routing their forward had
(`checkpoint_contexts`). The price, heap fragmentation when row counts vary, is accepted.
GRPO_DESKTOP_ONEDNN=0 switches oneDNN off, =1 skips the timings.

Try it: python -c "from grpo_desktop.engine.ops import kernels; print(kernels.describe())"
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from grpo_desktop.engine.ops import bf16_products
from grpo_desktop.engine.ops.linear_mode import LinearMode

ENV = "GRPO_DESKTOP_ONEDNN"
# oneDNN must be this much faster than MKL on the timing to be used: where MKL runs its AVX2 code
# on an AVX-512 CPU oneDNN's products take half the time; where MKL is already fast they are
# 1.1-1.25x faster alone and whole passes gain nothing from the routing (bench/README.md).
MIN_SPEEDUP = 1.5
MIN_ROWS = 64  # fast_linear leaves products of fewer rows to F.linear (per-call cost decides)
_state: dict[str, object] = {}
_choices: dict[tuple, bool] = {}  # (rows, K, N, bias) -> oneDNN is the faster product


def _op():
    """oneDNN's linear product `(x, weight, bias, "none", [], "")`, or None where absent."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return None


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (M, K) · weight (N, K)ᵀ + bias → (M, N) in oneDNN; strided views are read as they are."""
    return _state["op"](x, weight, bias, "none", [], "")  # type: ignore[operator]


def _agrees(op) -> bool:
    """The op computes F.linear (forward, both backward products) on a small random case."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 48, generator=g)  # (M, K)
    w = torch.randn(29, 48, generator=g)  # (N, K)
    b = torch.randn(29, generator=g)  # (N,)
    dy = torch.randn(37, 29, generator=g)  # (M, N)
    try:
        pairs = [
            (op(x, w, b, "none", [], ""), F.linear(x, w, b)),
            (op(dy, w.t(), None, "none", [], ""), dy @ w),  # input gradient (M, K)
            (op(dy.t(), x.t(), None, "none", [], ""), dy.t() @ x),  # weight gradient (N, K)
        ]
    except (RuntimeError, TypeError):
        return False
    return all(a.shape == e.shape and torch.allclose(a, e, rtol=1e-4, atol=1e-4) for a, e in pairs)


def _times(op, x, weight, bias=None, rounds: int = 9) -> tuple[float, float]:
    """Median seconds of F.linear and of the oneDNN op on these tensors over `rounds` runs each,
    interleaved after one warm-up run of both. Medians, not the best run: near the margin a
    lucky run of either decided, and the choice flipped from one process to the next."""
    times: list[list[float]] = [[], []]
    for round_ in range(rounds + 1):  # round 0 warms both up and is not counted
        for i in (0, 1):
            start = time.perf_counter()
            if i == 0:
                F.linear(x, weight, bias)
            else:
                op(x, weight, bias, "none", [], "")
            if round_:
                times[i].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def _faster(op) -> bool:
    """oneDNN beats MKL by MIN_SPEEDUP on a training-sized product (1024 × 512 · 512 × 1024, about
    a GFLOP: long enough to time steadily, ~0.1 s for the whole decision on 2 cores)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1024, 512, generator=g)  # (M, K)
    w = torch.randn(1024, 512, generator=g)  # (N, K)
    mkl, onednn = _times(op, x, w)
    return mkl >= MIN_SPEEDUP * onednn


def _default_library() -> str:
    return "MKL" if torch.backends.mkl.is_available() else "torch's default BLAS"


def library() -> str:
    """The library that computes float32 CPU linears here: "oneDNN", "MKL" or another default."""
    return "oneDNN" if enabled() else _default_library()


def describe() -> str:
    """Which library computes float32 CPU linears here, and why (for the self-test and logs)."""
    return f"{library()} ({_state['why']})"


def enabled() -> bool:
    """Whether fast_linear() routes float32 CPU linears to oneDNN (decided once per process; the
    reason is kept for `describe`)."""
    if "enabled" not in _state:
        setting = os.environ.get(ENV, "").strip()
        default = _default_library()
        op = None if setting == "0" else _op()
        ok, why = False, f"oneDNN switched off by {ENV}=0"
        if setting != "0" and op is None:
            why = "this torch has no oneDNN linear"
        elif op is not None and not _agrees(op):
            why = "oneDNN's linear gave other results here"
        elif op is not None and setting == "1":
            ok, why = True, f"{ENV}=1"
        elif op is not None:
            with torch.no_grad():
                ok = _faster(op)
            why = f"faster than {default} here" if ok else "oneDNN not faster on this CPU"
        _choices.clear()
        _state.update(op=op, enabled=ok, why=why)
    return bool(_state["enabled"])


class _OneDnnLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        x2 = x.reshape(-1, x.size(-1))  # (M, K)
        out = _product(x2, weight, bias)  # (M, N)
        # A 2-D product is returned as it is, not as a view: a LoRA layer adds its adapter into
        # it in place (lora_product.py), which autograd forbids on a custom Function's view.
        return out if x.dim() == 2 else out.view(*x.shape[:-1], weight.size(0))  # (..., N)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.size(-1))  # (M, N)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _product(g2, weight.t(), None).view(x.shape)  # (M, N)·(N, K) → (..., K)
        if ctx.needs_input_grad[1]:
            dw = _product(g2.t(), x.reshape(-1, x.size(-1)).t(), None)  # (N, M)·(M, K) → (N, K)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g2.sum(0)  # (N,)
        return dx, dw, db


def _plain_f32_cpu(t) -> bool:
    return (
        (type(t) is torch.Tensor or type(t) is torch.nn.Parameter)
        and t.dtype == torch.float32
        and t.device.type == "cpu"
        and t.layout == torch.strided
    )


def routable(x, weight, bias=None) -> bool:
    """F.linear(x, weight, bias) is one oneDNN can compute: float32 dense CPU tensors."""
    return (
        _plain_f32_cpu(x)
        and _weight_ok(weight, bias)
        and x.dim() >= 1
        and x.size(-1) == weight.size(1)
        and x.numel() > 0
    )


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """F.linear computed by oneDNN, with gradients (call only where `routable` and `enabled`)."""
    return _OneDnnLinear.apply(x, weight, bias)


def _weight_ok(weight, bias) -> bool:
    return (
        _plain_f32_cpu(weight)
        and weight.dim() == 2
        and (bias is None or (_plain_f32_cpu(bias) and bias.dim() == 1))
    )


def product_for(rows: int, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """For a no-grad loop that multiplies `rows` rows by `weight` again and again (a decode step):
    `fn(x, weight, bias)`, oneDNN's product (no autograd) where it beats F.linear by MIN_SPEEDUP
    here, else F.linear, timed once per (rows, shape) on random rows and the real weight.
    F.linear when not `enabled()`."""
    if not enabled() or not _weight_ok(weight, bias) or rows < 1:
        return F.linear
    key = (rows, weight.size(1), weight.size(0), bias is not None)
    if key not in _choices:
        if os.environ.get(ENV, "").strip() == "1":
            _choices[key] = True
        else:
            # A private generator: timing must not draw from the global one, or the first
            # seeded generation of a process would sample other tokens than the next.
            g = torch.Generator().manual_seed(0)
            x = torch.randn(rows, weight.size(1), generator=g)  # (M, K)
            with torch.no_grad():
                mkl, onednn = _times(_state["op"], x, weight, bias)
            # The same margin as the training products': a decode whose products are all
            # F.linear runs its layers in TorchScript (decode_script.py), which a few percent on
            # one product does not pay for.
            _choices[key] = mkl >= MIN_SPEEDUP * onednn
    return _product if _choices[key] else F.linear


class _RouteLinear(LinearMode):
    _open = threading.local()

    def linear(self, x, weight, bias):
        big = routable(x, weight, bias) and x.numel() >= MIN_ROWS * x.size(-1)
        if big and not bf16_products.active():  # bfloat16 chosen: left to that block
            return onednn_linear(x, weight, bias)
        return None


def _cpu_work(device) -> bool:
    """Whether the block works on the CPU: `device` says so; without one, whether CUDA is unused
    in this process (then no tensor can be on a GPU)."""
    if device is not None:
        return torch.device(device).type == "cpu"
    return not torch.cuda.is_initialized()


@contextlib.contextmanager
def fast_linear(device: torch.device | str | None = None) -> Iterator[None]:
    """Inside: float32 CPU F.linear calls run in oneDNN when `enabled()`; else nothing changes.
    Never entered for work on another device (pass the tensors' device): the mode sees every
    torch call of the block, which would add host time to each op of a CUDA forward."""
    if not _cpu_work(device) or not enabled():
        yield
        return
    with _RouteLinear():
        yield


def checkpoint_contexts() -> tuple[contextlib.AbstractContextManager, ...]:
    """`context_fn` for torch.utils.checkpoint (non-reentrant): the forward runs as it is; the
    recomputation in the backward runs under fast_linear's routing, and under bfloat16 products
    (bf16_products.py), when the forward did. The backward runs after the `with` blocks have
    ended, and torch requires the recomputation to save the same tensors as the forward
    (oneDNN's product saves x and the weight, F.linear's other views; bfloat16 products their
    bfloat16 copies): so the backward gets the same products and gradients as without
    checkpointing."""
    routed = _RouteLinear.depth() > 0
    return contextlib.nullcontext(), _recompute(routed, bf16_products.active())


@contextlib.contextmanager
def _recompute(routed: bool, bf16: bool) -> Iterator[None]:
    """The forward's product modes again, in the order the forward entered them."""
    with contextlib.ExitStack() as stack:
        if bf16:
            stack.enter_context(bf16_products.bf16_products())
        if routed:
            stack.enter_context(_RouteLinear())
        yield
