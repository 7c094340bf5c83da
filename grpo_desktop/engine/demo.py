"""The built-in demo: the config that `grpo-desktop` opens on and `train --demo` runs.

The model is `builtin:demo` (shipped weights when present, else a tiny random model built locally),
the data is the built-in arithmetic generator, rewards are accuracy 1.0 and format 0.2, and the
algorithm settings are sized so a step takes seconds on two CPU cores. Torch-free.
"""

from __future__ import annotations

from grpo_desktop.engine.config import TrainConfig

DEMO_STEPS = 30


def demo_config() -> TrainConfig:
    return TrainConfig().replace(
        model={"name_or_path": "builtin:demo"},
        lora={"enabled": True, "r": 16, "alpha": 32.0},
        data={"source": "arithmetic", "arithmetic_difficulty": 2, "eval_size": 32},
        rewards={"accuracy_weight": 1.0, "format_weight": 0.2},
        algorithm={
            "num_generations": 8,
            "prompts_per_step": 4,
            "max_completion_length": 48,
            "learning_rate": 5e-3,
            "beta": 0.04,
        },
        run={"max_steps": DEMO_STEPS, "eval_every": 10, "checkpoint_every": 10},
    )
