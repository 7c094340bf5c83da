"""Drawing the next token of every row, fast at a 150k-token vocabulary: `draw` and `nucleus`.

On the CPU at a real vocabulary `torch.multinomial` costs more per decode step than the output
layer's product, and the full sort behind top-p more again (bench/README.md, `realistic.py`);
neither needs the whole vocabulary in order. `draw` inverts the cumulative distribution in two
levels: the mass of each block of BLOCK tokens and their float64 cumulative sum pick a block,
a float64 cumulative sum inside that block picks the token; every token's probability is kept
to ~1 % of itself. `nucleus` finds the top-p set among the K most likely tokens (`torch.topk`),
widening K only for rows whose top K do not reach top_p (a near-uniform row: the full sort).
Tokens masked to -inf are never drawn; a row whose probabilities are not finite (a diverged
model) raises a UserError that says so instead of torch's bare message. CUDA keeps
`torch.multinomial` (sampler.py decides) and top-p one sort (`_sorted_nucleus`). On a CPU with
the fused kernels built, a vocabulary of one block (the demo's) is drawn in one call of
native_draw.cpp: the same arithmetic, the same tokens, about twenty torch calls fewer a
token (the quick benchmark's sampling: 12 → 4 ms a step of 64 tokens, bench/README.md).

Try it: tests/engine/ops/test_draw.py.
"""

from __future__ import annotations

import torch

from grpo_desktop.engine.errors import UserError

BLOCK = 1024  # tokens per block of the first level
FIRST_K = 256  # candidates `nucleus` tries first (×8 per widening)


class DivergedError(UserError):
    """The model's next-token probabilities are NaN or infinite."""


DIVERGED = (
    "The model's next-token probabilities are not finite numbers (NaN or infinity), so no token "
    "can be sampled: training has diverged. Lower the learning rate (or raise the KL weight β) "
    "and resume from an earlier checkpoint, or start again."
)


def draw(
    probs: torch.Tensor,
    generator: torch.Generator | None = None,
    rows: tuple[torch.Tensor, int] | None = None,
) -> torch.Tensor:
    """One index per row (N,) drawn with probability probs[i, j] / probs[i].sum() from
    non-negative probs (N, V); the rows need not sum to 1. `rows` (indices (N,), M): these are
    those rows of a batch of M, and each gets the random number it would have got in the whole
    batch, so a sampler that dropped its finished rows draws the same tokens for the others."""
    ops = _kernels_for(probs)
    if ops is not None:  # this arithmetic for a vocabulary of one block, in one call
        tokens = ops.draw_block(probs, _uniforms(probs, generator, rows))  # (N,) -1: not finite
        if tokens.numel() and int(tokens.min()) < 0:
            raise DivergedError(DIVERGED)
        return tokens
    mass, cdf = _blocks(probs)
    total = cdf[:, -1:]  # (N, 1)
    if not bool((torch.isfinite(total) & (total > 0)).all()):
        raise DivergedError(DIVERGED)
    u = _uniforms(probs, generator, rows)  # (N, 1)
    if probs.size(1) <= BLOCK:
        return _invert_one_block(probs, mass, u)
    return _invert(probs, mass, cdf, u)


def _uniforms(probs, generator, rows) -> torch.Tensor:
    """One float64 number in [0, 1) per row of probs (N, 1): of the whole batch's M when `rows`
    says these are some of its rows, each kept row the one it would have had."""
    N = probs.size(0) if rows is None else rows[1]
    u = torch.rand(N, 1, dtype=torch.float64, device=probs.device, generator=generator)  # (N, 1)
    return u if rows is None else u.index_select(0, rows[0])  # (K, 1) the kept rows' numbers


def _kernels_for(probs: torch.Tensor):
    """The fused kernels (native_draw.cpp's `draw_block`: `_invert_one_block`'s arithmetic, the
    same tokens, about twenty torch calls fewer a token) for float32 CPU probabilities of one
    block whose rows are contiguous, where they are built; else None."""
    if probs.size(1) > BLOCK or probs.device.type != "cpu" or probs.dtype != torch.float32:
        return None
    if probs.stride(1) != 1:
        return None
    from grpo_desktop.engine.ops import native

    return native.decode_ops()


