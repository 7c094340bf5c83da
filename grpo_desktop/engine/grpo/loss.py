"""GRPO math: group-relative advantages, the clipped policy loss with optional KL, and two helpers.

`compute_advantages` turns a batch of rewards into advantages; `policy_loss` turns per-token
log-probs (N rows, C completion tokens) plus advantages into one scalar loss, as docs/grpo.md
writes them and as TRL's `GRPOTrainer._compute_loss` computes them for the loss types grpo, bnpo,
dr_grpo and dapo at token or sequence (GSPO) level. The KL term is plain k3, not TRL's default
importance-weighted variant. `signal_probability` and `advantage_histogram` feed the app's
explanations and plots. Not here: models, log-probs, gradient accumulation (step.py weights each
micro-batch's loss; dapo is already normalised by the whole step's token count).

Try it:
    >>> import torch
    >>> A, _ = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), G=4)
    >>> [round(a, 3) for a in A.tolist()]
    [1.732, -0.577, -0.577, -0.577]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

SCALES = ("group", "batch", "none")
STD_TYPES = ("population", "sample")
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
LEVELS = ("token", "sequence")


@dataclass
class LossOutput:
    """The scalar loss to backpropagate, and plain-float metrics (TRL's names) for the events."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def _nan_std(x: torch.Tensor, dim: int, sample: bool) -> torch.Tensor:
    """Std along `dim` ignoring NaN, keepdim; 0 where fewer than two values are present."""
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)  # (..., 1)
    mean = torch.nanmean(x, dim=dim, keepdim=True)  # (..., 1), NaN where count == 0
    sq_dev = torch.nansum((x - mean) ** 2, dim=dim, keepdim=True)  # (..., 1)
    denom = (count - 1 if sample else count).clamp(min=1).to(x.dtype)  # (..., 1)
    std = torch.sqrt(sq_dev / denom)  # (..., 1)
    return torch.where(count >= 2, std, torch.zeros_like(std))


