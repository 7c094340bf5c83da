"""One GRPO step: sample B·G completions, score them, compute advantages, update the policy.

`sample_groups` generates and scores groups for a list of examples; `grpo_step` adds dynamic
sampling, the old/reference log-prob passes, the micro-batched loss with gradient accumulation and
the optimizer step, and returns the rollout rows and TRL-named metrics of the step.

Does not loop over steps, evaluate or checkpoint (trainer.py does). Time spent per phase is
returned in the metrics (`time/generate`, `time/rewards`, `time/ref` for old and reference
log-probs, `time/update` for the policy forward/backward, `time/optimizer`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.data.dataset import Example, build_prompt
from grpo_desktop.engine.estimate.micro_batch import RowsPerPass, halving_on_oom
from grpo_desktop.engine.grpo.loss import compute_advantages, group_has_spread, policy_loss
from grpo_desktop.engine.rewards.functions import RewardBatch, RewardSet
from grpo_desktop.engine.sampling.rollout import (
    Completions,
    generate_completions,
    token_logps,
    tokenize_prompts,
)


@dataclass
class Groups:
    """Completions of several prompts, G per prompt, contiguous per group."""

    examples: list[Example]
    completions: Completions
    rewards: RewardBatch
    totals: torch.Tensor  # (N,) weighted reward, NaN where nothing could score
    timings: dict = field(default_factory=dict)


@dataclass
class StepOutput:
    rows: list[dict]
    metrics: dict[str, float]
    advantages: list[float]  # of the scored rows only (unscored rows carry no advantage)
    prompts: list[str] = field(default_factory=list)  # each group's prompt, once
    notes: list[str] = field(default_factory=list)  # for the run's log (a halved micro-batch)


def sample_groups(policy, examples: list[Example], cfg: TrainConfig, rewards: RewardSet) -> Groups:
    a = cfg.algorithm
    G = a.num_generations
    texts = [build_prompt(policy.tokenizer, ex.problem, cfg.data.system_prompt) for ex in examples]
    prompt_ids, prompt_mask = tokenize_prompts(
        policy.tokenizer, texts, cfg.data.max_prompt_length, policy.device
    )  # (B, P)
    t0 = time.perf_counter()
    comps = generate_completions(
        policy.model,
        policy.tokenizer,
        prompt_ids.repeat_interleave(G, dim=0),  # (B*G, P)
        prompt_mask.repeat_interleave(G, dim=0),
        max_new_tokens=a.max_completion_length,
        temperature=a.temperature,
        top_p=a.top_p,
        min_new_tokens=a.min_completion_length,
    )
    t1 = time.perf_counter()
    problems = [ex.problem for ex in examples for _ in range(G)]
    answers = [ex.answer for ex in examples for _ in range(G)]
    scored = rewards.score(problems, comps.texts, answers)
    totals = torch.tensor(
        [math.nan if v is None else float(v) for v in scored.totals], dtype=torch.float64
    )  # (N,) float64: a reward of 1e6 + 0.1 keeps its 0.1
    timings = {"time/generate": t1 - t0, "time/rewards": time.perf_counter() - t1}
    return Groups(examples, comps, scored, totals, timings)


def _pad_cat(tensors: list[torch.Tensor], value: float, left: bool) -> torch.Tensor:
    width = max(t.size(1) for t in tensors)
    out = []
    for t in tensors:
        pad = (width - t.size(1), 0) if left else (0, width - t.size(1))
        out.append(torch.nn.functional.pad(t, pad, value=value))
    return torch.cat(out)


def select_groups(parts: list[Groups], keep: list[torch.Tensor], G: int, pad_id: int) -> Groups:
    """Concatenate the kept groups of several sampling rounds into one Groups."""
    examples, idx_rows = [], []
    for part, kept in zip(parts, keep):
        for g in torch.nonzero(kept).flatten().tolist():
            examples.append(part.examples[g])
        rows = torch.nonzero(kept.repeat_interleave(G)).flatten()
        idx_rows.append(rows)

    def cat(attr, value, left):
        return _pad_cat(
            [getattr(p.completions, attr)[r] for p, r in zip(parts, idx_rows)], value, left
        )

    texts = [p.completions.texts[i] for p, r in zip(parts, idx_rows) for i in r.tolist()]
    comps = Completions(
        cat("prompt_ids", pad_id, True),
        cat("prompt_mask", 0, True),
        cat("completion_ids", pad_id, False),
        cat("completion_mask", 0, False),
        torch.cat([p.completions.truncated[r] for p, r in zip(parts, idx_rows)]),
        texts,
    )
    names = parts[0].rewards.names
    pick = [(p, r.tolist()) for p, r in zip(parts, idx_rows)]
    batch = RewardBatch(
        names=names,
        values={n: [p.rewards.values[n][i] for p, rr in pick for i in rr] for n in names},
        totals=[p.rewards.totals[i] for p, rr in pick for i in rr],
        errors=[p.rewards.errors[i] for p, rr in pick for i in rr],
        extracted=_pick(pick, "extracted"),
        reasons=_pick(pick, "reasons"),
    )
    totals = torch.cat([p.totals[r] for p, r in zip(parts, idx_rows)])
    timings = {k: sum(p.timings.get(k, 0.0) for p in parts) for k in parts[0].timings}
    return Groups(examples, comps, batch, totals, timings)


def _pick(pick: list, attr: str) -> list:
    """The kept rows' entries of an optional per-row RewardBatch list (empty when unset)."""
    if any(len(getattr(p.rewards, attr)) < len(p.rewards.totals) for p, _ in pick):
        return []
    return [getattr(p.rewards, attr)[i] for p, rr in pick for i in rr]


