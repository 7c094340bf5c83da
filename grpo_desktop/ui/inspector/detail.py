"""The detail pane of the rollout inspector: one rollout as HTML, explained.

Shows the completion in full with the reasoning and answer blocks highlighted, the reference
answer, each reward part, the checker error, and what the advantage means for this answer
compared with the rest of its group. Pure functions returning HTML; no widgets.
Try it: select a row in the Rollouts tab; tests/ui/common/test_widgets.py.
"""

from __future__ import annotations

import html
import math
import re

THINK_STYLE = "background:#e8f1fb; color:#0d3c61;"
ANSWER_STYLE = "background:#e6f4ea; color:#1e4620; font-weight:bold;"
TAG_STYLE = "color:#8c8c8c;"


def highlight_completion(text: str, think_tag: str = "think", answer_tag: str = "answer") -> str:
    """Escaped completion with <think>…</think> and <answer>…</answer> blocks coloured."""
    out = html.escape(text)
    for tag, style in ((think_tag, THINK_STYLE), (answer_tag, ANSWER_STYLE)):
        open_, close = html.escape(f"<{tag}>"), html.escape(f"</{tag}>")
        pattern = re.compile(re.escape(open_) + "(.*?)" + re.escape(close), re.DOTALL)
        out = pattern.sub(
            lambda m, s=style, o=open_, c=close: (
                f'<span style="{TAG_STYLE}">{o}</span><span style="{s}">{m.group(1)}</span>'
                f'<span style="{TAG_STYLE}">{c}</span>'
            ),
            out,
        )
    return out.replace("\n", "<br>")


def _fmt(v: float | None) -> str:
    return "no score" if v is None else f"{v:.3g}"


def unknown_total_text(row: dict) -> str:
    """Why a rollout has no total reward, and what that means for it (the engine's rule: a
    weighted part that could not score makes the total unknown, engine.rewards.weighted_total).

    Names the parts that did not score: the checker (it failed: see the error), accuracy (no
    reference answer), or any other; the parts that did score are not summed without them."""
    parts = row.get("rewards") or {}
    missing = [name for name, v in parts.items() if v is None]
    if "custom" in missing and row.get("error"):
        why = "Your checker failed on this answer (see the error below)"
    elif missing == ["accuracy"]:
        why = "Accuracy could not score this answer (the problem has no reference answer)"
    elif missing:
        why = f"{_names(missing)} could not score this answer"
    else:
        why = "This answer could not be scored"
    scored = [name for name, v in parts.items() if v is not None]
    also = f" even though {_names(scored)} scored" if scored else ""
    return (
        f"{why}, so its total reward is unknown{also}: it has no advantage, stays out of its "
        "group's mean and spread, and is not trained on."
    )


def _names(names: list[str]) -> str:
    shown = ["your checker" if n == "custom" else n for n in names]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def explain_advantage(row: dict, group_rows: list[dict]) -> str:
    """One or two sentences on what this rollout's advantage does, in Help's plain terms."""
    adv = row.get("advantage")
    scored = [float(r["reward"]) for r in group_rows if r.get("reward") is not None]
    if row.get("reward") is None:
        return unknown_total_text(row)
    if not scored:
        return ""
    mean = sum(scored) / len(scored)
    std = math.sqrt(sum((v - mean) ** 2 for v in scored) / len(scored))
    group = (
        f"Its group of {len(group_rows)} answers to this prompt scored {mean:.3g} on average "
        f"(spread {std:.3g})."
    )
    if std < 1e-9:
        return (
            f"{group} Every answer in the group scored the same, so every advantage is 0 and this "
            "group teaches nothing: GRPO learns only from the spread within a group."
        )
    if adv is None or adv == 0:
        return (
            f"{group} This answer scored exactly the average, so it is neither pushed up nor down."
        )
    direction = "more likely: it beat" if adv > 0 else "less likely: it fell below"
    return (
        f"{group} With reward {float(row['reward']):.3g}, its advantage is {adv:+.3f}, so every "
        f"token of it is made {direction} its group's average."
    )


def _total_text(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.3g}"


def _advantage_text(row: dict) -> str:
    if row.get("reward") is None:
        return "no advantage (total unknown)"
    adv = row.get("advantage")
    return "advantage 0" if not adv else f"advantage {adv:+.3f}"


def _extracted_html(row: dict) -> str:
    """What the accuracy checker read as the final answer, and why it scored so, when known."""
    out = ""
    if row.get("extracted") is not None:
        out += f" · <b>read as</b> {html.escape(str(row['extracted']))}"
    for name, why in (row.get("reasons") or {}).items():
        out += f" · <b>{html.escape(str(name))}</b>: {html.escape(str(why))}"
    return out


def rollout_html(
    step: int,
    row: dict,
    group_rows: list[dict],
    think_tag: str = "think",
    answer_tag: str = "answer",
) -> str:
    adv = row.get("advantage")
    colour = "#2e9d52" if (adv or 0) > 1e-9 else "#c0392b" if (adv or 0) < -1e-9 else "#555555"
    parts = ", ".join(f"{html.escape(k)} {_fmt(v)}" for k, v in (row.get("rewards") or {}).items())
    flags = []
    if row.get("truncated"):
        flags.append("<span style='color:#b26a00'>cut off at the length limit</span>")
    error = row.get("error")
    out = [
        f"<h3 style='margin:0'>Step {step} · group {row.get('group', 0)} · "
        f"<span style='color:{colour}'>{_advantage_text(row)}</span></h3>",
        f"<p>{html.escape(explain_advantage(row, group_rows))}</p>",
        f"<p><b>Reward</b> {_total_text(row.get('reward'))}"
        + (f" ({parts})" if parts else "")
        + f" · <b>length</b> {row.get('length', '?')} tokens"
        + ("".join(f" · {f}" for f in flags))
        + "</p>",
    ]
    if error:
        out.append(f"<p style='color:#b3261e'><b>Checker error:</b> {html.escape(str(error))}</p>")
    out += [
        "<p><b>Prompt</b><br>"
        + html.escape(str(row.get("prompt", ""))).replace("\n", "<br>")
        + "</p>",
        "<p><b>Completion</b></p>",
        "<div style='font-family:monospace; white-space:pre-wrap'>"
        + (
            highlight_completion(str(row.get("completion", "")), think_tag, answer_tag)
            or "<i>(empty)</i>"
        )
        + "</div>",
        f"<p><b>Reference answer</b> {html.escape(str(row.get('answer', '')))}"
        + _extracted_html(row)
        + "</p>",
    ]
    return "\n".join(out)
