"""transformers' Llama and Qwen2 RMSNorm, rotary embedding and SwiGLU gate on the CPU in the fused
kernels (native_layers.cpp), forward and backward, where torch's operations ran them.

Between a log-prob pass's matrix products, transformers' RMSNorm is six tensor operations
(pow, mean, add, rsqrt and two products), the rotary embedding ten (for q and k: two products,
a negation, a concatenation and a sum) and SwiGLU's gate two, each one pass over a (tokens,
width) tensor; autograd's backward runs about twice as many. On bench/vs_trl.py --quick's step,
taking them away altogether (identities in their place, alternated in one process) saved 43 of
the reference and update passes' ~355 ms. The kernels do each in one pass over its rows, and its
backward in one: the two passes 0.371 s instead of 0.394 (×1.06, `bench/pass_attention.py
--kernels layers`; bench/README.md, session 29).

`use_on_cpu()` (a CPU run calls it once at its start, beside fused_attention's) puts
`norm_forward`, `rotary` and `mlp_forward` in place of transformers' RMSNorm.forward,
apply_rotary_pos_emb and MLP.forward for Llama (SmolLM2, the demo's) and Qwen2. Each looks at
its call first: float32 CPU tensors with contiguous rows, a SiLU gate, the rotary angles of the
whole head width without gradients, unsqueezed on dimension 1; every other call (a GPU, another
dtype, partial rotary) goes to transformers' own code, as does everything when the kernels are
not built here (engine/ops/native.py says why). The rotary embedding's forward is torch's bits;
the norm's and the gate's values and every gradient equal torch's up to float rounding (the
sums run in another order, the exponential is another library's), so sampled tokens can part
from an earlier version's where two candidates tie to that precision.

Try it: python -m pytest -q tests/engine/ops/test_fused_layers.py
"""

from __future__ import annotations

import importlib

import torch

from grpo_desktop.engine.ops import native

MODULES = {  # transformers module: (its RMSNorm class, its MLP class)
    "transformers.models.llama.modeling_llama": ("LlamaRMSNorm", "LlamaMLP"),
    "transformers.models.qwen2.modeling_qwen2": ("Qwen2RMSNorm", "Qwen2MLP"),
}
_state: dict[str, dict] = {}


def _ops():
    """The loaded kernels, else None (every build of this source has the layers' ops: the cache
    and the installer's bundle are keyed by all of native_build's sources)."""
    return native.decode_ops()


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t as (rows, width) with contiguous rows (a view where it can be)."""
    t = t.reshape(-1, t.size(-1))
    return t if t.stride(-1) == 1 else t.contiguous()


def _cpu_float(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def _wants_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class _Norm(torch.autograd.Function):
    """weight * (x * rstd) of x (M, E), rstd = 1 / sqrt(mean(x²) + eps) per row."""

    @staticmethod
    def forward(ctx, ops, x, weight, eps: float):
        y, rstd = ops.norm_forward(x, weight, eps)  # (M, E), (M,)
        ctx.save_for_backward(x, weight, rstd)
        ctx.ops = ops
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dy = _rows(dy)  # (M, E)
        dx = ctx.ops.norm_backward(dy, x, weight, rstd) if ctx.needs_input_grad[1] else None
        dw = None
        if ctx.needs_input_grad[2]:  # full fine-tuning: the norm's weight trains too
            dw = (dy * (x * rstd[:, None])).sum(0)  # (E,)
        return None, dx, dw, None


class _Rope(torch.autograd.Function):
    """x * cos + rotate_half(x) * sin of x (B, H, L, D), cos and sin (1 or B, L, D)."""

    @staticmethod
    def forward(ctx, ops, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        ctx.ops = ops
        return ops.rope_forward(x, cos, sin)  # (B, H, L, D) in x's layout

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        dy = dy if dy.stride(-1) == 1 else dy.contiguous()
        return None, ctx.ops.rope_backward(dy, cos, sin), None, None


class _SwiGLU(torch.autograd.Function):
    """silu(g) * u of g, u (M, F)."""

    @staticmethod
    def forward(ctx, ops, g, u):
        ctx.save_for_backward(g, u)
        ctx.ops = ops
        return ops.swiglu_forward(g, u)  # (M, F)

    @staticmethod
    def backward(ctx, dy):
        g, u = ctx.saved_tensors
        dg, du = ctx.ops.swiglu_backward(_rows(dy), g, u)  # (M, F) each
        return None, dg, du


def norm_forward(module, hidden_states: torch.Tensor) -> torch.Tensor:
    """RMSNorm.forward: the kernel where it fits, else transformers' own."""
    weight, eps = getattr(module, "weight", None), getattr(module, "variance_epsilon", None)
    ops = None
    fits = isinstance(eps, float) and isinstance(weight, torch.Tensor) and weight.dim() == 1
    if fits and _cpu_float(hidden_states, weight) and hidden_states.size(-1) == weight.size(0):
        ops = _ops()
    if ops is None:
        return _original(module, "norm")(module, hidden_states)
    x = _rows(hidden_states)  # (M, E)
    if _wants_grad(x, weight):
        y = _Norm.apply(ops, x, weight, eps)
    else:
        y, _ = ops.norm_forward(x, weight, eps)
    return y.view(hidden_states.shape)


