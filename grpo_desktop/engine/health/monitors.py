"""Health alarms: watch a run's events and raise an `Alert` the first time each failure shows.

`HealthMonitor.observe(event)` takes the run's own events (RunStarted, Rollouts, StepMetrics,
EvalResult, Alert; objects or their JSON dicts) and returns the alerts they trigger, each kind at
most once per run. The trainer feeds it every event it yields, so events.jsonl, the CLI, the window
and saved sessions get the alerts like any other event; a resumed run first `replay`s its log, so
an alarm raised before the stop is not raised again. The kinds, their titles and explanations are
in engine/alarm_kinds.py; the thresholds in the config's `alerts` section (engine/config/alerts.py).

It does not stop the run or change training; it reads numbers. Torch-free.

Try it:  python -c "from grpo_desktop.engine.health.monitors import HealthMonitor as H; h = H(); print([h.observe({'type': 'step', 'step': s, 'metrics': {'completions/clipped_ratio': 1.0}}) for s in (1, 2, 3)][-1])"
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import deque
from typing import Any

from grpo_desktop.engine.alarm_kinds import alarm
from grpo_desktop.engine.config.alerts import AlertsConfig
from grpo_desktop.engine.events import Alert
from grpo_desktop.engine.health.format_rules import FormatRules, credit_of
from grpo_desktop.engine.health.hacking import SPREAD_STEPS, HackingRules, field_of, number, pct

MEDIAN_WINDOW = 50  # steps a running median looks back over
MEDIAN_MIN = 5  # steps of history before a spike can be judged
TRACKED = (
    "reward",
    "rewards/accuracy/mean",
    "completions/mean_length",
    "kl",
    "entropy",
    "grad_norm",
)
_SKIPPED_LINE = '{"type": "rollouts"'  # replaying a log needs no rollouts


class HealthMonitor(HackingRules, FormatRules):
    """The health alarms of one run (a resumed run: replay its log first). What raises each kind
    (defaults in brackets):

    - reward_hacking: over the last [4] held-out evaluations the training reward rose by [10 %]
      of the highest reward possible (least-squares fits) while held-out accuracy gained less
      than [2 points] and either fell by [5 points] or more, or more right training answers do
      not explain that rise (its accuracy part, weight × the fitted rise of
      rewards/accuracy/mean, subtracted, still [10 %]: held-out accuracy of 100 problems moves
      ±5 points by chance); or, over 5 steps, the format reward made [60 %] or more of the
      reward's spread inside groups (its share of the pooled within-group variance:
      Σ cov(w·format, total) / Σ var(total)).
    - no_signal: frac_reward_zero_std ≥ [0.8] for [5] steps running; the rollouts say whether
      the groups without spread were all right (too easy) or all wrong (too hard).
    - format_flat: the format part (weight > 0) scored 0 on every answer for [5] steps running
      (no_signal_steps), so it had no spread in any group: typically no answer used all the tags
      under all-or-nothing credit (engine/health/format_rules.py).
    - truncation: completions/clipped_ratio ≥ [0.5] for [3] steps running.
    - length_drift / length_collapse: mean length ≥ 1.5× or ≤ 0.5× / ≤ [0.2]× the mean of the
      first [10] steps, [3] steps running (a collapse also counts as the drift).
    - kl_blowup: KL ≥ [10]× its median over the previous ≤ 50 steps (at least 5) and ≥ [0.05].
    - entropy_collapse: entropy ≤ [0.05]× the median of the first [10] steps, [3] steps running.
    - grad_spike: grad_norm ≥ [25]× its median over the previous ≤ 50 steps (at least 5, zeros
      left out). GRPO's gradient norms are heavy-tailed: healthy demo runs come within a factor
      of two of the threshold (bench/README.md, "Health alarms on the demo").
    """

    def __init__(self, settings: AlertsConfig | None = None, weights: dict | None = None):
        self.settings = settings or AlertsConfig()
        self.weights = dict(weights or {})  # reward part -> weight (> 0 only)
        self.raised: set[str] = set()
        self._replaying = False
        self.series: dict[str, list[tuple[int, float]]] = {}  # metric -> [(step, value)]
        self.evals: list[tuple[int, float]] = []  # (step, held-out accuracy)
        self.streaks: dict[str, int] = {}
        self.groups: dict[int, tuple[int, int, int]] = {}  # step -> (no spread, all right, wrong)
        self.spread: deque = deque(maxlen=SPREAD_STEPS)  # (step, format cov, total var)
        self.format_credit = "all"  # rewards.format_credit of the run
        self.format_tags = ("think", "answer")  # its think and answer tag names
        self.format_steps: dict[int, tuple] = {}  # step -> format_rules.format_state

    # ------------------------------------------------------------------ feeding

    def observe(self, event: Any) -> list[Alert]:
        """The alerts `event` triggers (most events trigger none)."""
        kind = field_of(event, "type", "")
        if kind == "run_started":
            self._configure(event)
        elif kind == "alert":
            self.raised.add(str(field_of(event, "kind", "")))
        if not self.settings.enabled:
            return []
        if kind == "rollouts":
            self._on_rollouts(event)
            return []
        if kind == "step":
            return self._on_step(event)
        if kind == "eval":
            return self._on_eval(event)
        return []

    def replay(self, events) -> None:
        """Feed what a run logged before (a resume): the state is rebuilt and the kinds it raised
        are remembered, but nothing is raised again."""
        self._replaying = True
        try:
            for event in events:
                self.observe(event)
        finally:
            self._replaying = False

    def _configure(self, event: Any) -> None:
        config = field_of(event, "config") or {}
        values = config.get("alerts") or {}
        known = {f.name for f in dataclasses.fields(AlertsConfig)}
        self.settings = AlertsConfig(**{k: v for k, v in values.items() if k in known})
        r = config.get("rewards") or {}
        weights = {
            "accuracy": r.get("accuracy_weight", 1.0),
            "format": r.get("format_weight", 0.0),
            "custom": r.get("custom_weight", 0.0) if (r.get("custom_checker") or "").strip() else 0,
        }
        self.weights = {k: float(w) for k, w in weights.items() if number(w) and w > 0}
        self.format_credit, self.format_tags = credit_of(config)

    def _raise(self, kind: str, step: int, message: str, advice: str) -> list[Alert]:
        if kind in self.raised or self._replaying:
            return []
        self.raised.add(kind)
        return [Alert(step, kind, alarm(kind).severity, message, advice)]

    # ------------------------------------------------------------------ rollouts

    def _on_rollouts(self, event: Any) -> None:
        step = int(field_of(event, "step", 0))
        by_group: dict[int, list[dict]] = {}
        for row in field_of(event, "rows") or []:
            by_group.setdefault(int(row.get("group", 0)), []).append(row)
        flat = right = wrong = 0
        fmt_cov = total_var = 0.0
        top = sum(self.weights.values())
        for rows in by_group.values():
            totals = [number(r.get("reward")) for r in rows]
            scored = [t for t in totals if t is not None]
            if len(scored) >= 2 and max(scored) - min(scored) <= 1e-9:
                flat += 1
                acc = [number((r.get("rewards") or {}).get("accuracy")) for r in rows]
                if "accuracy" in self.weights and all(a is not None for a in acc):
                    right += all(a >= 1.0 for a in acc)
                    wrong += all(a <= 0.0 for a in acc)
                elif top > 0:
                    right += scored[0] >= top - 1e-9
                    wrong += scored[0] <= 1e-9
            cov, var = self._format_spread(rows)
            fmt_cov, total_var = fmt_cov + cov, total_var + var
        self.groups[step] = (flat, right, wrong)
        for old in [s for s in self.groups if s <= step - 2 * MEDIAN_WINDOW]:
            del self.groups[old]
        self.spread.append((step, fmt_cov, total_var))
        self._on_format_rows(step, list(field_of(event, "rows") or []))

    # ------------------------------------------------------------------ steps

    def _on_step(self, event: Any) -> list[Alert]:
        step = int(field_of(event, "step", 0))
        m = field_of(event, "metrics") or {}
        for name in TRACKED:
            value = number(m.get(name))
            if value is not None:
                self.series.setdefault(name, []).append((step, value))
        out: list[Alert] = []
        out += self._no_signal(step, number(m.get("frac_reward_zero_std")))
        out += self._truncation(step, number(m.get("completions/clipped_ratio")))
        out += self._length(step, number(m.get("completions/mean_length")))
        out += self._spike("kl_blowup", step, number(m.get("kl")), self.settings.kl_factor)
        out += self._entropy(step, number(m.get("entropy")))
        out += self._spike(
            "grad_spike", step, number(m.get("grad_norm")), self.settings.grad_factor
        )
        out += self._format_dominates(step)
        out += self._format_flat(step)
        return out

    def _streak(self, name: str, active: bool) -> int:
        self.streaks[name] = self.streaks.get(name, 0) + 1 if active else 0
        return self.streaks[name]

    def _no_signal(self, step: int, frac: float | None) -> list[Alert]:
        s = self.settings
        n = self._streak("no_signal", frac is not None and frac >= s.no_signal_share)
        if n < s.no_signal_steps:
            return []
        counts = [self.groups.get(k) for k in range(step - n + 1, step + 1)]
        flat, right, wrong = (sum(c[i] for c in counts if c) for i in range(3))
        msg = (
            f"For {n} steps in a row at least {pct(s.no_signal_share)} of the groups scored every "
            "answer the same, so their advantages were 0 and those steps taught almost nothing."
        )
        if flat and wrong >= 0.6 * flat:
            msg += f" {wrong} of those {flat} groups were all wrong: the problems look too hard."
            advice = (
                "Use easier problems (or a lower difficulty), a larger group size G so a rare "
                "right answer shows up, a higher temperature, or more completion tokens if "
                "answers are cut off."
            )
        elif flat and right >= 0.6 * flat:
            msg += f" {right} of those {flat} groups were all right: the problems look too easy."
            advice = (
                "Use harder problems (or a higher difficulty): the model already solves these, so "
                "there is nothing left to learn from them."
            )
        else:
            if flat:
                msg += f" Of those {flat} groups {right} were all right and {wrong} all wrong."
            advice = (
                "Use problems closer to the model's ability, a larger group size G, or a higher "
                "temperature so the answers in a group differ."
            )
        return self._raise("no_signal", step, msg, advice)

    def _truncation(self, step: int, ratio: float | None) -> list[Alert]:
        s = self.settings
        n = self._streak("truncation", ratio is not None and ratio >= s.truncation_share)
        if n < s.steps_in_a_row:
            return []
        return self._raise(
            "truncation",
            step,
            f"{pct(ratio)} of the answers at step {step} hit the length limit before finishing "
            f"(at least {pct(s.truncation_share)} for {n} steps): cut-off answers have no final "
            "answer, so the model cannot learn from them.",
            "Raise 'Max completion tokens' (algorithm.max_completion_length), or ask for shorter "
            "reasoning in the system prompt.",
        )

    def _baseline(self, name: str) -> float | None:
        values = self.series.get(name, [])
        n = self.settings.baseline_steps
        if len(values) <= n:
            return None
        return statistics.fmean(v for _, v in values[:n])

    def _length(self, step: int, length: float | None) -> list[Alert]:
        s = self.settings
        base = self._baseline("completions/mean_length")
        ok = length is not None and base is not None and base > 0
        ratio = length / base if ok else 1.0
        up = self._streak("length_up", ratio >= 1.0 + s.length_change)
        down = self._streak("length_down", ratio <= 1.0 - s.length_change)
        collapsed = self._streak("length_collapse", ratio <= s.length_collapse_share)
        if collapsed >= s.steps_in_a_row:
            out = self._raise(
                "length_collapse",
                step,
                f"Answers have shrunk to {length:.1f} tokens on average, {pct(ratio)} of the "
                f"{base:.0f} they had over the first {s.baseline_steps} steps: the model is "
                "learning to say (almost) nothing.",
                "Stop and go back to an earlier checkpoint, then lower the learning rate, raise "
                "KL penalty β, or check that right answers can score at all (the reward and "
                "its checker).",
            )
            if out:
                self.raised.add("length_drift")  # the collapse says more than the drift
            return out
        if max(up, down) < s.steps_in_a_row:
            return []
        longer = up >= s.steps_in_a_row
        return self._raise(
            "length_drift",
            step,
            f"Answers are now {length:.0f} tokens on average against {base:.0f} over the first "
            f"{s.baseline_steps} steps ({'longer' if longer else 'shorter'} by "
            f"{pct(abs(ratio - 1.0))}). If held-out accuracy is not rising with it, this is the "
            "loss's length bias, not learning.",
            "Compare with held-out accuracy. With the grpo loss, try Dr. GRPO or DAPO (they "
            "remove the per-answer length normalisation); a KL penalty β also holds the length."
            if longer
            else "Compare with held-out accuracy. Answers getting shorter with flat accuracy "
            "often means the reward favours short answers: check the reward parts.",
        )

    def _spike(self, kind: str, step: int, value: float | None, factor: float) -> list[Alert]:
        name = "kl" if kind == "kl_blowup" else "grad_norm"
        values = self.series.get(name, [])
        if value is None or len(values) <= MEDIAN_MIN:
            return []
        # Steps without any signal have a gradient (and a KL change) of 0: they are no baseline.
        before = [v for _, v in values[-MEDIAN_WINDOW - 1 : -1] if v > 0]
        if len(before) < MEDIAN_MIN:
            return []
        median = statistics.median(before)
        floor = self.settings.kl_floor if kind == "kl_blowup" else 0.0
        if value < factor * median or value <= floor:
            return []
        if kind == "kl_blowup":
            return self._raise(
                kind,
                step,
                f"KL at step {step} is {value:.3g}, {value / max(median, 1e-12):.0f}× its recent "
                f"median of {median:.3g}: the model moved far from where it started in one step.",
                "Lower the learning rate or raise KL penalty β; if answers turn to gibberish, "
                "go back to an earlier checkpoint.",
            )
        return self._raise(
            kind,
            step,
            f"The gradient norm at step {step} is {value:.3g}, {value / max(median, 1e-12):.0f}× "
            f"its recent median of {median:.3g}: one update was far larger than the others.",
            "One spike is usually harmless with gradient clipping on. If they repeat, lower the "
            "learning rate or keep gradient clipping at 1.0 (algorithm.max_grad_norm).",
        )

    def _entropy(self, step: int, entropy: float | None) -> list[Alert]:
        s = self.settings
        values = self.series.get("entropy", [])
        base = None
        if len(values) > s.baseline_steps:
            base = statistics.median(v for _, v in values[: s.baseline_steps])
        low = entropy is not None and bool(base) and entropy <= s.entropy_drop * base
        if self._streak("entropy", low) < s.steps_in_a_row:
            return []
        return self._raise(
            "entropy_collapse",
            step,
            f"Entropy is down to {entropy:.3g} from {base:.3g} over the first {s.baseline_steps} "
            "steps: the model's answers have become nearly certain, so the answers in a group "
            "stop differing and learning stops.",
            "Raise the temperature, lower the learning rate, or add a KL penalty β to keep the "
            "model exploring.",
        )


def logged_events(path: str) -> list[dict]:
    """What a monitor needs from a run's events.jsonl (everything but the rollouts), as dicts;
    a missing file is empty and a damaged line is skipped (the log's own reader reports it)."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(_SKIPPED_LINE) or not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if isinstance(data, dict):
                    out.append(data)
    except FileNotFoundError:
        return []
    return out
