"""Starter settings for a small pretrained model: what a real model needs beyond the defaults.

The app's defaults were tuned on the built-in demo model (full fine-tuning, a model trained on the
format). A small pretrained model such as SmolLM2-135M-Instruct (bench/real_model.py) needs more:
LoRA at a learning rate that moves the adapters (3e-4; 1e-5 is a full fine-tuning rate), a format
reward that gives partial credit per tag (a model that never writes all the tags gets 0 from the
all-or-nothing reward on every answer, so the format reward has no spread in any group and teaches
nothing), a worked example in the format (told about the tags only, SmolLM2 wrote none in 96
sampled answers; shown one exchange, it answers in the format), and short answers on the CPU.

Those values live here and only here: `SMALL_MODEL_STARTER` (config fields) and
`SMALL_MODEL_EXAMPLE` (the worked example, written with the run's own tag names). Everything that
offers the starter reads them: `small_model_starter(cfg)` (the Hyperparameters panel's "Starter:
small real model" button), `suggests_small_model_starter(cfg, parameters)` and
`starter_recommendation` (what "Will it fit?" and `grpo-desktop estimate` recommend, with
`starter_change(cfg)` for its Apply), `starter_summary()` (why each setting: the tooltips) and
`starter_hint(cfg)` (the config warning a run logs).

Torch-free; imports only the config's section classes (train_config.py imports this module).
Try it:  python -c "from grpo_desktop.engine.config import small_model_starter, TrainConfig;
         print(small_model_starter(TrainConfig()).to_json())"
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from grpo_desktop.engine.config.training import AlgorithmConfig, RewardsConfig

if TYPE_CHECKING:
    from grpo_desktop.engine.config.train_config import TrainConfig

STARTER_LABEL = "Starter: small real model"
DEMO_MODEL = "builtin:demo"
SMALL_MODEL_MAX_PARAMETERS = 1_500_000_000  # under this, a model counts as small

# The settings, by config section (values for TrainConfig.replace). Measured on
# SmolLM2-135M-Instruct with bench/real_model.py; retune here, nowhere else.
SMALL_MODEL_STARTER: dict[str, dict[str, Any]] = {
    "lora": {"enabled": True},
    "rewards": {"format_credit": "per_tag", "format_weight": 0.5},
    "algorithm": {
        "learning_rate": 3e-4,
        "max_completion_length": 64,
        "num_generations": 8,
        "prompts_per_step": 4,
        "beta": 0.04,
        "loss_type": "grpo",
    },
}
# The worked example: (problem, reasoning, final answer); the answer is written as
# <think>reasoning</think><answer>final answer</answer> with the run's tag names.
SMALL_MODEL_EXAMPLE = ("Calculate 4 + 7.", "4 + 7 = 11", "11")

# Why each setting, for a hobbyist (starter_summary: the button's and the estimate's tooltips).
WHY: dict[str, str] = {
    "lora.enabled": "adapters train a small model on a CPU in little memory",
    "lora.learning_rate": "LoRA adapters barely move at a full fine-tuning rate such as 1e-5",
    "rewards.format_credit": "a model that never writes all the tags gets 0 from the "
    "all-or-nothing format reward on every answer, so it teaches nothing",
    "rewards.format_weight": "enough pull to adopt the format, still below accuracy",
    "data.example": "told about the tags only, a small model rarely writes them; shown one "
    "exchange in the format, it copies it",
    "algorithm.max_completion_length": "short answers keep CPU steps quick",
}


def example_answer(think_tag: str, answer_tag: str) -> str:
    """The worked example's answer in the format the run's format reward checks."""
    _, reasoning, final = SMALL_MODEL_EXAMPLE
    return f"<{think_tag}>{reasoning}</{think_tag}><{answer_tag}>{final}</{answer_tag}>"


def small_model_starter(cfg: TrainConfig) -> TrainConfig:
    """A copy of `cfg` with the starter's settings; the worked example is filled in (with the
    run's tag names) only when the run has none."""
    change = {section: dict(values) for section, values in SMALL_MODEL_STARTER.items()}
    if not _has_example(cfg):
        r = cfg.rewards
        change["data"] = {
            "example_problem": SMALL_MODEL_EXAMPLE[0],
            "example_answer": example_answer(r.think_tag, r.answer_tag),
        }
    return cfg.replace(**change)


def starter_change(cfg: TrainConfig) -> dict[str, dict[str, Any]]:
    """The fields the starter would change in `cfg` ({section: {name: value}}, for
    TrainConfig.replace or one set_value per field); empty when the run already matches."""
    after = small_model_starter(cfg)
    out: dict[str, dict[str, Any]] = {}
    for section in ("lora", "rewards", "algorithm", "data"):
        old, new = getattr(cfg, section), getattr(after, section)
        for f in dataclasses.fields(old):
            if getattr(old, f.name) != getattr(new, f.name):
                out.setdefault(section, {})[f.name] = getattr(new, f.name)
    return out


def is_small_pretrained(cfg: TrainConfig, parameters: int | None) -> bool:
    """A pretrained model (not the built-in demo) under ~1.5B parameters; an unknown count
    counts as small only when the caller cannot know it (None)."""
    if cfg.model.name_or_path.strip() in ("", DEMO_MODEL):
        return False
    return parameters is None or parameters < SMALL_MODEL_MAX_PARAMETERS


