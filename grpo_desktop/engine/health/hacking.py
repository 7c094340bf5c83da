"""The reward-hacking rules of the health alarms (engine/health/monitors.py), apart so each file
stays short.

`HackingRules` is mixed into `HealthMonitor`: the format reward's share of the reward's spread
inside groups (pooled over a few steps) and the training reward's rise against held-out accuracy
over the last evaluations. `HealthMonitor`'s docstring says what raises reward_hacking.
Torch-free. Try it: the example in engine/health/monitors.py.
"""

from __future__ import annotations

import math
from typing import Any

from grpo_desktop.engine.events import Alert

SPREAD_STEPS = 5  # steps over which the format share of the spread is pooled


def field_of(event: Any, name: str, default: Any = None) -> Any:
    if isinstance(event, dict):
        return event.get(name, default)
    return getattr(event, name, default)


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def pct(x: float) -> str:
    return f"{x:.0%}"


class HackingRules:
    """Mixin of HealthMonitor: needs its settings, weights, series, evals, spread and _raise."""

    def _format_spread(self, rows: list[dict]) -> tuple[float, float]:
        """This group's Σ (f − f̄)(t − t̄) for the weighted format part f and Σ (t − t̄)² for the
        total t, over its scored answers (a part that could not score adds 0, as in the total)."""
        w = self.weights.get("format", 0.0)
        pairs = []
        for r in rows:
            total = number(r.get("reward"))
            if total is not None:
                fmt = number((r.get("rewards") or {}).get("format"))
                pairs.append((w * (fmt or 0.0), total))
        if len(pairs) < 2 or w <= 0:
            return 0.0, 0.0
        f_mean = sum(p[0] for p in pairs) / len(pairs)
        t_mean = sum(p[1] for p in pairs) / len(pairs)
        cov = sum((f - f_mean) * (t - t_mean) for f, t in pairs)
        return cov, sum((t - t_mean) ** 2 for _, t in pairs)

    def _format_dominates(self, step: int) -> list[Alert]:
        if len(self.spread) < SPREAD_STEPS or self.spread[-1][0] != step:
            return []
        cov = sum(c for _, c, _ in self.spread)
        var = sum(v for _, _, v in self.spread)
        if var <= 1e-12 or cov / var < self.settings.format_share:
            return []
        alone = set(self.weights) == {"format"}
        return self._raise(
            "reward_hacking",
            step,
            f"The format reward made {pct(cov / var)} of the differences in reward between the "
            f"answers of a group over the last {SPREAD_STEPS} steps"
            + (" (it is the only reward part)" if alone else "")
            + ": the model is taught to write the tags, not to get the answer right.",
            "Give accuracy the largest weight and keep format small (e.g. accuracy 1.0, format "
            "0.2) in the Reward panel, and watch held-out accuracy.",
        )

    def _on_eval(self, event: Any) -> list[Alert]:
        acc = number(field_of(event, "accuracy"))
        step = int(field_of(event, "step", 0))
        if acc is None:
            return []
        self.evals = [e for e in self.evals if e[0] < step] + [(step, acc)]
        s = self.settings
        if len(self.evals) < s.hack_evals:
            return []
        window = self.evals[-s.hack_evals :]
        (s0, a0), (s1, a1) = window[0], window[-1]
        rewards = self._between("reward", s0, s1)
        if len(rewards) < 5:
            return []
        rise = _slope(rewards) * (s1 - s0)
        gain = _slope(window) * (s1 - s0)  # held-out accuracy, fitted over the evaluations
        # The part of the rise that more right training answers explain (they should show on
        # held-out problems too, but 100 held-out problems move by ±5 points by chance alone).
        solved = self._between("rewards/accuracy/mean", s0, s1)
        explained = self.weights.get("accuracy", 0.0) * _slope(solved) * (s1 - s0) if solved else 0
        scale = sum(self.weights.values()) or 1.0
        unexplained = rise - max(explained, 0.0) >= s.hack_reward_rise * scale
        if rise < s.hack_reward_rise * scale or gain >= s.hack_accuracy_gain:
            return []
        if not unexplained and gain > -s.hack_accuracy_drop:
            return []
        went = "fell" if gain <= -s.hack_accuracy_gain else "stayed flat"
        return self._raise(
            "reward_hacking",
            step,
            f"The training reward rose by {rise:.2f} between steps {s0} and {s1} while held-out "
            f"accuracy {went} ({a0:.0%} → {a1:.0%} over {len(window)} evaluations): the model is "
            "getting better at the reward, not at the problems.",
            "Look at the rollouts for what earns the reward (tags, hedged answers), give accuracy "
            "the largest weight, use the strict answer checker, and keep the checkpoint with the "
            "best held-out accuracy.",
        )

    def _between(self, name: str, first: int, last: int) -> list[tuple[int, float]]:
        return [(k, v) for k, v in self.series.get(name, []) if first < k <= last]


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of value over step."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx else 0.0
