"""One GRPO step's options: dynamic sampling keeps only groups with spread; truncated masking."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.data.dataset import Example
from grpo_desktop.engine.grpo.step import grpo_step, sample_groups
from grpo_desktop.engine.grpo.trainer import make_scheduler, train
from grpo_desktop.engine.models.loading import load_policy
from grpo_desktop.engine.rewards.functions import RewardSet

# Groups whose answer is a multiple of 5 all score 0 (no spread); others score distinct characters.
EVEN_IS_FLAT = (
    "def check(completion, answer, prompt):\n"
    "    return 0.0 if int(answer) % 5 == 0 else float(len(set(completion)))\n"
)


def _cfg(model_dir, **algo):
    return TrainConfig().replace(
        model={"name_or_path": model_dir},
        data={"eval_size": 0, "arithmetic_size": 200},
        rewards={"accuracy_weight": 0.0, "format_weight": 0.0, "custom_checker": EVEN_IS_FLAT},
        algorithm={
            "num_generations": 4,
            "prompts_per_step": 4,
            "max_completion_length": 8,
            "learning_rate": 0.01,
            "beta": 0.0,
            **algo,
        },
        run={"max_steps": 2, "eval_every": 0, "checkpoint_every": 100, "seed": 5},
    )


def test_dynamic_sampling_trains_only_on_groups_with_spread(micro_model_dir):
    cfg = _cfg(micro_model_dir, dynamic_sampling=True, max_resample_rounds=4)
    events = list(train(cfg, TrainControl()))
    assert events[-1].status == "completed", events[-1].message
    for ev in (e for e in events if e.type == "rollouts"):
        answers = {r["answer"] for r in ev.rows}
        assert answers and all(int(a) % 5 != 0 for a in answers)
        assert len(ev.rows) == 4 * 4  # refilled to B groups from later rounds
    steps = [e for e in events if e.type == "step"]
    # frac_reward_zero_std describes what was sampled (before dropping), so it is not 0 here.
    assert any(e.metrics["frac_reward_zero_std"] > 0 for e in steps)


def test_without_dynamic_sampling_flat_groups_have_zero_advantage(micro_model_dir):
    events = list(train(_cfg(micro_model_dir), TrainControl()))
    rows = [r for e in events if e.type == "rollouts" for r in e.rows]
    flat = [r for r in rows if int(r["answer"]) % 5 == 0]
    assert flat and all(r["advantage"] == 0.0 for r in flat)


def test_masking_truncated_completions_removes_them_from_the_loss(micro_model_dir):
    # With 2 new tokens a random model almost never emits EOS: every completion is truncated.
    cfg = _cfg(micro_model_dir, max_completion_length=2, mask_truncated_completions=True)
    cfg = cfg.replace(
        rewards={"custom_checker": "def check(c, a, p):\n    return float(len(set(c)))\n"}
    )
    policy = load_policy(cfg)
    rewards = RewardSet(cfg.rewards)
    try:
        torch.manual_seed(0)
        examples = [Example(f"What is {i} × 3?", str(3 * i)) for i in range(11, 15)]
        groups = sample_groups(policy, examples, cfg, rewards)
        assert bool(groups.completions.truncated.all())
        opt = torch.optim.AdamW(policy.trainable_parameters(), lr=0.01, weight_decay=0.0)
        before = [p.detach().clone() for p in policy.trainable_parameters()]
        out = grpo_step(policy, opt, make_scheduler(opt, cfg), groups, cfg)
        assert out.metrics["loss"] == 0.0 and out.metrics["grad_norm"] == 0.0
        after = policy.trainable_parameters()
        assert all(torch.equal(a, b) for a, b in zip(before, after))
        assert out.metrics["completions/clipped_ratio"] == 1.0
    finally:
        rewards.close()


def test_a_right_answer_whose_checker_failed_has_no_reward_and_stays_out_of_its_group():
    # Issue 27 §1: the checker raises on a right, well-formatted answer (row 2). Its total is
    # unknown, so it gets no advantage and the group's mean and spread come from the other three;
    # hand-derived values in tests/support/checker_group.py (mean 1.4, std √0.72, A ±…).
    from tests.support import checker_group as cg

    rows, metrics, group_std = cg.engine_step()
    assert [r["rewards"]["custom"] for r in rows] == [1.0, 1.0, None, 0.0]
    assert rows[2]["rewards"] == {"accuracy": 1.0, "format": 1.0, "custom": None}
    assert "ValueError" in rows[2]["error"]
    assert rows[2]["reward"] is None and rows[2]["advantage"] is None  # not 1.2 and −0.2
    for row, reward, adv in zip(rows, cg.REWARDS, cg.ADVANTAGES):
        assert row["reward"] == (None if reward is None else pytest.approx(reward, abs=1e-12))
        assert row["advantage"] == (None if adv is None else pytest.approx(adv, abs=1e-9))
    assert rows[0]["advantage"] == pytest.approx(0.707023, abs=1e-6)
    assert rows[3]["advantage"] == pytest.approx(-1.414047, abs=1e-6)
    assert float(group_std[0]) == pytest.approx(cg.STD, abs=1e-12)  # √0.72 = 0.848528
    assert metrics["reward"] == pytest.approx(cg.MEAN, abs=1e-12)  # 4.2 / 3, not 5.4 / 4
    assert metrics["frac_reward_zero_std"] == 0.0
    assert metrics["checker_errors"] == 1.0
