"""The learning-rate schedule counts optimizer updates, and counts the settings (given in training
steps) in updates too: with several updates per batch it still ends with the run's last step."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.grpo.trainer import make_scheduler


def _factors(updates: int, **algorithm) -> list[float]:
    """The factor on the learning rate at each of `updates` optimizer updates (lr 1.0)."""
    cfg = TrainConfig().replace(algorithm={"learning_rate": 1.0, **algorithm}, run={"max_steps": 4})
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = make_scheduler(opt, cfg)
    seen = []
    for _ in range(updates):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return seen


def test_linear_with_one_update_per_step():
    # max_steps 4, warm-up 1 step: W = 1, U = 4 updates.
    # update 0: warm-up (0 + 1) / 1 = 1; then 1 - (u - 1) / 3 for u = 1, 2, 3: 1, 2/3, 1/3.
    assert _factors(4, lr_scheduler="linear", warmup_steps=1) == pytest.approx([1, 1, 2 / 3, 1 / 3])


def test_two_updates_per_step_stretch_warm_up_and_decay_over_the_whole_run():
    # num_iterations 2: W = 1 × 2 = 2, U = 4 × 2 = 8 updates.
    # warm-up: (u + 1) / 2 for u = 0, 1 -> 1/2, 1; then 1 - (u - 2) / 6 for u = 2..7.
    expected = [1 / 2, 1, 1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6]
    got = _factors(8, lr_scheduler="linear", warmup_steps=1, num_iterations=2)
    assert got == pytest.approx(expected)
    # Counted in steps instead, the rate would reach 0 after update 4 and the last two training
    # steps would not learn at all.
    assert min(got) > 0


def test_cosine_over_updates_is_half_way_at_the_middle():
    # W = 0, U = 3 × 4 = 12: p = u / 12; at u = 6, (1 + cos(pi / 2)) / 2 = 1/2.
    got = _factors(12, lr_scheduler="cosine", num_iterations=3)
    assert got[0] == pytest.approx(1.0) and got[6] == pytest.approx(0.5)
    assert got[11] == pytest.approx(0.5 * (1 + torch.cos(torch.tensor(torch.pi * 11 / 12)).item()))
