"""The built-in demo: the config that `grpo-desktop` opens on and `train --demo` runs.

The model is `builtin:demo`: a 1.6M-parameter Llama shipped in the package
(grpo_desktop/resources/demo_model, built by scripts/build_demo_model.py) that multiplies two-digit
numbers in the think/answer format and slips on large carries (17×4 = 58, so 398 instead of 408),
so about half its held-out greedy answers are wrong before training. The data is the built-in
arithmetic generator at difficulty 2: GRPO trains on its `train` pool and measures held-out
accuracy on its `test` pool, neither of which the model saw in its supervised training. Why each
setting is what it is: the comments in `demo_config`; what a run gives: bench/README.md ("The
built-in demo").

Torch-free. Try it:  grpo-desktop train --demo --out runs/demo && grpo-desktop eval runs/demo
"""

from __future__ import annotations

from grpo_desktop.engine.config import TrainConfig

DEMO_STEPS = 100


def demo_config() -> TrainConfig:
    """The demo's settings: the defaults, with what a tiny model on a CPU needs changed."""
    return TrainConfig().replace(
        model={"name_or_path": "builtin:demo"},
        # Full fine-tuning: the model is tiny, so all its weights cost no memory worth mentioning,
        # a step has no extra LoRA products, and it learns in fewer steps; LoRA at a rate high
        # enough to keep up was unstable.
        lora={"enabled": False},
        data={"source": "arithmetic", "arithmetic_difficulty": 2, "eval_size": 100},
        rewards={"accuracy_weight": 1.0, "format_weight": 0.2},
        algorithm={
            # Groups of 8 nearly always hold a right and a wrong answer at this accuracy, so
            # almost every step teaches something.
            "num_generations": 8,
            "prompts_per_step": 4,
            "max_completion_length": 160,  # a worked answer takes about 115 tokens
            "learning_rate": 2e-4,
            # No KL penalty (as in DAPO and Dr. GRPO): no reference pass; a 100-step run at this
            # learning rate stays close to where it started anyway.
            "beta": 0.0,
        },
        # A checkpoint every 10 steps (the app's default): a crash or kill loses at most 10
        # steps, for a small share of the run's time (bench/README.md, "The built-in demo").
        run={"max_steps": DEMO_STEPS, "eval_every": 10, "checkpoint_every": 10},
    )
