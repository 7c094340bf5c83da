"""One group of four answers to 3 × 4 whose custom checker fails on a right, well-formatted one,
scored by the engine's own code (RewardSet, compute_advantages, the step's rollout rows), for
the engine, Lab and inspector tests of issue 27 §1: that answer's total is unknown (None), so it
has no advantage and stays out of its group's mean and spread.

Weights accuracy 1, format 0.2, custom 0.8 (the checker: 1 when the tagged answer is the
reference, 0 otherwise; it raises on "boom"):

    row  completion                               acc  fmt  custom  reward
    0    <think>3*4</think><answer>12</answer>    1    1    1       1 + 0.2 + 0.8 = 2.0
    1    <think>4*3</think><answer>12</answer>    1    1    1       2.0
    2    <think>boom</think><answer>12</answer>   1    1    None    unknown (was 1.2)
    3    <think>3*4</think><answer>13</answer>    0    1    0       0.2

Over the scored rows 0, 1, 3: mean = 4.2 / 3 = 1.4; population variance =
(0.6² + 0.6² + 1.2²) / 3 = 2.16 / 3 = 0.72, std = √0.72 = 0.848528137; advantages
0.6 / (0.848528137 + 1e-4) = +0.707023 (rows 0, 1), −1.2 / 0.848628137 = −1.414047 (row 3).
The old rule summed row 2 without its checker (1.2) and gave it a negative advantage beside its
2.0 siblings: group [2, 2, 1.2, 0.2], mean 1.35, std √0.5475 = 0.739932, A = −0.15 / 0.740032
= −0.2027.

Try it: python -c "from tests.support.checker_group import engine_rows; print(engine_rows())"
"""

from __future__ import annotations

import math

CHECKER = """\
def check(completion, answer, prompt):
    if "boom" in completion:
        raise ValueError("cannot read the working")
    return 1.0 if "<answer>" + answer + "</answer>" in completion else 0.0
"""
PROMPT, ANSWER = "What is 3 × 4?", "12"
COMPLETIONS = [
    "<think>3*4</think><answer>12</answer>",
    "<think>4*3</think><answer>12</answer>",
    "<think>boom</think><answer>12</answer>",
    "<think>3*4</think><answer>13</answer>",
]
G = len(COMPLETIONS)
STD = math.sqrt(0.72)
REWARDS = [2.0, 2.0, None, 0.2]
ADVANTAGES = [0.6 / (STD + 1e-4), 0.6 / (STD + 1e-4), None, -1.2 / (STD + 1e-4)]
MEAN = 1.4


def config():
    """A TrainConfig with the table's weights and checker (G = 4, group scaling, population)."""
    from grpo_desktop.engine.config import TrainConfig

    return TrainConfig().replace(
        rewards={
            "accuracy_weight": 1.0,
            "format_weight": 0.2,
            "custom_weight": 0.8,
            "custom_checker": CHECKER,
        },
        algorithm={"num_generations": G, "prompts_per_step": 1},
    )


def engine_step():
    """(rollout rows with their prompt, step metrics, group std (B,)) as a training step writes
    them for this group: the real RewardSet and compute_advantages, the step's own row and
    metric code (no model: the completions are given)."""
    from types import SimpleNamespace

    import torch

    from grpo_desktop.engine.data.dataset import Example
    from grpo_desktop.engine.grpo import step, step_report
    from grpo_desktop.engine.grpo.loss import compute_advantages
    from grpo_desktop.engine.rewards.functions import RewardSet

    cfg = config()
    with RewardSet(cfg.rewards) as rewards:
        batch = rewards.score([PROMPT] * G, COMPLETIONS, [ANSWER] * G)
    totals = torch.tensor(
        [math.nan if t is None else t for t in batch.totals], dtype=torch.float64
    )  # (N,) as sample_groups builds it
    completions = SimpleNamespace(texts=list(COMPLETIONS), truncated=torch.zeros(G, dtype=bool))
    groups = step.Groups([Example(PROMPT, ANSWER)], completions, batch, totals)
    a = cfg.algorithm
    adv, group_std = compute_advantages(totals, G, scale=a.scale_rewards, std_type=a.std_type)
    lengths = [float(len(c)) for c in COMPLETIONS]
    rows = step_report.rollout_rows(groups, adv.tolist(), lengths)
    for row in rows:
        row["prompt"] = PROMPT  # as Rollouts.full_rows() gives them to the inspector and Lab
    return rows, step_report.step_metrics(groups, group_std, lengths, G), group_std
