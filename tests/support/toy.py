"""A learnable toy task for a random tiny model, shared by the trainer, health and long-prompt
tests: the reward is the share of digits in the completion (a custom checker), so every group
has spread and every step carries signal."""

from __future__ import annotations

from grpo_desktop.engine.config import TrainConfig

# A learnable toy task for a random model: the reward is the share of digits in the completion.
# Every group has spread (rewards are continuous), so every step carries signal.
DIGITS = "def check(completion, answer, prompt):\n    return sum(c.isdigit() for c in completion) / max(1, len(completion))\n"


def toy_config(model_dir: str, **overrides) -> TrainConfig:
    cfg = TrainConfig().replace(
        model={"name_or_path": model_dir},
        data={"source": "arithmetic", "eval_size": 4, "arithmetic_size": 200},
        rewards={"accuracy_weight": 0.0, "format_weight": 0.0, "custom_checker": DIGITS},
        algorithm={
            "num_generations": 4,
            "prompts_per_step": 2,
            "max_completion_length": 12,
            "learning_rate": 0.05,
            "beta": 0.0,
        },
        run={"max_steps": 4, "eval_every": 0, "checkpoint_every": 2, "seed": 3},
    )
    for section, values in overrides.items():
        cfg = cfg.replace(**{section: values})
    return cfg
