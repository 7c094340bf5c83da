"""What an answer pane of the Try tab shows, as HTML: each sample's text and its score.

`answer_html(result, weights)` renders a finished answer (the dict of
engine/variants/try_model.py's `answer_prompt`): per sample a header (the total reward and each
part: accuracy ✓/✗ or "not scored", format, custom checker, the answer the checker read, why it
scored 0, a checker error) above the text with its think and answer blocks highlighted; the
result's notes below. `streaming_html(texts)` renders the texts still being decoded.
`score_summary(score)` is the header as plain text. Pure functions; no widgets.
Try it: tests/ui/try_it/test_try.py.
"""

from __future__ import annotations

import html

from grpo_desktop.ui.inspector.detail import highlight_completion

PART_NAMES = {"accuracy": "accuracy", "format": "format", "custom": "custom checker"}
ENDED = {"eos": "", "length": " · cut at the token limit", "stopped": " · stopped"}
GOOD, BAD, GREY = "#1e6b34", "#b3261e", "#666666"


def _value(v: float | None) -> str:
    return "–" if v is None else f"{v:.3g}"


def score_parts(score: dict) -> list[str]:
    """Each reward part in words: "accuracy ✓ 1", "format 0", "accuracy not scored"."""
    parts = []
    for name, value in score["rewards"].items():
        label = PART_NAMES.get(name, name)
        if value is None:
            parts.append(f"{label} not scored")
        elif name == "accuracy":
            parts.append(f"{label} {'✓' if value >= 1 else '✗'} {_value(value)}")
        else:
            parts.append(f"{label} {_value(value)}")
    return parts


def score_summary(score: dict | None) -> str:
    """One line: "reward 1.2 · accuracy ✓ 1 · format 1 · read: 408"."""
    if score is None:
        return "not scored (stopped before the end)"
    bits = [f"reward {_value(score['reward'])}", *score_parts(score)]
    if score.get("extracted") is not None:
        bits.append(f"read: {score['extracted']}")
    bits += [f"{PART_NAMES.get(k, k)}: {why}" for k, why in (score.get("reasons") or {}).items()]
    if score.get("error"):
        bits.append(f"checker error: {score['error']}")
    return " · ".join(bits)


def weights_line(weights: dict[str, float]) -> str:
    """How the reward adds up: "reward = 1 × accuracy + 0.2 × format (the run's weights)"."""
    terms = " + ".join(f"{w:g} × {PART_NAMES.get(name, name)}" for name, w in weights.items())
    return f"reward = {terms} (the run's weights; a part not scored leaves it unknown)"


def sample_tally(result: dict) -> str:
    """Over several samples: " · 2 of 4 right · mean reward 0.6" (what is scored)."""
    scores = [s["score"] for s in result["samples"] if s.get("score")]
    right = [
        sc["rewards"]["accuracy"] for sc in scores if sc["rewards"].get("accuracy") is not None
    ]
    rewards = [sc["reward"] for sc in scores if sc["reward"] is not None]
    out = f" · {sum(v >= 1 for v in right)} of {len(right)} right" if right else ""
    if rewards:
        out += f" · mean reward {sum(rewards) / len(rewards):.3g}"
    return out


def _colour(score: dict | None) -> str:
    accuracy = (score or {}).get("rewards", {}).get("accuracy")
    return GREY if accuracy is None else GOOD if accuracy >= 1 else BAD


def _sample_html(i: int, n: int, sample: dict, tags: tuple[str, str]) -> str:
    score = sample.get("score")
    head = f"Sample {i + 1} · " if n > 1 else ""
    tokens = f"{sample['tokens']} tokens{ENDED.get(sample['ended'], '')}"
    header = (
        f"<div style='color:{_colour(score)}; font-weight:bold'>"
        f"{html.escape(head + score_summary(score))}</div>"
        f"<div style='color:{GREY}'>{html.escape(tokens)}</div>"
    )
    text = sample["text"]
    body = highlight_completion(text, *tags) if text else f"<i style='color:{GREY}'>(empty)</i>"
    return f"{header}<p style='margin-top:2px'>{body}</p>"


def answer_html(result: dict, think_tag: str = "think", answer_tag: str = "answer") -> str:
    """A finished answer: every sample with its score, then the notes."""
    samples = result["samples"]
    blocks = [
        _sample_html(i, len(samples), s, (think_tag, answer_tag)) for i, s in enumerate(samples)
    ]
    lines = list(result.get("notes", []))
    if result.get("weights"):
        lines.append(weights_line(result["weights"]))
    notes = "".join(f"<p style='color:{GREY}'>{html.escape(line)}</p>" for line in lines)
    return "<hr>".join(blocks) + notes


def streaming_html(texts: list[str], think_tag: str = "think", answer_tag: str = "answer") -> str:
    """Texts still being decoded, one block per sample."""
    n = len(texts)
    blocks = []
    for i, text in enumerate(texts):
        head = f"<div style='color:{GREY}'>Sample {i + 1}…</div>" if n > 1 else ""
        blocks.append(head + f"<p>{highlight_completion(text, think_tag, answer_tag)}▌</p>")
    return "<hr>".join(blocks)