def _invert_one_block(probs, mass, u) -> torch.Tensor:
    """`_invert` for a vocabulary of one block (the demo's 107 tokens): the same arithmetic
    without the first level's search, gathers and masks (which pick block 0 here), so the same
    token for the same u in about half the operations."""
    u = torch.minimum(u * mass, torch.nextafter(mass, torch.zeros_like(mass)))  # (N, 1)
    frac = (u - 0.0) / mass  # (N, 1) as `_invert` computes it for block 0
    inner = probs.double().cumsum(dim=-1)  # (N, V)
    last = inner[:, -1:]  # (N, 1)
    r = torch.minimum(frac * last, torch.nextafter(last, torch.zeros_like(last)))  # (N, 1)
    return torch.searchsorted(inner, r, right=True).squeeze(1)  # (N,)


def _blocks(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each block's mass (N, nb) and their cumulative sums (N, nb), in float64. Two levels because
    one float64 cumulative sum over the whole vocabulary is slow, and a float32 one rounds each
    partial sum near 1 by up to 3e-8, 30 % of the probability of a 1e-7 token; a float32 sum of
    one block's 1,024 values is accurate to ~1e-7 of the block."""
    N, V = probs.shape
    full = V // BLOCK
    parts = []
    if full:
        parts.append(probs[:, : full * BLOCK].reshape(N, full, BLOCK).sum(-1))  # (N, full)
    if V % BLOCK:
        parts.append(probs[:, full * BLOCK :].sum(-1, keepdim=True))  # (N, 1) the short last block
    mass = torch.cat(parts, dim=1).double() if len(parts) > 1 else parts[0].double()  # (N, nb)
    return mass, mass.cumsum(dim=-1)


def _invert(probs, mass, cdf, u) -> torch.Tensor:
    """The token (N,) where u (N, 1) in [0, 1), a share of each row's total, falls in its
    cumulative distribution: the block from `cdf` (N, nb), then the token inside it."""
    V = probs.size(1)
    width = min(BLOCK, V)
    total = cdf[:, -1:]  # (N, 1)
    u = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))  # [0, total)
    block = torch.searchsorted(cdf, u, right=True)  # (N, 1) first block whose cdf exceeds u
    before = torch.where(block > 0, cdf.gather(1, (block - 1).clamp(min=0)), 0.0)  # (N, 1)
    frac = (u - before) / mass.gather(1, block)  # (N, 1) in [0, 1): where u falls in the block
    cols = block * BLOCK + torch.arange(width, device=probs.device)  # (N, width)
    inside = probs.gather(1, cols.clamp(max=V - 1)).double() * (cols < V)  # (N, width)
    inner = inside.cumsum(dim=-1)  # (N, width)
    last = inner[:, -1:]  # (N, 1)
    r = torch.minimum(frac * last, torch.nextafter(last, torch.zeros_like(last)))  # (N, 1)
    pos = torch.searchsorted(inner, r, right=True)  # (N, 1) first token whose cdf exceeds r
    return (block * BLOCK + pos).squeeze(1)  # (N,)


def nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """logits (N, V) with every token outside the row's top-p set masked to -inf: the smallest
    set of most likely tokens whose probability reaches top_p (always at least one)."""
    N, V = logits.shape
    if top_p >= 1.0:
        return logits  # everything (a float32 cumulative sum may reach 1 before the last token)
    if logits.device.type == "cuda":
        # One GPU sort: the widening loop's row selection would wait for the GPU at every token.
        return _sorted_nucleus(logits, top_p)
    probs = torch.softmax(logits.float(), dim=-1)  # (N, V)
    keep = torch.zeros(N, V, dtype=torch.bool, device=logits.device)  # (N, V)
    rows = torch.arange(N, device=logits.device)  # rows whose set is not yet found
    k = min(FIRST_K, V)
    while rows.numel():
        if k >= V:
            vals, order = torch.sort(probs[rows], dim=-1, descending=True)  # (n, V)
        else:
            vals, order = torch.topk(probs[rows], k, dim=-1)  # (n, k) most likely first
        before = vals.cumsum(dim=-1) - vals  # (n, k) mass of strictly more likely tokens
        found = (before[:, -1] + vals[:, -1] >= top_p) | (k >= V)  # (n,) the top k reach top_p
        chosen = rows[found]
        keep[chosen] = keep[chosen].scatter(-1, order[found], before[found] < top_p)
        rows = rows[~found]
        k = min(V, k * 8)
    return logits.masked_fill(~keep, float("-inf"))


def _sorted_nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """`nucleus` by sorting the whole vocabulary (no host synchronisation: CUDA)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (N, V)
    probs = torch.softmax(sorted_logits.float(), dim=-1)  # (N, V)
    before = probs.cumsum(dim=-1) - probs  # (N, V) mass of strictly more likely tokens
    remove = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before >= top_p)
    return logits.masked_fill(remove, float("-inf"))
