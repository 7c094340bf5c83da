"""Log-probs of chosen tokens from final hidden states, never holding more than one chunk of logits.

A GRPO loss needs, per completion token, log softmax(h·Wᵀ / T)[token]: the whole vocabulary's
logits for one number. Kept for the backward pass, those logits (74 MiB per 128-token row at
Qwen's 151,936 tokens) outweigh the rest of the model's activations. `head_logps` computes them
a chunk of tokens at a time and keeps, per token, what the backward needs instead: the gradient
of its log-prob with respect to its hidden state, (W[t] − pᵀW) / T, which does not depend on
the loss; and for a trained output weight the hidden state and log-sum-exp, from which the
backward recomputes the chunk's logits. With LoRA (the output layer frozen) nothing is
recomputed; full fine-tuning pays one product more. A plain `nn.Linear` head goes through
`_LinearLogSoftmax`; any other (LoRA on lm_head, a quantized layer) runs each chunk under
activation checkpointing. Entropy (a metric) comes from the same logits. Does not run the
decoder (sampling/logps.py) or handle logits changed after the output layer (soft-capping,
scaling): logps.py sends those models elsewhere. Try it: tests/engine/ops/test_fused_logps.py.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from grpo_desktop.engine.ops.bf16_products import active as bf16_active
from grpo_desktop.engine.ops.bf16_products import bf16_products
from grpo_desktop.engine.ops.kernels import fast_linear

CHUNK_ELEMENTS = 2**24  # logits per chunk: 64 MiB in float32 (110 tokens at V = 151,936)


def chunk_tokens(vocab: int, elements: int = CHUNK_ELEMENTS) -> int:
    """Tokens per chunk so that one chunk holds about `elements` logits."""
    return max(1, elements // max(1, vocab))


def routing(device: torch.device) -> contextlib.AbstractContextManager:
    """fast_linear() for CPU work, nothing for other devices (its mode costs host time there)."""
    return fast_linear() if device.type == "cpu" else contextlib.nullcontext()


def head_logps(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(head(hidden) / temperature)[targets] per token (M,) float32, and the entropy
    of that distribution (M,) without gradient when asked. hidden (M, H), targets (M,) long."""
    vocab = _out_features(head)
    chunk = chunk or chunk_tokens(vocab)
    if type(head) is torch.nn.Linear and type(head.weight) in (torch.Tensor, torch.nn.Parameter):
        logps, entropy = _LinearLogSoftmax.apply(
            hidden, head.weight, head.bias, targets, float(temperature), chunk, with_entropy,
            torch.is_grad_enabled(),
        )  # fmt: skip
        return logps, entropy if with_entropy else None
    return _module_logps(head, hidden, targets, float(temperature), chunk, with_entropy)


def _out_features(head) -> int:
    for name in ("out_features", "num_embeddings"):
        if isinstance(getattr(head, name, None), int):
            return getattr(head, name)
    weight = getattr(head, "weight", None)
    return int(weight.shape[0]) if weight is not None and weight.dim() == 2 else 32000


def _scaled_logits(x, weight, bias, temperature) -> torch.Tensor:
    """(m, V) float32 logits / temperature, as a fresh tensor the caller may overwrite."""
    z = F.linear(x, weight, bias)  # (m, V) in the weight's (or autocast's) dtype
    z = z.float() if z.dtype != torch.float32 else z
    return z.div_(temperature) if temperature != 1.0 else z


def sampling_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy (N,) of softmax(logits / temperature) for float32 logits (N, V), left unchanged:
    the same arithmetic as the log-prob passes' entropy (`_entropy_`), for the sampler."""
    z = logits / temperature if temperature != 1.0 else logits.clone()  # (N, V)
    return _entropy_(z, torch.logsumexp(z, dim=1))  # (N,)


