"""The answer lab's words: the explanation under each part, in a hobbyist's terms, and the
sentence that names the sampled group. Plain strings and one formatter; no widgets here.

Kept apart so answer_parts.py stays about drawing. Try it: tests/ui/lab/test_lab.py.
"""

from __future__ import annotations

from grpo_desktop.engine.lab.answers import ANSWERS, LabStep

GROUP_HELP = (
    "An answer's advantage is how much better it scored than its group's average, measured in "
    "units of the group's spread (std). Positive: this answer is made more likely; negative: less "
    "likely. The advantages of a group always add up to zero."
)
UPDATE_HELP = (
    "Each answer's logit (its score before softmax) moves by learning rate × the sum of its "
    "advantages ÷ G. An answer that was not sampled does not move, but its probability still "
    "shifts, because softmax shares out the 100\u00a0% again after the others moved."
)
BETA_HELP = " β pulls every logit back toward the starting model (the KL penalty's gradient)."
PLOT_HELP = {
    "strict": "The strict checker pays only 408, so 408 climbs and the hedge fades away.",
    ("sloppy", "lesson"): (
        "The sloppy checker pays the hedge “398 or 408” like the right answer: reward hacking. "
        "Here 408 starts five times likelier and wins the race (a rewarded answer's logit grows "
        "with its own probability), so the hedge only lingers. Start from the weaker model to "
        "watch the hedge take over."
    ),
    ("sloppy", "weak"): (
        "The sloppy checker pays the hedge like the right answer, and this model starts likelier "
        "to hedge than to answer 408, so the hedge takes over: the model learns to game the "
        "checker (reward hacking). β only slows that down."
    ),
}
KL_HELP = "KL: how far the model has moved from where it started (0 = not at all)."


def group_text(step: LabStep) -> str:
    """ "G = 4 answers: 408, 398, 398, 418. The strict checker scores them 1, 0, 0, 0." (counts
    instead of the list for groups over 8)."""
    G = len(step.group)
    if G <= 8:
        answers = ", ".join(ANSWERS[o] for o in step.group)
        scores = ", ".join(f"{r:.0f}" for r in step.rewards)
        return f"G = {G} answers: {answers}. The {step.checker} checker scores them {scores}."
    parts = [f"{ANSWERS[k]} × {n}" for k, n in enumerate(step.times_sampled) if n]
    right = sum(1 for r in step.rewards if r)
    return (
        f"G = {G} answers: {', '.join(parts)}. The {step.checker} checker scores {right} of "
        f"them 1 and {G - right} of them 0."
    )
