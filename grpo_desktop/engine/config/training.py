"""Config sections for how it is trained: rewards, the GRPO algorithm and the run.

Fields are `option()`s (see config/model.py) so the form, tooltips and validation come from them.
docs/grpo.md explains what each algorithm setting does to the loss. Torch-free.

Try it:  python -c "from grpo_desktop.engine.config import AlgorithmConfig; print(AlgorithmConfig())"
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_desktop.engine.config.model import option


@dataclass
class RewardsConfig:
    accuracy_weight: float = option(
        1.0,
        label="Accuracy weight",
        min=0.0,
        max=100.0,
        help="Weight of the reward for a correct final answer. This is the real learning signal: "
        "keep it the largest weight.",
    )
    format_weight: float = option(
        0.2,
        label="Format weight",
        min=0.0,
        max=100.0,
        help="Weight of the reward for reasoning in think tags and answering in answer tags. Keep it "
        "small: at or above the accuracy weight the cheapest win is to emit tags instead of solving.",
    )
    format_credit: str = option(
        "all",
        label="Format credit",
        choices=("all", "per_tag"),
        help="all: 1 only for the whole <think>…</think><answer>…</answer> format, else 0. per_tag: "
        "a quarter for each well-placed tag (<think> opening the answer, </think> once, <answer> "
        "once right after it, </answer> once closing a non-empty answer at the end). A model that "
        "never writes all the tags gets 0 from 'all' on every answer, so the format reward has no "
        "spread and teaches nothing; per tag lets answers with more tags win from the start.",
    )
    answer_extraction: str = option(
        "auto",
        label="Answer extraction",
        choices=("auto", "answer_tag", "boxed", "last_number"),
        help="Where the final answer is read from: auto tries the answer tags, then \\boxed{}, then "
        "a final-answer sentence ('The answer is 18'), then the last number in the text.",
    )
    answer_checker: str = option(
        "strict",
        label="Answer checker",
        choices=("strict", "lenient"),
        help="strict scores one final answer: an answer that hedges ('16 or 18', two boxes, a "
        "list of numbers) scores 0, so the model cannot win by guessing several values. lenient "
        "takes the last value it finds and so rewards hedging; use it only to watch that happen.",
    )
    think_tag: str = option(
        "think",
        label="Reasoning tag",
        help="Name of the tag that holds the reasoning: think checks for <think>…</think>.",
    )
    answer_tag: str = option(
        "answer",
        label="Answer tag",
        help="Name of the tag that holds the final answer: answer checks for <answer>…</answer>.",
    )
    numeric_tolerance: float = option(
        1e-6,
        label="Numeric tolerance",
        min=0.0,
        max=1.0,
        help="Relative tolerance when both answers are plain numbers.",
        advanced=True,
    )
    custom_weight: float = option(
        1.0,
        label="Custom checker weight",
        min=0.0,
        max=100.0,
        help="Weight of your own checker's score (only used when checker code is given).",
    )
    custom_checker: str = option(
        "",
        label="Custom checker",
        help="Python source defining check(completion, answer, prompt) -> float. It runs in a separate "
        "process; errors, time-outs and non-numbers are shown per rollout and never count as 0.",
    )
    checker_timeout_s: float = option(
        5.0,
        label="Checker time limit (s)",
        min=0.05,
        max=600.0,
        help="A call to your checker that takes longer than this is stopped and scored 'no score'.",
        advanced=True,
    )
    checker_memory_mb: int = option(
        2048,
        label="Checker memory limit (MB)",
        min=256,
        max=1_048_576,
        help="Most memory your checker's process may use (Linux; macOS and Windows do not enforce "
        "it). A bigger allocation raises MemoryError in check(), shown per rollout.",
        advanced=True,
    )


@dataclass
class AlgorithmConfig:
    num_generations: int = option(
        8,
        label="Group size G",
        min=2,
        max=256,
        help="Completions sampled per prompt. The group's mean reward is the baseline, so larger "
        "groups find rare successes more often, at the cost of more generation per step.",
    )
    prompts_per_step: int = option(
        4,
        label="Prompts per step B",
        min=1,
        max=1024,
        help="Problems per training step. Each step generates B × G completions.",
    )
    max_completion_length: int = option(
        128,
        label="Max completion tokens",
        min=1,
        max=32768,
        help="Completions are cut at this length and count as truncated. Too short and every answer "
        "is cut off, which teaches nothing.",
    )
    min_completion_length: int = option(
        0,
        label="Min completion tokens",
        min=0,
        max=32768,
        help="Forbid the end-of-answer token before this many tokens. 0 (usual) lets answers be as "
        "short as they like; benchmarks pin the length so every run does the same work.",
        advanced=True,
    )
    temperature: float = option(
        1.0,
        label="Temperature",
        min=0.01,
        max=5.0,
        help="Sampling randomness. GRPO needs variety inside a group: too low and all answers in a "
        "group are the same (no signal), too high and they become noise.",
    )
    top_p: float = option(
        1.0,
        label="Top-p",
        min=0.01,
        max=1.0,
        help="Sample only from the most likely tokens covering this much probability.",
        advanced=True,
    )
    learning_rate: float = option(
        1e-5,
        label="Learning rate",
        min=1e-9,
        max=1.0,
        help="Size of each update. Raise it and the model changes faster but can collapse; LoRA "
        "usually tolerates 10× higher rates than full fine-tuning.",
    )
    lr_scheduler: str = option(
        "constant",
        label="LR schedule",
        choices=("constant", "linear", "cosine"),
        help="How the learning rate changes over the run (after warm-up).",
        advanced=True,
    )
    warmup_steps: int = option(
        0,
        label="Warm-up steps",
        min=0,
        max=100000,
        help="Steps over which the learning rate ramps up from 0.",
        advanced=True,
    )
    weight_decay: float = option(
        0.0,
        label="Weight decay",
        min=0.0,
        max=1.0,
        help="Shrinks the trained weights a little every step (AdamW). 0 is usual for short RL runs.",
        advanced=True,
    )
    max_grad_norm: float = option(
        1.0,
        label="Gradient clipping",
        min=0.0,
        max=1000.0,
        help="Gradients larger than this norm are scaled down, protecting against rare huge updates. "
        "0 turns clipping off.",
        advanced=True,
    )
    beta: float = option(
        0.04,
        label="KL penalty β",
        min=0.0,
        max=10.0,
        help="Pulls the model back toward where it started. Higher β is safer but learns slower; "
        "0 switches the penalty (and the reference model's forward pass) off.",
    )
    loss_type: str = option(
        "grpo",
        label="Loss aggregation",
        choices=("grpo", "bnpo", "dr_grpo", "dapo"),
        help="How token losses are averaged. grpo: mean per answer, then over answers (long wrong "
        "answers are punished less per token: the length bias). bnpo: mean over all tokens of the "
        "step. dr_grpo: sum divided by a constant (no length bias). dapo: mean over all tokens.",
    )
    importance_sampling_level: str = option(
        "token",
        label="Ratio level",
        choices=("token", "sequence"),
        help="token: PPO-style ratio per token. sequence (GSPO): one ratio per answer, the mean of "
        "its tokens' log-ratios. Only matters with more than one iteration per batch.",
        advanced=True,
    )
    scale_rewards: str = option(
        "group",
        label="Advantage scaling",
        choices=("group", "batch", "none"),
        help="group: divide by each group's standard deviation (GRPO). batch: by the whole step's. "
        "none: only subtract the group mean (Dr. GRPO), so easy and hard problems are not rescaled.",
    )
    std_type: str = option(
        "population",
        label="Standard deviation",
        choices=("population", "sample"),
        help="population divides by G (DeepSeekMath); sample by G − 1 (TRL).",
        advanced=True,
    )
    epsilon_low: float = option(
        0.2,
        label="Clip ε low",
        min=0.0,
        max=1.0,
        help="How far below 1 the probability ratio may go before its gradient is cut.",
        advanced=True,
    )
    epsilon_high: float | None = option(
        None,
        label="Clip ε high",
        min=0.0,
        max=10.0,
        optional=True,
        help="How far above 1 the ratio may go; empty means the same as ε low. DAPO's clip-higher "
        "uses 0.28 so rare good tokens can grow.",
        advanced=True,
    )
    num_iterations: int = option(
        1,
        label="Updates per batch",
        min=1,
        max=64,
        help="Gradient steps on each generated batch. Above 1, the ratio to the generating policy "
        "moves away from 1 and clipping starts to matter.",
        advanced=True,
    )
    dynamic_sampling: bool = option(
        False,
        label="Dynamic sampling",
        help="Drop groups whose answers all scored the same (they teach nothing) and sample new "
        "prompts in their place (DAPO).",
        advanced=True,
    )
    max_resample_rounds: int = option(
        3,
        label="Resample rounds",
        min=0,
        max=100,
        help="With dynamic sampling: how many extra generation rounds to try per step before "
        "training on what was found.",
        advanced=True,
    )
    micro_batch_size: int = option(
        0,
        label="Micro-batch size (0 = auto)",
        min=0,
        max=4096,
        help="Completions per forward/backward pass during the update; gradients are accumulated "
        "over the step. 0 = auto (recommended): as many as fit in the free GPU memory or RAM, "
        "by an estimate, and halved by itself if the GPU still runs out of memory (the step is "
        "redone, nothing is lost). A number fixes it; bnpo's loss depends on it.",
        advanced=True,
    )
    mask_truncated_completions: bool = option(
        False,
        label="Mask truncated",
        help="Leave completions that hit the length limit out of the loss.",
        advanced=True,
    )


@dataclass
class RunConfig:
    max_steps: int = option(
        100, label="Steps", min=1, max=10_000_000, help="Training steps to run."
    )
    seed: int = option(
        0, label="Seed", min=0, max=2**31 - 1, help="Makes data order and sampling repeatable."
    )
    eval_every: int = option(
        10,
        label="Evaluate every",
        min=0,
        max=1_000_000,
        help="Steps between held-out accuracy checks (also run at the start and end). 0 = only then.",
    )
    checkpoint_every: int = option(
        10,
        label="Checkpoint every",
        min=1,
        max=1_000_000,
        help="Steps between saved checkpoints. A crash loses at most this many steps.",
    )
    checkpoint_minutes: float = option(
        5.0,
        label="Checkpoint every (min)",
        min=0.0,
        max=10_000.0,
        help="Also save when this many minutes passed since the last checkpoint. 0 = off.",
        advanced=True,
    )
    keep_checkpoints: int = option(
        2,
        label="Checkpoints kept",
        min=1,
        max=1000,
        help="Older checkpoints are deleted to save disk space.",
        advanced=True,
    )
