"""Config section `alerts`: when the health alarms of engine/health/monitors.py go off.

Each threshold is a setting with help text and bounds; all but the on/off switch are marked
advanced, so the Hyperparameters panel shows one checkbox until "Show advanced settings" is on.
The defaults were tuned on the demo (bench/README.md, "Health alarms on the demo"): healthy
demo runs raise none of the alarms, and the demo rewarded for format alone raises
reward_hacking. Torch-free.

Try it:  python -c "from grpo_desktop.engine.config import AlertsConfig; print(AlertsConfig())"
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_desktop.engine.config.model import option


@dataclass
class AlertsConfig:
    enabled: bool = option(
        True,
        label="Health alarms",
        help="Watch the run for the classic GRPO failures (reward hacking, no learning signal, "
        "answers cut off, length drift or collapse, KL jumps, entropy collapse, gradient spikes) "
        "and show a banner the first time each one appears.",
    )
    steps_in_a_row: int = option(
        3,
        label="Alarm after steps in a row",
        min=1,
        max=1000,
        help="Truncation, length drift and collapse and entropy collapse raise an alarm only when "
        "their condition holds this many steps running, so one odd step does not.",
        advanced=True,
    )
    baseline_steps: int = option(
        10,
        label="Baseline steps",
        min=1,
        max=10000,
        help="Answer length and entropy are compared with their level over this many first steps.",
        advanced=True,
    )
    hack_evals: int = option(
        4,
        label="Evaluations compared (hacking)",
        min=2,
        max=100,
        help="Reward hacking is judged over the last this-many held-out evaluations: the training "
        "reward rising between the first and the last while held-out accuracy does not.",
        advanced=True,
    )
    hack_reward_rise: float = option(
        0.1,
        label="Reward rise (hacking)",
        min=0.0,
        max=1.0,
        help="How much the training reward must rise over those evaluations, as a share of the "
        "highest reward possible (the sum of the weights), to count as rising.",
        advanced=True,
    )
    hack_accuracy_gain: float = option(
        0.02,
        label="Accuracy gain that counts (hacking)",
        min=0.0,
        max=1.0,
        help="Held-out accuracy counts as flat unless it rose by at least this much (0.02 = 2 "
        "points) over the same evaluations.",
        advanced=True,
    )
    hack_accuracy_drop: float = option(
        0.10,
        label="Accuracy drop (hacking)",
        min=0.0,
        max=1.0,
        help="Held-out accuracy falling by this much (0.10 = 10 points) while the reward rises is "
        "reward hacking even when the model also solves more training problems. 100 held-out "
        "problems move by about ±5 points by chance alone, so a smaller fall means little.",
        advanced=True,
    )
    format_share: float = option(
        0.6,
        label="Format share of the spread",
        min=0.05,
        max=1.0,
        help="Reward hacking is also flagged when the format reward makes this share or more of "
        "the differences between answers in a group (over 5 steps): then writing the tags, not "
        "solving, decides which answers win.",
        advanced=True,
    )
    no_signal_share: float = option(
        0.8,
        label="No-signal share",
        min=0.05,
        max=1.0,
        help="A step has no signal when at least this share of its groups scored all their "
        "answers the same (frac_reward_zero_std).",
        advanced=True,
    )
    no_signal_steps: int = option(
        5,
        label="No-signal steps in a row",
        min=1,
        max=1000,
        help="The no-signal alarm goes off after this many such steps running; so does 'Format "
        "teaches nothing', after this many steps in which no answer earned any format credit.",
        advanced=True,
    )
    truncation_share: float = option(
        0.5,
        label="Truncated share",
        min=0.01,
        max=1.0,
        help="Alarm when at least this share of a step's answers hit the length limit "
        "(completions/clipped_ratio).",
        advanced=True,
    )
    length_change: float = option(
        0.5,
        label="Length change",
        min=0.05,
        max=10.0,
        help="Alarm when the mean answer length is up or down by this share of its baseline "
        "(0.5: half again as long, or half as long).",
        advanced=True,
    )
    length_collapse_share: float = option(
        0.2,
        label="Collapsed length share",
        min=0.0,
        max=1.0,
        help="Answers have collapsed when their mean length falls to this share of the baseline "
        "or below.",
        advanced=True,
    )
    kl_factor: float = option(
        10.0,
        label="KL jump factor",
        min=1.5,
        max=1000.0,
        help="Alarm when a step's KL is this many times its running median (over up to 50 steps).",
        advanced=True,
    )
    kl_floor: float = option(
        0.05,
        label="KL that matters",
        min=0.0,
        max=100.0,
        help="KL values below this never raise the alarm: early in a run the KL is near 0 and "
        "any change is a large factor.",
        advanced=True,
    )
    entropy_drop: float = option(
        0.05,
        label="Entropy collapse share",
        min=0.01,
        max=1.0,
        help="Entropy has collapsed when it falls to this share of its baseline or below. A "
        "model that learns becomes surer too: the healthy demo falls to 0.14–0.17 of its start "
        "in 100 steps.",
        advanced=True,
    )
    grad_factor: float = option(
        25.0,
        label="Gradient spike factor",
        min=1.5,
        max=1000.0,
        help="Alarm when a step's gradient norm is this many times its running median (over up to "
        "50 steps). GRPO's gradients vary a lot from step to step: the healthy demo reaches 13×.",
        advanced=True,
    )


def validate_alerts(c: AlertsConfig) -> list[str]:
    """Cross-field problems of the alerts section, as sentences (bounds are checked elsewhere)."""
    msgs = []
    if c.length_collapse_share >= 1.0 - min(c.length_change, 1.0):
        msgs.append(
            "Collapsed length share must be below the short end of the length change (1 − length "
            "change), or a length collapse would be reported before the answers even drift; e.g. "
            "length change 0.5 and collapsed share 0.2."
        )
    return msgs