def _optimizer_update(policy, optimizer, scheduler, max_grad_norm: float, timings: dict) -> float:
    t0 = time.perf_counter()
    params = policy.trainable_parameters()
    limit = max_grad_norm if max_grad_norm > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(params, limit)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    grad_norm = float(grad_norm)  # a sync: the optimizer's work is done when this returns
    timings["time/optimizer"] = timings.get("time/optimizer", 0.0) + time.perf_counter() - t0
    return grad_norm


def _nan_stats(values: list) -> tuple[float, float]:
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return math.nan, math.nan
    mean = sum(xs) / len(xs)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def grpo_step(
    policy,
    optimizer,
    scheduler,
    groups: Groups,
    cfg: TrainConfig,
    rows_per_pass: RowsPerPass | None = None,
) -> StepOutput:
    """Advantages, loss and one optimizer update per iteration on already-sampled groups.

    `rows_per_pass` (the run's, so what an out-of-memory taught it lasts) decides how many
    completions each pass takes; by default the config's micro_batch_size, 0 meaning auto."""
    a = cfg.algorithm
    G = a.num_generations
    c = groups.completions
    N = c.completion_ids.size(0)
    advantages, group_std = compute_advantages(
        groups.totals, G, scale=a.scale_rewards, std_type=a.std_type
    )  # (N,), (B,)
    advantages = advantages.to(policy.device)
    mask = c.completion_mask  # (N, C)
    if a.mask_truncated_completions:
        mask = mask * (~c.truncated).float().unsqueeze(1)  # (N, C)
    timings = dict(groups.timings)
    notes: list[str] = []
    t0 = time.perf_counter()
    args = (c.prompt_ids, c.prompt_mask, c.completion_ids, c.completion_mask, a.temperature)
    rows_per_pass = rows_per_pass or RowsPerPass(a.micro_batch_size)
    mb = rows_per_pass.choose(policy, cfg, N, c.prompt_ids.size(1), c.completion_ids.size(1))
    (old_logps, ref_logps), mb = halving_on_oom(
        lambda mb: _old_and_ref_logps(policy, args, mb, a), mb, rows_per_pass, policy, notes
    )
    timings["time/ref"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    batch = _Batch(args, advantages, mask, old_logps, ref_logps)
    grad_norm = math.nan
    totals = {}
    policy.model.train()
    for iteration in range(a.num_iterations):
        result, mb = halving_on_oom(
            lambda mb, first=iteration == 0: _update_pass(policy, batch, mb, a, first),
            mb,
            rows_per_pass,
            policy,
            notes,
            drop_gradients=True,
        )
        if iteration == 0:
            totals = result
        grad_norm = _optimizer_update(policy, optimizer, scheduler, a.max_grad_norm, timings)
    loss_total, sums = totals["loss"], totals["sums"]
    entropy_sum, entropy_count = totals["entropy_sum"], totals["entropy_count"]
    # time/update is the policy forward and backward passes; time/optimizer the clip and step.
    timings["time/update"] = time.perf_counter() - t1 - timings["time/optimizer"]

    lengths = c.lengths.tolist()
    adv = advantages.tolist()
    rows = _rollout_rows(groups, adv, lengths)
    scored_adv = [row["advantage"] for row in rows if row["advantage"] is not None]
    metrics = _step_metrics(groups, group_std, lengths, G)
    metrics.update(sums)
    metrics.update(timings)
    metrics.update(
        {
            "loss": loss_total,
            "grad_norm": grad_norm,
            "entropy": entropy_sum / max(entropy_count, 1.0),
            "learning_rate": scheduler.get_last_lr()[0],
            "num_tokens": float(c.prompt_mask.sum() + c.completion_mask.sum()),
            "micro_batch_rows": float(mb),
        }
    )
    prompts = [shown_prompt(ex.problem) for ex in groups.examples]
    return StepOutput(rows, metrics, scored_adv, prompts, notes)


@dataclass
class _Batch:
    args: tuple  # prompt_ids, prompt_mask, completion_ids, completion_mask, temperature
    advantages: torch.Tensor  # (N,)
    mask: torch.Tensor  # (N, C) the loss's mask
    old_logps: torch.Tensor | None  # (N, C)
    ref_logps: torch.Tensor | None  # (N, C)


def _slices(n: int, mb: int) -> list[slice]:
    return [slice(s, s + mb) for s in range(0, n, mb)]


def _old_and_ref_logps(policy, args: tuple, mb: int, a):
    """Log-probs (N, C) under the policy before the update (more than one iteration) and under
    the reference (β > 0), each None when not needed; no gradients."""
    N = args[2].size(0)
    old_logps = ref_logps = None
    with torch.no_grad():
        if a.num_iterations > 1:
            old_logps = torch.cat(
                [token_logps(policy.model, *_rows(args, s))[0] for s in _slices(N, mb)]
            )
        if a.beta > 0:
            with policy.reference() as ref:
                ref_logps = torch.cat(
                    [token_logps(ref, *_rows(args, s))[0] for s in _slices(N, mb)]
                )
    return old_logps, ref_logps


def _update_pass(policy, batch: _Batch, mb: int, a, first: bool) -> dict:
    """One forward and backward over all rows, mb at a time, gradients accumulated; the loss,
    TRL's metrics and the entropy of the pass when `first`."""
    N = batch.args[2].size(0)
    slices = _slices(N, mb)
    sums: dict[str, float] = {}
    entropy_sum = entropy_count = loss_total = 0.0
    num_items = batch.mask.sum().clamp(min=1.0)
    for s in slices:
        logps, entropy = token_logps(policy.model, *_rows(batch.args, s), with_entropy=first)
        n_rows = logps.size(0)
        out = policy_loss(
            logps,
            None if batch.old_logps is None else batch.old_logps[s],
            None if batch.ref_logps is None else batch.ref_logps[s],
            batch.advantages[s],
            batch.mask[s],
            loss_type=a.loss_type,
            level=a.importance_sampling_level,
            epsilon_low=a.epsilon_low,
            epsilon_high=a.epsilon_high,
            beta=a.beta,
            max_completion_length=a.max_completion_length,
            num_items_in_batch=num_items,
        )
        # Per-micro-batch normalisation as in TRL with gradient accumulation: sequence means
        # (grpo, dr_grpo) are weighted by rows, bnpo by micro-batch count; dapo is global.
        weight = {"dapo": 1.0, "bnpo": 1.0 / len(slices)}.get(a.loss_type, n_rows / N)
        (out.loss * weight).backward()
        if first:
            loss_total += float(out.loss.detach()) * weight
            for k, v in out.metrics.items():
                sums[k] = sums.get(k, 0.0) + v * n_rows / N
            if entropy is not None:
                entropy_sum += float((entropy * batch.mask[s]).sum())
                entropy_count += float(batch.mask[s].sum())
    return {
        "loss": loss_total,
        "sums": sums,
        "entropy_sum": entropy_sum,
        "entropy_count": entropy_count,
    }


SHOWN_PROMPT_CHARS = 20_000


def shown_prompt(problem: str, limit: int = SHOWN_PROMPT_CHARS) -> str:
    """The prompt as stored with a step's rollouts: whole, or for a huge one its end (what the
    model saw: over-long prompts lose their beginning) after a note of what was left out."""
    if len(problem) <= limit:
        return problem
    return f"[… {len(problem) - limit:,} earlier characters not stored …]\n" + problem[-limit:]


def _rows(args: tuple, s: slice) -> tuple:
    return tuple(t[s] for t in args[:4]) + (args[4],)


def _rollout_rows(groups: Groups, adv: list[float], lengths: list[float]) -> list[dict]:
    G = len(adv) // max(1, len(groups.examples))
    r = groups.rewards
    n = len(groups.completions.texts)
    extracted = r.extracted if len(r.extracted) == n else [None] * n
    reasons = r.reasons if len(r.reasons) == n else [{}] * n
    rows = []
    for i, text in enumerate(groups.completions.texts):
        ex = groups.examples[i // G]
        unscored = r.totals[i] is None
        rows.append(
            {
                "group": i // G,  # the prompt is stored once per group (Rollouts.prompts)
                "completion": text,
                "answer": ex.answer,
                "rewards": {name: r.values[name][i] for name in r.names},
                "reward": r.totals[i],
                "advantage": None if unscored else adv[i],  # no score: no advantage, not 0
                "length": int(lengths[i]),
                "truncated": bool(groups.completions.truncated[i]),
                "error": r.errors[i],
                "extracted": extracted[i],
                "reasons": dict(reasons[i] or {}),
            }
        )
    return rows


def _step_metrics(groups: Groups, group_std: torch.Tensor, lengths: list[float], G: int) -> dict:
    r = groups.rewards
    mean, _ = _nan_stats(r.totals)
    metrics = {
        "reward": mean,
        "reward_std": float(torch.nan_to_num(group_std).mean()),
        "frac_reward_zero_std": float((~group_has_spread(groups.totals, G)).float().mean()),
        "completions/mean_length": sum(lengths) / len(lengths),
        "completions/min_length": min(lengths),
        "completions/max_length": max(lengths),
        "completions/clipped_ratio": float(groups.completions.truncated.float().mean()),
        "num_groups": float(len(groups.examples)),
        "checker_errors": float(sum(e is not None for e in r.errors)),
        "checker_error_rate": sum(e is not None for e in r.errors) / max(1, len(r.errors)),
    }
    for name in r.names:
        fn_mean, fn_std = _nan_stats(r.values[name])
        metrics[f"rewards/{name}/mean"] = fn_mean
        metrics[f"rewards/{name}/std"] = fn_std
    return metrics
