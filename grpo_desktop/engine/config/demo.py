"""The built-in demo: the config that `grpo-desktop` opens on and `train --demo` runs.

The model is `builtin:demo`: a 1.6M-parameter Llama shipped in the package
(grpo_desktop/resources/demo_model, built by scripts/build_demo_model.py) that multiplies two-digit
numbers in the lessons' format and slips on large carries (17×4 = 58, so 398 instead of 408), so
its held-out greedy accuracy starts near 40 %. The data is the built-in arithmetic generator at
difficulty 2: GRPO trains on its `train` pool and measures held-out accuracy on its `test` pool,
neither of which the model saw in its supervised training. Rewards: accuracy 1.0, format 0.2.

Why these settings, measured on 2 CPU cores (README, "Built-in demo"):
- Full fine-tuning, not LoRA: the model is tiny, so training all its weights costs no memory worth
  mentioning, each step is faster than with adapters (no extra LoRA matmuls) and it learns in
  fewer steps; LoRA at a rate high enough to keep up was unstable.
- β = 0 (no KL penalty, as in DAPO and Dr. GRPO): no reference forward pass, so steps are faster;
  a 100-step run at this learning rate stays close to where it started anyway.
- G = 8 answers per problem, 4 problems per step: groups of 8 nearly always hold a right and a
  wrong answer at this accuracy, so almost every step teaches something.
- 160 completion tokens: a worked answer takes about 115.
- A checkpoint every 10 steps (the app's default), so a crash or kill loses at most 10 steps: a
  demo checkpoint is 19 MB (6.4 MB of weights, 12.8 MB of AdamW state; two are kept) and takes
  0.06–0.13 s to save, about 1 % of a 100-step run for ten of them.

Torch-free. Try it:  grpo-desktop train --demo --out runs/demo && grpo-desktop eval runs/demo
"""

from __future__ import annotations

from grpo_desktop.engine.config import TrainConfig

DEMO_STEPS = 100


def demo_config() -> TrainConfig:
    return TrainConfig().replace(
        model={"name_or_path": "builtin:demo"},
        lora={"enabled": False},
        data={"source": "arithmetic", "arithmetic_difficulty": 2, "eval_size": 100},
        rewards={"accuracy_weight": 1.0, "format_weight": 0.2},
        algorithm={
            "num_generations": 8,
            "prompts_per_step": 4,
            "max_completion_length": 160,
            "learning_rate": 2e-4,
            "beta": 0.0,
        },
        run={"max_steps": DEMO_STEPS, "eval_every": 10, "checkpoint_every": 10},
    )
