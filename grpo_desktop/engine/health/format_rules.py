"""The format_flat health alarm (engine/health/monitors.py): the format reward teaches nothing.

A real small model asked for <think>…</think><answer>…</answer> often never writes all four tags:
the all-or-nothing format reward then scores 0 on every answer, has no spread in any group, and
its weight is wasted, run after run, with nothing on the plots to say so (the reward still moves
with accuracy). `FormatRules` is mixed into `HealthMonitor`: it keeps, per step, whether the
format part had a spread inside any group and the best format score of the step, and raises
format_flat when for `alerts.no_signal_steps` steps running (default 5) not one answer earned
any format credit, so no group had a format spread. The advice depends on the credit:
under "all" switch Format credit to per tag (partial credit); under "per_tag" (no answer wrote a
single tag) make the prompt show the format. Measured on SmolLM2-135M-Instruct: under three
system prompts asking for the tags (one with an example answer) 0 of 96 sampled answers wrote
a tag; the instruction in the user turn gave a tag now and then, a one-shot example exchange
tags in every group. Torch-free.
Try it: tests/engine/health/test_format_flat.py.
"""

from __future__ import annotations

from typing import Any

from grpo_desktop.engine.events import Alert
from grpo_desktop.engine.health.hacking import number

SPREAD = 1e-9  # format scores closer than this inside a group count as equal


def format_state(
    rows: list[dict], tags: tuple[str, str] = ("think", "answer")
) -> tuple[bool, float, float, bool | None] | None:
    """(some group has a format spread, best format score, mean format score, whether any
    answer writes any of the think/answer tags at all, None when the rows carry no text) of
    one step's rows, over the scored answers with a format score; None when none has one."""
    by_group: dict[int, list[float]] = {}
    marks = [f"<{t}>" for t in tags] + [f"</{t}>" for t in tags]
    texts = []
    for r in rows:
        fmt = number((r.get("rewards") or {}).get("format"))
        if fmt is not None and number(r.get("reward")) is not None:
            by_group.setdefault(int(r.get("group", 0) or 0), []).append(fmt)
            if isinstance(r.get("completion"), str):
                texts.append(r["completion"])
    values = [v for group in by_group.values() for v in group]
    if not values:
        return None
    spread = any(len(g) >= 2 and max(g) - min(g) > SPREAD for g in by_group.values())
    tagged = any(m in t for t in texts for m in marks) if texts else None
    return spread, max(values), sum(values) / len(values), tagged


class FormatRules:
    """Mixin of HealthMonitor: needs its settings, weights, streaks, _streak and _raise, and
    `format_credit` and `format_steps` (set in HealthMonitor.__init__ and _configure)."""

    format_credit: str
    format_tags: tuple[str, str]
    format_steps: dict[int, tuple[bool, float, float, bool | None]]

    def _on_format_rows(self, step: int, rows: list[dict]) -> None:
        state = format_state(rows, self.format_tags)
        if state is not None:
            self.format_steps[step] = state
        for old in [s for s in self.format_steps if s < step - 2 * max(1, self._flat_steps())]:
            del self.format_steps[old]

    def _opening(self) -> str:
        """The reasoning tag that opens the format, e.g. <think>."""
        return f"<{self.format_tags[0]}>"

    def _flat_steps(self) -> int:
        return int(self.settings.no_signal_steps)

    def _format_flat(self, step: int) -> list[Alert]:
        state = self.format_steps.get(step)
        # Not one answer of the step earned any format credit: every group is flat in format.
        flat = self.weights.get("format", 0.0) > 0 and state is not None and state[1] <= 0.0
        n = self._streak("format_flat", flat)
        if n < self._flat_steps():
            return []
        if self.format_credit == "per_tag":
            message = (
                f"For {n} steps in a row not one answer wrote a single think or answer tag in "
                "its place: even with per-tag credit the format reward scored every answer 0, "
                "so it had no spread in any group and taught nothing."
            )
            advice = (
                "Show the model the format: add a worked example (Dataset panel, Worked "
                "example: a problem and its answer in the tags), which a small model copies where "
                f"it ignores the system prompt, or start every answer with {self._opening()} "
                "(Dataset panel, Answer starts with), which it continues. Or set the format "
                "weight to 0 and train on accuracy alone."
            )
        else:
            message = (
                f"For {n} steps in a row no answer used all the tags, so the all-or-nothing "
                "format reward scored every answer 0: it had no spread in any group and taught "
                "nothing (its weight is wasted)."
            )
            advice = (
                "No answer uses the tags, so the all-or-nothing format reward has no spread and "
                "teaches nothing; switch Format credit to per tag (partial credit) or make the "
                "system prompt show the format."
            )
            states = [self.format_steps.get(k) for k in range(step - n + 1, step + 1)]
            if all(s is not None and s[3] is False for s in states):
                advice += (
                    " Here not one answer wrote a single tag, so per-tag credit would score 0 "
                    "too: add a worked example (Dataset panel, Worked example: a problem and its "
                    "answer in the tags), which a small model copies where it ignores the system "
                    f"prompt, or start every answer with {self._opening()} (Dataset panel, Answer "
                    "starts with)."
                )
        return self._raise("format_flat", step, message, advice)


def credit_of(config: Any) -> tuple[str, tuple[str, str]]:
    """The format credit ("all" when it has none) and the (think, answer) tag names of a
    run_started event's config dict."""
    rewards = (config or {}).get("rewards") or {}
    credit = rewards.get("format_credit", "all")
    tags = (str(rewards.get("think_tag") or "think"), str(rewards.get("answer_tag") or "answer"))
    return (credit if credit in ("all", "per_tag") else "all"), tags