def compute_advantages(
    rewards: torch.Tensor,
    G: int,
    scale: str = "group",
    std_type: str = "population",
    eps: float = 1e-4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantages of B*G rewards grouped contiguously (one prompt's G rows in a run).

    scale="group": A = (r - mean_g) / (std_g + eps); "batch": mean per group, std over every scored
    reward of the batch; "none": A = r - mean_g. Statistics are taken in float64, and a group whose
    scored rewards are all equal gets advantages of exactly 0 (and std 0). std_type "population"
    divides by n (DeepSeekMath), "sample" by n - 1 (TRL). NaN rewards ("no score") are left out of
    the mean and std and get advantage 0; a group with fewer than two scored rows has std 0 (so its
    advantages are 0). Returns (advantages (N,), group_std (B,)); group_std is the per-group std of `std_type`
    whatever `scale` is, for the `reward_std` and `frac_reward_zero_std` metrics.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if std_type not in STD_TYPES:
        raise ValueError(f"std_type must be one of {STD_TYPES}, got {std_type!r}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (B*G,), got shape {tuple(rewards.shape)}")
    if G < 1 or rewards.numel() % G != 0:
        raise ValueError(f"{rewards.numel()} rewards cannot be split into groups of G={G}")
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    # Group statistics in float64: a real spread on a large reward (1e6 + 0.1 against 1e6 + 0.2)
    # survives, and rounding noise stays far below what _has_spread counts as a spread (in
    # float32 a group of 1.2s has a mean off in the last bit, about ±1e-3 after dividing by
    # std + eps: a small systematic push).
    sample = std_type == "sample"
    grouped = rewards.to(torch.float64).view(-1, G)  # (B, G)
    spread = _has_spread(grouped)  # (B, 1) bool
    mean_g = torch.nanmean(grouped, dim=1, keepdim=True)  # (B, 1)
    group_std = _nan_std(grouped, dim=1, sample=sample)  # (B, 1)
    group_std = torch.where(spread, group_std, torch.zeros_like(group_std))  # (B, 1)
    centered = torch.where(spread, grouped - mean_g, torch.zeros_like(grouped))  # (B, G)
    if scale == "group":
        advantages = centered / (group_std + eps)  # (B, G)
    elif scale == "batch":
        batch_std = _nan_std(grouped.reshape(-1), dim=0, sample=sample)  # (1,)
        advantages = centered / (batch_std + eps)  # (B, G)
    else:
        advantages = centered  # (B, G)
    advantages = torch.nan_to_num(advantages, nan=0.0)  # (B, G) unscored rows carry no signal
    return advantages.reshape(-1).to(out_dtype), group_std.squeeze(1).to(out_dtype)


def _has_spread(grouped: torch.Tensor, rel: float = 1e-12) -> torch.Tensor:
    """Whether each group's scored rewards differ by more than float64 rounding: (B, 1) bool.

    Exact zero advantages for groups without spread (all 1.2, or 0.1 + 0.2 computed two ways)
    need this test: their float mean differs from the values in the last bit.
    """
    lo = torch.nan_to_num(grouped, nan=math.inf).min(dim=1, keepdim=True).values  # (B, 1)
    hi = torch.nan_to_num(grouped, nan=-math.inf).max(dim=1, keepdim=True).values  # (B, 1)
    scale = torch.maximum(lo.abs(), hi.abs())  # (B, 1), inf when nothing was scored
    return torch.isfinite(hi - lo) & (hi - lo > rel * scale)  # (B, 1)


def group_has_spread(rewards: torch.Tensor, G: int) -> torch.Tensor:
    """Per group of G contiguous rewards, whether they differ (NaN = no score, ignored): (B,)."""
    return _has_spread(rewards.to(torch.float64).view(-1, G)).squeeze(1)


def policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor | None,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "grpo",
    level: str = "token",
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
) -> LossOutput:
    """Clipped GRPO surrogate loss (+ beta * k3) of one micro-batch, aggregated as `loss_type` says.

    logps (N, C) current-policy log-probs of the sampled tokens (with grad); old_logps (N, C) or
    None (= logps.detach(), ratio 1); ref_logps (N, C), needed when beta > 0; advantages (N,);
    mask (N, C), 1 on real completion tokens. level="sequence" (GSPO) uses one ratio per sequence,
    exp of the masked mean log-ratio, kept differentiable as TRL does. Aggregation: grpo = mean over
    sequences of each sequence's token mean; bnpo = token mean of the micro-batch; dr_grpo =
    sum / (N * max_completion_length, default C); dapo = sum / num_items_in_batch (completion tokens
    of the whole generation batch, default mask.sum()). Metrics follow TRL: "clip_ratio/low_mean",
    "clip_ratio/high_mean", "clip_ratio/region_mean" (token fractions, or sequence fractions at
    sequence level) and "kl" (masked mean k3) when beta > 0; one host sync, at the end.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if beta < 0:
        raise ValueError(f"beta (KL coefficient) must be >= 0, got {beta}")
    if beta > 0 and ref_logps is None:
        raise ValueError(
            "beta > 0 needs ref_logps (the reference policy's log-probs); pass them or set beta = 0"
        )
    if logps.dim() != 2 or mask.shape != logps.shape:
        raise ValueError(
            f"logps and mask must both be (N, T); got {tuple(logps.shape)} and {tuple(mask.shape)}"
        )
    for name, other in (("old_logps", old_logps), ("ref_logps", ref_logps)):
        if other is not None and other.shape != logps.shape:
            raise ValueError(
                f"{name} shape {tuple(other.shape)} != logps shape {tuple(logps.shape)}"
            )
    if advantages.shape != logps.shape[:1]:
        raise ValueError(
            f"advantages must be (N,) = ({logps.shape[0]},), got {tuple(advantages.shape)}"
        )

    eps_high = epsilon_low if epsilon_high is None else epsilon_high
    mask = mask.to(logps.dtype)  # (N, C)
    if old_logps is None:
        old_logps = logps.detach()  # (N, C)
    adv = advantages.to(logps.dtype).unsqueeze(1)  # (N, 1)
    log_ratio = logps - old_logps  # (N, C)
    if level == "token":
        log_w = log_ratio  # (N, C)
    else:
        seq_len = mask.sum(dim=1, keepdim=True).clamp(min=1.0)  # (N, 1)
        log_w = (log_ratio * mask).sum(dim=1, keepdim=True) / seq_len  # (N, 1)
    w = torch.exp(log_w)  # (N, C) or (N, 1)
    w_clipped = torch.clamp(w, 1.0 - epsilon_low, 1.0 + eps_high)  # (N, C) or (N, 1)
    per_token = -torch.min(w * adv, w_clipped * adv)  # (N, C) or (N, 1)
    k3 = None
    if beta > 0:
        ref_diff = ref_logps - logps  # (N, C)
        k3 = torch.exp(ref_diff) - ref_diff - 1.0  # (N, C)
        per_token = per_token + beta * k3  # (N, C)
    masked = per_token * mask  # (N, C)

    N, C = mask.shape
    if loss_type == "grpo":
        loss = (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = masked.sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        length = C if max_completion_length is None else max_completion_length
        loss = masked.sum() / (N * length)
    else:
        n_items = mask.sum() if num_items_in_batch is None else num_items_in_batch
        n_items = torch.as_tensor(n_items, dtype=logps.dtype, device=logps.device)
        loss = masked.sum() / n_items.clamp(min=1.0)

    with torch.no_grad():
        low = (w < 1.0 - epsilon_low) & (adv < 0)  # (N, C) or (N, 1)
        high = (w > 1.0 + eps_high) & (adv > 0)  # (N, C) or (N, 1)
        flags = torch.stack([low, high, low | high]).to(logps.dtype)  # (3, N, C) or (3, N, 1)
        if level == "token":
            clip = (flags * mask).sum(dim=(1, 2)) / mask.sum().clamp(min=1.0)  # (3,)
        else:
            clip = flags.sum(dim=(1, 2)) / max(N, 1)  # (3,)
        stats = [clip]
        if k3 is not None:
            stats.append(((k3 * mask).sum() / mask.sum().clamp(min=1.0)).reshape(1))  # (1,)
        values = torch.cat(stats).tolist()  # the single host sync
    metrics = {
        "clip_ratio/low_mean": values[0],
        "clip_ratio/high_mean": values[1],
        "clip_ratio/region_mean": values[2],
    }
    if k3 is not None:
        metrics["kl"] = values[3]
    return LossOutput(loss=loss, metrics=metrics)


def signal_probability(p: float, G: int) -> float:
    """Chance that a group of G answers, each right with chance p, holds a right and a wrong one.

    Only such groups have non-zero advantages: 1 - p**G - (1 - p)**G.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    if G < 1:
        raise ValueError(f"group size G must be >= 1, got {G}")
    return 1.0 - p**G - (1.0 - p) ** G


def advantage_histogram(
    advantages: list[float] | torch.Tensor, bins: int = 21, limit: float | None = None
) -> dict:
    """Histogram of advantages on a range symmetric around 0, as JSON-safe lists.

    The range is ±limit, or ±max(|A|, 1e-6) when limit is None; values beyond a given limit are
    counted in the outermost bins, so the counts always sum to the number of finite values.
    NaN (and ±inf) values are ignored. Returns {"edges": bins + 1 floats, "counts": bins ints}.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    if limit is not None and not limit > 0:
        raise ValueError(f"limit must be > 0, got {limit}")
    values = torch.as_tensor(advantages, dtype=torch.float64).detach().cpu().flatten()  # (M,)
    values = values[torch.isfinite(values)]  # (M',)
    if limit is None:
        limit = max(values.abs().max().item() if values.numel() else 0.0, 1e-6)
    limit = float(limit)
    edges = [limit * (2 * i - bins) / bins for i in range(bins + 1)]
    index = torch.floor((values + limit) / (2 * limit) * bins).long().clamp(0, bins - 1)  # (M',)
    counts = torch.bincount(index, minlength=bins)  # (bins,)
    return {"edges": edges, "counts": [int(c) for c in counts.tolist()]}
