"""Every kind of alert a run can raise, in one place: its stable `kind` string, a short title, its
severity and what it means in plain words.

The banner, the plots' markers, the log and the Help page all read these, so an alarm is named and
explained the same way everywhere; Help links to an entry by its `kind` (for example
`#alarm-reward_hacking`). The per-run message and advice of an alert (with its numbers) are built
where the alert is raised (engine/health/monitors.py, engine/health/checker_watch.py); this module holds only what does not
change from run to run. Torch-free and Qt-free.

Try it:  python -c "from grpo_desktop.engine.alarm_kinds import ALARMS; print(*ALARMS, sep='\\n')"
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AlarmKind:
    kind: str  # stable: stored in events.jsonl and sessions, used as a Help anchor
    title: str  # a few words, for the banner's heading and the plot marker
    severity: str  # warning | critical
    explanation: str  # what it means and why it matters, for Help and tooltips


_KINDS = (
    AlarmKind(
        "reward_hacking",
        "Possible reward hacking",
        "warning",
        "The training reward goes up, but not because the model solves more problems: held-out "
        "accuracy (problems the model never trains on) stays flat or falls, or the format reward "
        "alone decides which answers win. The model is learning to please the reward (write the "
        "tags, hedge) instead of getting answers right.",
    ),
    AlarmKind(
        "no_signal",
        "No learning signal",
        "warning",
        "GRPO learns by comparing the answers in a group. When every answer in a group gets the "
        "same reward (all right or all wrong), every advantage is 0 and that group teaches "
        "nothing. When most groups are like that for several steps, the run is wasting its time: "
        "the problems are too easy or too hard for the model.",
    ),
    AlarmKind(
        "format_flat",
        "Format teaches nothing",
        "warning",
        "The format reward gave every answer in a group the same score, step after step, so it "
        "added nothing to any advantage: its weight is wasted. The usual cause is a model that "
        "never writes all the think and answer tags while the format credit is all-or-nothing: "
        "every answer scores 0. Partial credit per tag (Format credit: per tag) lets the answers "
        "with more tags win, so the model can learn the format step by step.",
    ),
    AlarmKind(
        "truncation",
        "Answers cut off",
        "warning",
        "Many answers hit the length limit before they finish, so they have no final answer to "
        "score and the model cannot learn what a good ending looks like. The length budget is "
        "starving the run.",
    ),
    AlarmKind(
        "length_drift",
        "Answer length drifting",
        "warning",
        "The mean answer length has grown or shrunk by half or more compared with the start of "
        "the run. Sometimes that is learning, but often it is the length bias of the loss: long "
        "wrong answers are punished less per token, so answers grow without getting better.",
    ),
    AlarmKind(
        "length_collapse",
        "Answers collapsing",
        "critical",
        "Answers are shrinking toward nothing. The model has found that saying (almost) nothing "
        "is safest, usually because most answers were punished; once it stops writing it cannot "
        "find its way back.",
    ),
    AlarmKind(
        "kl_blowup",
        "KL jump",
        "critical",
        "The KL divergence (how far the model has moved from where it started) jumped far above "
        "its usual level. The model changed a lot in a few steps, which often comes before "
        "gibberish or a collapse.",
    ),
    AlarmKind(
        "entropy_collapse",
        "Entropy collapse",
        "warning",
        "The model's choices have become nearly certain: entropy fell far below where it "
        "started. Answers in a group become identical, so groups lose their spread and learning "
        "stops.",
    ),
    AlarmKind(
        "grad_spike",
        "Gradient spike",
        "warning",
        "One update was far larger than the ones before it (gradient norm before clipping). A "
        "single spike is often harmless thanks to clipping; repeated spikes mean the training is "
        "unstable.",
    ),
    AlarmKind(
        "checker_errors",
        "Checker failing",
        "warning",
        "Your own checker raised an error on many answers, so those answers got no score from "
        "it and the reward misses that part.",
    ),
    AlarmKind(
        "checker_timeouts",
        "Checker timing out",
        "critical",
        "Your own checker took longer than its time limit on every answer of a step: it scored "
        "nothing and the step took far longer than it should.",
    ),
)

ALARMS: dict[str, AlarmKind] = {k.kind: k for k in _KINDS}
# The kinds health/monitors.py raises (the checker_ kinds come from health/checker_watch.py).
HEALTH_KINDS = tuple(k for k in ALARMS if not k.startswith("checker_"))


def alarm(kind: str) -> AlarmKind:
    """The entry for `kind`; an unknown kind (from a newer version) gets a plain one."""
    known = ALARMS.get(kind)
    if known is not None:
        return known
    return AlarmKind(kind, kind.replace("_", " ").capitalize(), "warning", "")