def suggests_small_model_starter(cfg: TrainConfig, parameters: int | None) -> list[str]:
    """What the starter would change, one short phrase a setting ("learning rate 3e-4 with LoRA
    (now 1e-5)"), when the model is a small pretrained one; empty when it is not or the run
    already matches. Why each: `starter_summary()`."""
    if not is_small_pretrained(cfg, parameters):
        return []
    change = starter_change(cfg)
    out: list[str] = []
    algo = dict(change.get("algorithm", {}))
    if "learning_rate" in algo or change.get("lora"):
        lr = SMALL_MODEL_STARTER["algorithm"]["learning_rate"]
        now = f"now {_text(cfg.algorithm.learning_rate)}"
        if not cfg.lora.enabled:
            now += ", full fine-tuning"
        out.append(f"learning rate {_text(lr)} with LoRA ({now})")
        algo.pop("learning_rate", None)
    rewards = change.get("rewards", {})
    if "format_credit" in rewards:
        out.append("per-tag format credit (now all-or-nothing)")
    if "format_weight" in rewards:
        out.append(
            f"{_lower(_label(RewardsConfig, 'format_weight'))} {rewards['format_weight']:g} "
            f"(now {cfg.rewards.format_weight:g})"
        )
    if change.get("data"):
        out.append("a worked example in the format (now none)")
    if "max_completion_length" in algo:
        out.append(
            f"{_lower(_label(AlgorithmConfig, 'max_completion_length'))} "
            f"{algo.pop('max_completion_length')} (now {cfg.algorithm.max_completion_length})"
        )
    for name, value in algo.items():
        out.append(
            f"{_lower(_label(AlgorithmConfig, name))} {_text(value)} "
            f"(now {_text(getattr(cfg.algorithm, name))})"
        )
    return out


def starter_recommendation(cfg: TrainConfig, parameters: int | None) -> str:
    """The suggestions as one sentence ("For a small pretrained model: …"); "" when none. Why
    each: `starter_summary()` (the estimate view's tooltip, docs/guide.md)."""
    items = suggests_small_model_starter(cfg, parameters)
    if not items:
        return ""
    return "For a small pretrained model: " + "; ".join(items) + "."


def starter_hint(cfg: TrainConfig) -> str | None:
    """One line for a run on a pretrained model with LoRA at the default learning rate (or
    lower): the adapters will barely move; the starter says what to use. None otherwise."""
    default_lr = _default(AlgorithmConfig, "learning_rate")
    if not is_small_pretrained(cfg, None) or not cfg.lora.enabled:
        return None
    if cfg.algorithm.learning_rate > default_lr:
        return None
    lr = SMALL_MODEL_STARTER["algorithm"]["learning_rate"]
    return (
        f"LoRA at learning rate {_text(cfg.algorithm.learning_rate)} barely moves the adapters of a "
        f"pretrained model; for a small one (under 1.5B parameters) use about {_text(lr)}: the "
        f"Hyperparameters panel's '{STARTER_LABEL}' sets it, with per-tag format credit and a "
        "worked example (docs/guide.md, 'Training a small real model')."
    )


def starter_summary() -> str:
    """What the starter sets and why, one line a setting (the button's tooltip)."""
    a, r = SMALL_MODEL_STARTER["algorithm"], SMALL_MODEL_STARTER["rewards"]
    return "\n".join(
        [
            f"• LoRA ({WHY['lora.enabled']}), learning rate {_text(a['learning_rate'])}: "
            f"{WHY['lora.learning_rate']}.",
            f"• Per-tag format credit: {WHY['rewards.format_credit']}.",
            f"• Format weight {r['format_weight']:g}: {WHY['rewards.format_weight']}.",
            f"• A worked example ({SMALL_MODEL_EXAMPLE[0]!r}) when the run has none: "
            f"{WHY['data.example']}.",
            f"• Max completion tokens {a['max_completion_length']}: "
            f"{WHY['algorithm.max_completion_length']}.",
            f"• G {a['num_generations']}, B {a['prompts_per_step']}, KL β {a['beta']:g}, "
            f"loss {a['loss_type']}.",
        ]
    )


def _text(value: Any) -> str:
    """A setting's value as the form shows it: 3e-4 and 1e-5, not 0.0003 and 1e-05."""
    if not isinstance(value, float):
        return str(value)
    if value and abs(value) < 1e-2:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"


def _has_example(cfg: TrainConfig) -> bool:
    return bool(cfg.data.example_problem.strip() and cfg.data.example_answer.strip())


def _label(section: type, name: str) -> str:
    for f in dataclasses.fields(section):
        if f.name == name:
            return str(f.metadata.get("label", name))
    return name


def _lower(label: str) -> str:
    """'Group size G' → 'group size G'; 'KL penalty β' stays."""
    return label[:1].lower() + label[1:] if label[1:2].islower() else label


def _default(section: type, name: str) -> Any:
    return next(f.default for f in dataclasses.fields(section) if f.name == name)


__all__ = [
    "SMALL_MODEL_EXAMPLE",
    "SMALL_MODEL_MAX_PARAMETERS",
    "SMALL_MODEL_STARTER",
    "STARTER_LABEL",
    "small_model_starter",
    "starter_change",
    "example_answer",
    "is_small_pretrained",
    "starter_hint",
    "starter_recommendation",
    "starter_summary",
    "suggests_small_model_starter",
]
