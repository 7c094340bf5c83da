"""Parity with TRL: our loss, gradient and clip/KL metrics equal TRL's own `_compute_loss`.

TRL is called, not copied: a bare `GRPOTrainer` (built with `__new__`, no model or dataset) gets
exactly the attributes `_compute_loss` reads, and its log-prob forward pass is replaced by a
function returning our random leaf tensor, so TRL computes loss and metrics from the same inputs.
One process, one micro-batch per optimizer step and per generation batch, so TRL's accumulation
normalisers are 1 and its dapo normaliser is `num_items_in_batch`. TRL 1.16 weights the KL term
by the importance ratio by default (`use_bias_correction_kl=True`); docs/grpo.md specifies plain
k3, so the parity runs set it False and a separate test pins how TRL's default differs.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from grpo_desktop.engine.grpo.loss import compute_advantages, policy_loss

trl = pytest.importorskip("trl")
from trl import GRPOTrainer  # noqa: E402
from trl.trainer.utils import nanstd  # noqa: E402

N, T, P = 6, 7, 3  # sequences, completion length, prompt length
MAX_COMPLETION_LENGTH = 10
ATOL = 1e-5


class _OneProcessAccelerator:
    """What `_compute_loss` asks of accelerate, for a single process."""

    num_processes = 1
    sync_gradients = True

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return tensor

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    gather_for_metrics = gather


def _random_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logps = -3.0 * torch.rand(N, T, generator=g)  # (N, T) log-probs are <= 0
    # Per-token noise plus a per-sequence offset: token and sequence ratios both leave [0.8, 1.28].
    offset = torch.tensor([-0.5, -0.25, 0.0, 0.0, 0.25, 0.5]).unsqueeze(1)  # (N, 1)
    old_logps = logps + 0.3 * torch.randn(N, T, generator=g) + offset  # (N, T)
    ref_logps = logps + 0.5 * torch.randn(N, T, generator=g)  # (N, T)
    advantages = torch.randn(N, generator=g)  # (N,)
    advantages[:2] = torch.tensor([1.0, -1.0])  # both signs on the strongly off-policy rows
    advantages[-2:] = torch.tensor([-1.0, 1.0])
    lengths = torch.tensor([7, 1, 4, 6, 2, 5])
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()  # (N, T)
    return {"logps": logps, "old": old_logps, "ref": ref_logps, "adv": advantages, "mask": mask}


def _trl_loss(
    batch: dict[str, torch.Tensor],
    *,
    loss_type: str,
    level: str,
    beta: float,
    num_items: int,
    bias_correction_kl: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Run TRL's `_compute_loss` on the batch; return (loss, grad w.r.t. logps, metrics)."""
    logps = batch["logps"].clone().requires_grad_(True)  # (N, T) leaf
    trainer: Any = GRPOTrainer.__new__(GRPOTrainer)
    trainer.__dict__.update(
        loss_type=loss_type,
        beta=beta,
        epsilon_low=0.2,
        epsilon_high=0.28,
        importance_sampling_level=level,
        max_completion_length=MAX_COMPLETION_LENGTH,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        aux_loss_enabled=False,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=1,
        model=torch.nn.Module(),  # .training is True -> TRL's "train" mode
        accelerator=_OneProcessAccelerator(),
        args=SimpleNamespace(
            use_bias_correction_kl=bias_correction_kl, delta=None, steps_per_generation=1
        ),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    entropies = torch.ones(N, T)  # (N, T) only logged
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (logps, entropies, None)
    inputs = {
        "prompt_ids": torch.ones(N, P, dtype=torch.long),
        "prompt_mask": torch.ones(N, P, dtype=torch.long),
        "completion_ids": torch.ones(N, T, dtype=torch.long),
        "completion_mask": batch["mask"],
        "advantages": batch["adv"],
        "old_per_token_logps": batch["old"],
        "ref_per_token_logps": batch["ref"],
        "num_items_in_batch": torch.tensor(num_items),
    }
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    metrics = {key: values[-1] for key, values in trainer._metrics["train"].items()}
    return loss.detach(), logps.grad, metrics


def _our_loss(
    batch: dict[str, torch.Tensor], *, loss_type: str, level: str, beta: float, num_items: int
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    logps = batch["logps"].clone().requires_grad_(True)  # (N, T) leaf
    out = policy_loss(
        logps, batch["old"], batch["ref"], batch["adv"], batch["mask"],
        loss_type=loss_type, level=level, epsilon_low=0.2, epsilon_high=0.28, beta=beta,
        max_completion_length=MAX_COMPLETION_LENGTH, num_items_in_batch=num_items,
    )  # fmt: skip
    out.loss.backward()
    return out.loss.detach(), logps.grad, out.metrics


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_loss_gradient_and_metrics_match_trl(loss_type: str, level: str, beta: float) -> None:
    batch = _random_batch(seed=7)
    # dapo: the generation batch held 36 tokens, more than this micro-batch (25): accumulation.
    num_items = int(batch["mask"].sum()) + 11
    kwargs = {"loss_type": loss_type, "level": level, "beta": beta, "num_items": num_items}
    trl_loss, trl_grad, trl_metrics = _trl_loss(batch, **kwargs)
    loss, grad, metrics = _our_loss(batch, **kwargs)

    torch.testing.assert_close(loss, trl_loss, atol=ATOL, rtol=0)
    torch.testing.assert_close(grad, trl_grad, atol=ATOL, rtol=0)
    assert grad.abs().sum() > 0
    # The inputs really exercise clipping on both sides.
    assert trl_metrics["clip_ratio/low_mean"] > 0 and trl_metrics["clip_ratio/high_mean"] > 0
    keys = ["clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"]
    keys += ["kl"] if beta else []
    assert set(metrics) == set(keys)
    for key in keys:
        assert metrics[key] == pytest.approx(trl_metrics[key], abs=ATOL), key


def test_trl_default_bias_corrected_kl_differs_in_gradient_only_on_policy() -> None:
    # TRL 1.16 default use_bias_correction_kl=True multiplies k3 by the (differentiable) ratio w.
    # On-policy w = 1: the loss equals plain k3's, but the gradient gains beta * k3 * dw/dlogp.
    # docs/grpo.md asks for plain k3; this pins the difference so a TRL change is noticed.
    batch = _random_batch(seed=3)
    batch["old"] = batch["logps"].clone()
    kwargs = {"loss_type": "bnpo", "level": "token", "beta": 0.04, "num_items": 1}
    trl_loss, trl_grad, _ = _trl_loss(batch, bias_correction_kl=True, **kwargs)
    loss, grad, _ = _our_loss(batch, **kwargs)
    torch.testing.assert_close(loss, trl_loss, atol=ATOL, rtol=0)
    # The extra gradient per token is beta * k3 / (masked token count), exactly.
    ref_diff = batch["ref"] - batch["logps"]
    k3 = torch.exp(ref_diff) - ref_diff - 1
    mask = batch["mask"].float()
    torch.testing.assert_close(trl_grad - grad, 0.04 * k3 * mask / mask.sum(), atol=ATOL, rtol=0)


# --- advantages --------------------------------------------------------------------------------
# TRL computes advantages inline in `_generate_and_score_completions` (not callable on its own), so
# we call its `nanstd` helper for the std and pin its documented check values.


def test_sample_std_matches_trl_nanstd() -> None:
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(5 * 4, generator=g)  # (B*G,) B = 5, G = 4
    rewards[[1, 6, 7]] = float("nan")  # groups 0 and 1 lose rows; each keeps >= 2 scores
    _, group_std = compute_advantages(rewards, G=4, std_type="sample")
    torch.testing.assert_close(group_std, nanstd(rewards.view(-1, 4), dim=1), atol=1e-6, rtol=0)

    # scale="batch": mean per group, TRL's nanstd over the whole batch.
    advantages, _ = compute_advantages(rewards, G=4, scale="batch", std_type="sample")
    grouped = rewards.view(-1, 4)
    expected = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)) / (nanstd(rewards) + 1e-4)
    torch.testing.assert_close(
        advantages, torch.nan_to_num(expected, nan=0.0).reshape(-1), atol=1e-6, rtol=0
    )


def test_single_score_group_has_zero_advantage_like_trl() -> None:
    # TRL's nanstd of one value is NaN (advantage NaN -> nan_to_num -> 0); ours reports std 0 and
    # the same zero advantage.
    rewards = torch.tensor([float("nan"), 1.0, 0.0, 1.0])
    assert torch.isnan(nanstd(rewards[:2].view(1, 2), dim=1)).all()
    advantages, group_std = compute_advantages(rewards, G=2, std_type="sample")
    assert advantages[:2].tolist() == [0.0, 0.0]
    assert group_std[0].item() == 0.0


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([1.0, 0.0, 0.0, 1.0], [0.865875, -0.865875, -0.865875, 0.865875]),
        ([1.0, 0.0, 0.0, 0.0], [1.49970, -0.49990, -0.49990, -0.49990]),
    ],
)
def test_trl_documented_advantages(rewards: list[float], expected: list[float]) -> None:
    advantages, _ = compute_advantages(torch.tensor(rewards), G=4, std_type="sample")
    assert advantages.tolist() == pytest.approx(expected, abs=1e-5)