def probs_entropy(probs: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """−Σ p log p (N,) of probabilities (N, V), written into `out` (N,): the sampler's entropy,
    from the draw's own softmax. On the CPU torch's `special.entr` computes a log per element
    without vectorising it (32 rows × 49,152 tokens, SmolLM2's vocabulary: 3.5 ms on two cores,
    about 3 % of a decode step); clamping, an in-place log and product and the sum take 0.86 ms,
    equal to float rounding (bench/README.md, session 23). A probability of 0 counts 0: it is
    clamped to the smallest normal float first, whose log is finite."""
    if probs.device.type != "cpu":
        return torch.sum(torch.special.entr(probs), dim=-1, out=out)
    plogp = probs.clamp_min(torch.finfo(probs.dtype).tiny)  # (N, V)
    plogp.log_().mul_(probs)  # (N, V) p log p
    return torch.sum(plogp, dim=-1, out=out).neg_()  # (N,)


def _entropy_(z: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Entropy (m,) of softmax(z); overwrites z (m, V) with the log-probs."""
    z.sub_(lse.unsqueeze(1))  # (m, V) log-probs
    return -(z.exp().mul_(z)).sum(dim=1)  # (m,)


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype | None]:
    try:
        if torch.is_autocast_enabled(device_type):
            return True, torch.get_autocast_dtype(device_type)
    except (TypeError, RuntimeError, AttributeError):  # a torch without per-device queries
        pass
    return False, None


class _LinearLogSoftmax(torch.autograd.Function):
    """(hidden (M, H), weight (V, H), bias (V,) | None, targets (M,)) → (logps (M,), entropy (M,)
    or (0,)). Keeps no logits: for the hidden states' gradient d logp / dh (M, H), computed in the
    forward; for the weight's and bias's, the hidden states and each token's log-sum-exp (M,)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk, with_entropy, grad_on):
        need_x, need_w, need_b = (need and grad_on for need in ctx.needs_input_grad[:3])
        M = hidden.size(0)
        logps = torch.empty(M, dtype=torch.float32, device=hidden.device)  # (M,)
        lse = torch.empty(M, dtype=torch.float32, device=hidden.device)  # (M,)
        entropy = torch.empty(M if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        dlogp = torch.empty_like(hidden) if need_x else None  # (M, H)
        with routing(hidden.device):
            for s in range(0, M, chunk):
                e = min(M, s + chunk)
                z = _scaled_logits(hidden[s:e], weight, bias, temperature)  # (m, V)
                lse[s:e] = torch.logsumexp(z, dim=1)
                logps[s:e] = z.gather(1, targets[s:e].unsqueeze(1)).squeeze(1) - lse[s:e]
                if not (with_entropy or need_x):
                    continue
                z.sub_(lse[s:e].unsqueeze(1))  # (m, V) log-probs
                p = z.exp()  # (m, V) probabilities
                if with_entropy:  # −Σ p log p, as m dot products (no third (m, V) buffer)
                    entropy[s:e] = -torch.bmm(p.unsqueeze(1), z.unsqueeze(2)).view(-1)
                if need_x:  # d logp[t] / dh = (W[t] − Σ_v p_v W[v]) / T: needs no upstream grad
                    expected = F.linear(p.to(weight.dtype), weight.t())  # (m, V)·(V, H) → (m, H)
                    own = F.embedding(targets[s:e], weight)  # (m, H): W[t]
                    dlogp[s:e] = (own.float() - expected.float()).div_(temperature)
                del z, p
        if need_w or need_b:
            ctx.save_for_backward(dlogp, hidden, weight, bias, targets, lse)
        else:
            ctx.save_for_backward(dlogp)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.autocast = _autocast_state(hidden.device.type)
        ctx.bf16 = bf16_active()  # the products' precision, for the backward's recomputation
        ctx.mark_non_differentiable(entropy)
        return logps, entropy

    @staticmethod
    def backward(ctx, grad_logps, _grad_entropy):
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        saved = ctx.saved_tensors
        g = grad_logps.float()  # (M,)
        dx = (saved[0] * g.unsqueeze(1)).to(saved[0].dtype) if need_x else None  # (M, H)
        if not (need_w or need_b):
            return dx, None, None, None, None, None, None, None
        _, hidden, weight, bias, targets, lse = saved
        M, T = hidden.size(0), ctx.temperature
        dw = db = None
        enabled, dtype = ctx.autocast
        autocast = (
            torch.autocast(hidden.device.type, dtype=dtype) if enabled else contextlib.nullcontext()
        )
        products = bf16_products() if ctx.bf16 else contextlib.nullcontext()
        with products, routing(hidden.device), autocast:
            for s in range(0, M, ctx.chunk):
                e = min(M, s + ctx.chunk)
                x = hidden[s:e]  # (m, H)
                z = _scaled_logits(x, weight, bias, T)  # (m, V), recomputed
                # d logp[t] / dz = onehot(t) − softmax(z); times g, and 1/T for z = logits / T.
                grad = z.sub_(lse[s:e].unsqueeze(1)).exp_().mul_(-g[s:e].unsqueeze(1))  # (m, V)
                grad.scatter_add_(1, targets[s:e].unsqueeze(1), g[s:e].unsqueeze(1))
                if T != 1.0:
                    grad.div_(T)
                grad = grad.to(weight.dtype)
                if need_w:
                    part = F.linear(grad.t(), x.t())  # (V, m)·(m, H) → (V, H)
                    dw = part.float() if dw is None else dw.add_(part)
                if need_b:
                    part = grad.sum(0).float()  # (V,)
                    db = part if db is None else db.add_(part)
                del z, grad
        if dw is not None:
            dw = dw.to(weight.dtype)
        if db is not None:
            db = db.to(bias.dtype)
        return dx, dw, db, None, None, None, None, None


def _chunk_logps(head, x, targets, temperature, with_entropy):
    """(m,) log-probs of one chunk through any module, and its entropy (m,) or (0,) (no
    gradient); the chunk's logits die when this returns."""
    z = head(x).float() / temperature  # (m, V)
    lse = torch.logsumexp(z, dim=1)  # (m,)
    logps = z.gather(1, targets.unsqueeze(1)).squeeze(1) - lse
    with torch.no_grad():
        entropy = _entropy_(z.detach().clone(), lse.detach()) if with_entropy else z.new_zeros(0)
    return logps, entropy


def _module_logps(head, hidden, targets, temperature, chunk, with_entropy):
    """The same for an output module that is not a plain nn.Linear: each chunk checkpointed
    (recomputed in the backward under the routing its forward had; the RNG state is kept, so
    LoRA dropout draws the same mask)."""
    grad = torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in head.parameters())
    )

    def contexts():  # the forward already runs inside routing(); the recomputation enters it
        return contextlib.nullcontext(), routing(hidden.device)

    logps, entropies = [], []
    with routing(hidden.device):
        for s in range(0, hidden.size(0), chunk):
            x, t = hidden[s : s + chunk], targets[s : s + chunk]  # (m, H), (m,)
            args = (head, x, t, temperature, with_entropy)
            if grad:
                lp, ent = checkpoint(_chunk_logps, *args, use_reentrant=False, context_fn=contexts)
            else:
                lp, ent = _chunk_logps(*args)
            logps.append(lp)
            entropies.append(ent)
    if not logps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty if with_entropy else None
    return torch.cat(logps), torch.cat(entropies) if with_entropy else None
