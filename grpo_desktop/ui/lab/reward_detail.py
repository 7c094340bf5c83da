"""The reward-design Lab's text: one scored rollout explained in HTML, and the verdict notes' style.

Pure functions of an engine.lab.rewards result; no widgets.
Try it: click a row of the Lab's reward table; tests/ui/lab/test_reward_lab.py.
"""

from __future__ import annotations

import html


def note_style(kind: str) -> str:
    """A coloured note's style sheet (the colours of common.widgets.note_label). The padding is
    the label's margin (QLabel.setMargin), not the sheet's: a word-wrapped label counts its
    margin when it works out its height, but not a sheet's padding, which cut off the last
    line of a long verdict."""
    colors = {
        "error": ("#fdecea", "#b3261e", "#611a15"),
        "warning": ("#fff4e5", "#b26a00", "#663c00"),
        "info": ("#e8f1fb", "#1f5fa8", "#0d3c61"),
    }
    bg, border, fg = colors[kind]
    return (
        f"QLabel {{ background: {bg}; color: {fg}; border-left: 3px solid {border};"
        " padding: 0px; }"
    )


def detail_html(row, result) -> str:
    """One ScoredRollout of a LabResult explained: what it was read as, its parts, reward and
    how its advantage follows from the group's mean and std, then the whole completion."""
    ro, s = row.rollout, result.settings
    esc = lambda t: html.escape(t, quote=False)  # noqa: E731
    stats = next((g for g in result.groups if g.group == ro.group), None)
    parts = ", ".join(
        f"{name} {'no score' if v is None else f'{v:g}'}" for name, v in row.parts.items()
    )
    if row.reward is None:  # a weighted part did not score: the total is unknown, as in training
        missing = " and ".join(n for n in s.weights() if row.parts.get(n) is None) or "a part"
        why = (
            f"Its total is unknown ({missing} did not score), so it has no advantage and stays "
            "out of its group's mean and spread (not counted as 0)."
        )
    elif row.advantage is None or stats is None or stats.mean is None:
        why = "It could not be scored, so it has no advantage (it is left out, not counted as 0)."
    elif not stats.spread:
        why = "Its group has no spread, so its advantage is 0: nothing to learn from it."
    elif s.scale_rewards == "group":
        why = (
            f"A = ({row.reward:.3f} − {stats.mean:.3f}) / ({stats.std:.3f} + 0.0001) = "
            f"{row.advantage:+.3f}"
        )
    elif s.scale_rewards == "none":
        why = f"A = {row.reward:.3f} − {stats.mean:.3f} = {row.advantage:+.3f}"
    else:
        why = f"A = ({row.reward:.3f} − {stats.mean:.3f}) / the step's std = {row.advantage:+.3f}"
    fmt = row.format_advantage
    if fmt is not None and s.format_weight > 0 and row.advantage is not None and stats is not None:
        credit = "per tag" if s.format_credit == "per_tag" else "all-or-nothing"
        why += "" if why.endswith(".") else "."
        why += (
            f" Of it, the format ({credit}) makes {fmt:+.3f}."
            if abs(fmt) >= 5e-4
            else f" The format ({credit}) adds nothing to it: its group's format scores are equal."
            if stats.spread
            else ""
        )
    answer = esc(row.extracted or "none") + (f" ({esc(row.reason)})" if row.reason else "")
    error = f"<p style='color:#b3261e'>{esc(row.error)}</p>" if row.error else ""
    return (
        f"<p><b>#{row.index + 1}</b> {esc(ro.label)} — prompt: {esc(ro.prompt)} · reference "
        f"{esc(ro.answer)} · read as {answer}<br>parts: {parts} → reward "
        f"{'unknown' if row.reward is None else f'{row.reward:.3f}'}. {why}</p>{error}"
        f"<pre style='white-space: pre-wrap'>{esc(ro.completion)}</pre>"
    )