def _rope_fits(q, k, cos, sin, unsqueeze_dim) -> bool:
    if unsqueeze_dim != 1 or not _cpu_float(q, k, cos, sin):
        return False
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or sin.shape != cos.shape:
        return False
    if cos.requires_grad or sin.requires_grad or q.size(0) != k.size(0) or q.size(2) != k.size(2):
        return False
    B, L, D = q.size(0), q.size(2), q.size(3)
    return (
        D % 2 == 0
        and k.size(3) == D
        and cos.size(0) in (1, B)
        and tuple(cos.shape[1:]) == (L, D)  # the whole head width rotated
    )


def rotary(q, k, cos, sin, unsqueeze_dim: int = 1, _name: str = ""):
    """apply_rotary_pos_emb: the kernel where it fits, else transformers' own."""
    ops = _ops() if _rope_fits(q, k, cos, sin, unsqueeze_dim) else None
    if ops is None:
        return _state["rotary"][_name](q, k, cos, sin, unsqueeze_dim)
    cos, sin = (t if t.stride(-1) == 1 else t.contiguous() for t in (cos, sin))
    out = []
    for x in (q, k):
        x = x if x.stride(-1) == 1 else x.contiguous()
        if _wants_grad(x):
            out.append(_Rope.apply(ops, x, cos, sin))
        else:
            out.append(ops.rope_forward(x, cos, sin))
    return out[0], out[1]


def _is_silu(act) -> bool:
    if type(act) is torch.nn.SiLU:
        return True
    try:
        from transformers.activations import SiLUActivation
    except ImportError:
        return False
    return type(act) is SiLUActivation


def mlp_forward(module, x: torch.Tensor) -> torch.Tensor:
    """MLP.forward (down(act(gate(x)) * up(x))): the gate's SiLU and product in the kernel where
    they fit, else transformers' own forward."""
    if not (_is_silu(module.act_fn) and _cpu_float(x)):
        return _original(module, "mlp")(module, x)
    g, u = module.gate_proj(x), module.up_proj(x)  # (..., F) each, in transformers' order
    ops = _ops() if _cpu_float(g, u) and g.shape == u.shape else None
    if ops is None:
        return module.down_proj(module.act_fn(g) * u)
    g2, u2 = _rows(g), _rows(u)  # (M, F)
    gated = _SwiGLU.apply(ops, g2, u2) if _wants_grad(g2, u2) else ops.swiglu_forward(g2, u2)
    return module.down_proj(gated.view(g.shape))


def _original(module, kind: str):
    """transformers' own forward of `module`'s class for `kind` ("norm" or "mlp")."""
    for cls in type(module).__mro__:
        found = _state.get(kind, {}).get(cls)
        if found is not None:
            return found
    return type(module).forward  # not one we replaced (a subclass's own forward)


def use_on_cpu() -> bool:
    """From now on transformers' Llama and Qwen2 norms, rotary embedding and SwiGLU gate run in
    the kernels where they fit (once per process); False where none of those modules imports."""
    if is_on():
        return True
    norms, mlps, rotaries = {}, {}, {}
    for name, (norm_name, mlp_name) in MODULES.items():
        try:
            mod = importlib.import_module(name)
            norm_cls, mlp_cls = getattr(mod, norm_name), getattr(mod, mlp_name)
            rope_fn = mod.apply_rotary_pos_emb
        except (ImportError, AttributeError):
            continue
        norms[norm_cls], mlps[mlp_cls], rotaries[name] = norm_cls.forward, mlp_cls.forward, rope_fn
    if not norms:
        return False
    _state.update(norm=norms, mlp=mlps, rotary=rotaries)
    for cls in norms:
        cls.forward = norm_forward
    for cls in mlps:
        cls.forward = mlp_forward
    for name in rotaries:
        importlib.import_module(name).apply_rotary_pos_emb = _rotary_for(name)
    return True


def _rotary_for(name: str):
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        return rotary(q, k, cos, sin, unsqueeze_dim, _name=name)

    return apply_rotary_pos_emb


def is_on() -> bool:
    """Whether `use_on_cpu()` has taken effect (and not been restored)."""
    return "norm" in _state


def restore() -> None:
    """transformers' own functions again (tests, benchmarks)."""
    for cls, forward in _state.pop("norm", {}).items():
        cls.forward = forward
    for cls, forward in _state.pop("mlp", {}).items():
        cls.forward = forward
    for name, fn in _state.pop("rotary", {}).items():
        importlib.import_module(name).apply_rotary_pos_emb = fn
