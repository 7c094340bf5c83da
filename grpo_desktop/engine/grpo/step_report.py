"""What a GRPO step reports about its rollouts: a row per completion for the rollout inspector
and events.jsonl, the step's reward and length metrics under TRL's names, and each group's
prompt as stored (a huge prompt by its end). Split from step.py, which computes the step.

Try it:  python -m pytest -q tests/engine/grpo/test_step.py tests/engine/sampling/test_long_prompts.py
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from grpo_desktop.engine.grpo.loss import group_has_spread

if TYPE_CHECKING:
    from grpo_desktop.engine.grpo.step import Groups


def _nan_stats(values: list) -> tuple[float, float]:
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return math.nan, math.nan
    mean = sum(xs) / len(xs)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


SHOWN_PROMPT_CHARS = 20_000


def shown_prompt(problem: str, limit: int = SHOWN_PROMPT_CHARS) -> str:
    """The prompt as stored with a step's rollouts: whole, or for a huge one its end (what the
    model saw: over-long prompts lose their beginning) after a note of what was left out."""
    if len(problem) <= limit:
        return problem
    return f"[… {len(problem) - limit:,} earlier characters not stored …]\n" + problem[-limit:]


def rollout_rows(groups: Groups, adv: list[float], lengths: list[float]) -> list[dict]:
    """One row per completion for the rollout inspector: its text, rewards, advantage (None
    where unscored), length, truncation and the checker's error and reasons."""
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


def step_metrics(groups: Groups, group_std: torch.Tensor, lengths: list[float], G: int) -> dict:
    """The step's reward, spread, length and checker metrics under TRL's names."""
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
