"""Pins the GRPO math of engine.grpo.loss with hand-derived values from the lessons and docs/grpo.md."""

from __future__ import annotations

import json
import math

import pytest
import torch

from grpo_desktop.engine.grpo.loss import (
    LossOutput,
    advantage_histogram,
    compute_advantages,
    group_has_spread,
    policy_loss,
    signal_probability,
)

NAN = float("nan")


def _assert_tensor(actual: torch.Tensor, expected: list, atol: float = 1e-6) -> None:
    torch.testing.assert_close(
        actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0
    )


def _adv(rewards: list[float], G: int, **kwargs: str) -> list[float]:
    advantages, _ = compute_advantages(torch.tensor(rewards), G, **kwargs)
    return advantages.tolist()


# --- advantages ------------------------------------------------------------------------------


def test_lesson_advantages_population_std() -> None:
    # Lesson "One step on 17 x 24": mean 0.25, population std sqrt(0.75 / 4) = 0.433,
    # A = 0.75 / 0.433 = +1.732 for the right answer, -0.25 / 0.433 = -0.577 for each wrong one.
    advantages, group_std = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), G=4)
    assert advantages.tolist() == pytest.approx([1.732, -0.577, -0.577, -0.577], abs=1e-3)
    assert advantages.sum().item() == pytest.approx(0.0, abs=1e-6)  # a group's advantages cancel
    assert group_std.tolist() == pytest.approx([math.sqrt(0.1875)], abs=1e-6)


def test_trl_check_values_sample_std() -> None:
    # [1,0,0,1]: mean 0.5, sample var 4 * 0.25 / 3 = 1/3, std 0.57735; 0.5 / 0.57745 = 0.865875.
    assert _adv([1, 0, 0, 1], 4, std_type="sample") == pytest.approx(
        [0.865875, -0.865875, -0.865875, 0.865875], abs=1e-6
    )
    # [1,0,0,0]: mean 0.25, sample var 0.75 / 3 = 0.25, std 0.5; 0.75 / 0.5001, -0.25 / 0.5001.
    assert _adv([1, 0, 0, 0], 4, std_type="sample") == pytest.approx(
        [1.49970, -0.49990, -0.49990, -0.49990], abs=1e-5
    )


def test_groups_are_contiguous_and_independent() -> None:
    # Two prompts, G = 2: [1, 0] -> mean 0.5, pop std 0.5 -> +-0.5 / 0.5001; [3, 3] -> std 0 -> 0.
    advantages, group_std = compute_advantages(torch.tensor([1.0, 0.0, 3.0, 3.0]), G=2)
    assert advantages.tolist() == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0], abs=1e-6)
    assert group_std.tolist() == pytest.approx([0.5, 0.0])


def test_equal_rewards_give_zero_advantages() -> None:
    # All right or all wrong: r - mean = 0 everywhere, std 0 -> 0 / (0 + eps) = 0. No signal.
    for scale in ("group", "batch", "none"):
        assert _adv([1, 1, 1, 1, 0, 0, 0, 0], 4, scale=scale) == [0.0] * 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_groups_without_spread_get_exactly_zero(dtype, scale) -> None:
    # float32 rounding of mean(1.2, 1.2, 1.2, 1.2) left each row at about +0.0012 after dividing
    # by std + 1e-4 (179 such groups in one demo run). Every one of these groups has no spread.
    flat = [1.2] * 4 + [0.1 + 0.2] * 4 + [1e6 + 0.1] * 4 + [0.3, 0.1 + 0.2, NAN, 0.3]
    spread = [1.0, 0.0, 0.0, 0.0]  # one group with a spread, so "batch" has a std to divide by
    rewards = torch.tensor(flat + spread, dtype=torch.float64).to(dtype)
    advantages, group_std = compute_advantages(rewards, G=4, scale=scale)
    assert advantages[:16].tolist() == [0.0] * 16  # exactly, not approximately
    assert group_std[:4].tolist() == [0.0] * 4
    assert advantages[16].item() > 0 > advantages[17].item() and advantages.dtype == dtype
    assert group_has_spread(rewards, 4).tolist() == [False, False, False, False, True]


def test_group_advantages_sum_to_zero_in_float64() -> None:
    # Large offsets with a small real spread: float32 statistics would lose the 0.1 of 1e6 + 0.1.
    gen = torch.Generator().manual_seed(0)
    base = torch.tensor([1e6, 0.0, -3.5, 1e-3], dtype=torch.float64).repeat_interleave(8)
    rewards = base + torch.rand(32, generator=gen, dtype=torch.float64)  # (32,)
    rewards[5] = NAN
    advantages, _ = compute_advantages(rewards, G=8)
    for g in range(4):
        a = advantages[g * 8 : (g + 1) * 8]
        assert abs(float(a.sum())) <= 1e-6 * float(a.abs().sum())
    # 1e6 + 0.1 against 1e6 + 0.2 is a real spread and must stay one.
    a, _ = compute_advantages(torch.tensor([1e6 + 0.1, 1e6 + 0.2], dtype=torch.float64), G=2)
    assert a.tolist() == pytest.approx([-1.0, 1.0], abs=1e-2)


def test_nan_reward_gets_zero_and_does_not_shift_group() -> None:
    # [1, NaN, 0, 0] must equal the group [1, 0, 0] of three: mean 1/3, pop std sqrt(2/9) = 0.4714,
    # A = (2/3) / 0.4715 = 1.41391 and (-1/3) / 0.4715 = -0.70696; the unscored row gets 0.
    with_nan, std_nan = compute_advantages(torch.tensor([1.0, NAN, 0.0, 0.0]), G=4)
    without, std_without = compute_advantages(torch.tensor([1.0, 0.0, 0.0]), G=3)
    expected = [(2 / 3) / (math.sqrt(2 / 9) + 1e-4), (-1 / 3) / (math.sqrt(2 / 9) + 1e-4)]
    assert with_nan.tolist() == pytest.approx(
        [expected[0], 0.0, expected[1], expected[1]], abs=1e-6
    )
    assert with_nan[[0, 2, 3]].tolist() == pytest.approx(without.tolist(), abs=1e-6)
    assert std_nan.tolist() == pytest.approx(std_without.tolist(), abs=1e-6)
    assert not torch.isnan(with_nan).any()


def test_group_with_fewer_than_two_scores() -> None:
    # One scored row: mean = that reward, std 0 -> A = 0; no scored row: mean NaN -> A = 0, std 0.
    advantages, group_std = compute_advantages(torch.tensor([NAN, 1.0, NAN, NAN]), G=2)
    assert advantages.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert group_std.tolist() == [0.0, 0.0]


def test_batch_scaling() -> None:
    # Groups [1,0,0,0] (mean 0.25) and [1,1,0,0] (mean 0.5); std over all 8 rewards:
    # batch mean 3/8, population var 3/8 - 9/64 = 15/64, std sqrt(15)/8 = 0.48412.
    std = math.sqrt(15) / 8 + 1e-4
    expected = [0.75 / std] + [-0.25 / std] * 3 + [0.5 / std] * 2 + [-0.5 / std] * 2
    advantages, group_std = compute_advantages(
        torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0]), G=4, scale="batch"
    )
    assert advantages.tolist() == pytest.approx(expected, abs=1e-6)
    # group_std stays per group whatever the scale: 0.433 and 0.5.
    assert group_std.tolist() == pytest.approx([math.sqrt(0.1875), 0.5], abs=1e-6)
    # Sample batch std: var 8/7 * 15/64 = 15/56.
    std_s = math.sqrt(15 / 56) + 1e-4
    assert _adv([1, 0, 0, 0, 1, 1, 0, 0], 4, scale="batch", std_type="sample")[0] == pytest.approx(
        0.75 / std_s, abs=1e-6
    )


def test_none_scaling_is_centered_reward() -> None:
    # Dr. GRPO: A = r - mean_g, no division.
    assert _adv([1, 0, 0, 0, 1, 1, 0, 0], 4, scale="none") == pytest.approx(
        [0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5]
    )
    assert _adv([2, NAN, 0, 0], 4, scale="none") == pytest.approx([4 / 3, 0.0, -2 / 3, -2 / 3])


def test_advantages_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="groups of G=3"):
        compute_advantages(torch.zeros(4), G=3)
    with pytest.raises(ValueError, match="scale"):
        compute_advantages(torch.zeros(4), G=2, scale="global")
    with pytest.raises(ValueError, match="std_type"):
        compute_advantages(torch.zeros(4), G=2, std_type="unbiased")


# --- the lesson's tabular step -----------------------------------------------------------------


def test_lesson_tabular_step() -> None:
    # Policy: softmax over whole answers [408, 398, 418, "398 or 408"] with 25/45/25/5 %.
    # Each sampled answer is a one-token sequence; logp_i = log softmax(logits)[o_i].
    logits = torch.tensor([0.25, 0.45, 0.25, 0.05]).log().requires_grad_(True)  # (4,)
    sampled = torch.tensor([0, 1, 1, 2])  # 408, 398, 398, 418
    advantages, _ = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), G=4)
    logps = torch.log_softmax(logits, dim=0)[sampled].unsqueeze(1)  # (G, 1)
    out = policy_loss(logps, None, None, advantages, torch.ones(4, 1), loss_type="grpo")
    out.loss.backward()
    # grpo with one-token sequences and w = 1: loss = -(1/G) sum_i A_i logp_i, so
    # d loss / d logit_k = -(1/G) sum_i A_i (onehot_ik - p_k) = -(1/G) sum_{i: o_i = k} A_i
    # because sum_i A_i = 0. An SGD step with lr 0.5 moves logit_k by 0.5 * sum A / 4:
    # 408: +0.217, 398: 0.5 * (-1.155) / 4 = -0.144, 418: -0.072, hedge: 0.
    assert (-0.5 * logits.grad).tolist() == pytest.approx([0.2165, -0.1443, -0.0722, 0.0], abs=2e-4)
    with torch.no_grad():
        new_probs = torch.softmax(logits - 0.5 * logits.grad, dim=0)
    assert [round(100 * p, 1) for p in new_probs.tolist()] == [31.6, 39.6, 23.7, 5.1]


# --- signal probability ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("G", "hard", "easy"),
    [(2, 5.8, 42.0), (4, 11.5, 75.2), (8, 21.6, 94.2), (16, 38.6, 99.7)],
)
def test_signal_probability_table(G: int, hard: float, easy: float) -> None:
    # The lesson's table: 1 - p^G - (1-p)^G for p = 3 % (hard) and 70 % (easy).
    assert round(100 * signal_probability(0.03, G), 1) == hard
    assert round(100 * signal_probability(0.70, G), 1) == easy


def test_signal_probability_edges() -> None:
    assert signal_probability(0.5, 1) == 0.0  # a group of one has no baseline
    assert signal_probability(0.0, 8) == 0.0 and signal_probability(1.0, 8) == 0.0
    with pytest.raises(ValueError):
        signal_probability(1.5, 4)


# --- aggregation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loss_type", "expected"), [("grpo", 0.0), ("bnpo", -0.5), ("dapo", -0.5), ("dr_grpo", -0.25)]
)
def test_grpo_md_aggregation_check(loss_type: str, expected: float) -> None:
    # docs/grpo.md: lengths 3 and 1, A = [+1, -1], w = 1, beta = 0 -> token losses -1,-1,-1 | +1.
    # grpo: mean(-1, +1) = 0; bnpo and dapo: (-3 + 1) / 4 = -0.5; dr_grpo: -2 / (2 * 4) = -0.25.
    logps = torch.full((2, 3), -1.0, requires_grad=True)  # (N, T)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])  # (N, T)
    out = policy_loss(
        logps, None, None, torch.tensor([1.0, -1.0]), mask, loss_type=loss_type,
        max_completion_length=4,
    )  # fmt: skip
    assert isinstance(out, LossOutput)
    assert out.loss.item() == pytest.approx(expected)


def test_dapo_uses_generation_batch_token_count() -> None:
    # Same micro-batch, but the generation batch held 8 completion tokens: -2 / 8 = -0.25.
    logps = torch.full((2, 3), -1.0, requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    adv = torch.tensor([1.0, -1.0])
    for n in (8, torch.tensor(8)):
        out = policy_loss(logps, None, None, adv, mask, loss_type="dapo", num_items_in_batch=n)
        assert out.loss.item() == pytest.approx(-0.25)


def test_grpo_length_bias_gradient() -> None:
    # grpo: each token of sequence i carries A_i / |o_i| / N -> the long wrong answer (4 tokens)
    # gets 1/4 of the per-token push of the short one (1 token). dapo: every token A_i / 5.
    logps = torch.zeros(2, 4, requires_grad=True)
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 0, 0, 0]])
    adv = torch.tensor([-1.0, -1.0])
    policy_loss(logps, None, None, adv, mask, loss_type="grpo").loss.backward()
    _assert_tensor(logps.grad, [[0.125] * 4, [0.5, 0, 0, 0]])
    logps.grad = None
    policy_loss(logps, None, None, adv, mask, loss_type="dapo").loss.backward()
    _assert_tensor(logps.grad, [[0.2] * 4, [0.2, 0, 0, 0]])


# --- clipping ----------------------------------------------------------------------------------


def _clip_case(epsilon_high: float | None) -> tuple[torch.Tensor, LossOutput]:
    # Sequence 0 (A = +1) ratios [1.0, 1.5, 0.5, 1.25]; sequence 1 (A = -1) [0.5, 1.5, 1.0, 0.9].
    ratios = torch.tensor([[1.0, 1.5, 0.5, 1.25], [0.5, 1.5, 1.0, 0.9]])
    logps = torch.full((2, 4), -2.0, requires_grad=True)  # (N, T)
    old_logps = logps.detach() - ratios.log()  # so exp(logps - old_logps) = ratios
    out = policy_loss(
        logps, old_logps, None, torch.tensor([1.0, -1.0]), torch.ones(2, 4),
        loss_type="grpo", epsilon_low=0.2, epsilon_high=epsilon_high,
    )  # fmt: skip
    out.loss.backward()
    return logps.grad, out


def test_clipping_zeroes_gradient_of_clipped_tokens() -> None:
    # grpo over 2 sequences of 4 tokens: an unclipped token contributes -w*A / 8, so its gradient
    # (d w / d logp = w) is -w*A / 8. Clipped branch active -> constant -> gradient 0:
    # A > 0: w = 1.5 > 1.2 and w = 1.25 > 1.2 (eps_high defaults to eps_low) are clipped; w = 0.5
    # keeps min(0.5, 0.8) = 0.5, the unclipped branch (PPO is pessimistic), so it keeps gradient.
    # A < 0: w = 0.5 < 0.8 is clipped; w = 1.5 keeps -min(-1.5, -1.2) = 1.5, unclipped.
    grad, out = _clip_case(epsilon_high=None)
    _assert_tensor(grad, [[-1.0 / 8, 0.0, -0.5 / 8, 0.0], [0.0, 1.5 / 8, 1.0 / 8, 0.9 / 8]])
    # Loss: seq 0 -(1 + 1.2 + 0.5 + 1.2)/4 = -0.975, seq 1 (0.8 + 1.5 + 1.0 + 0.9)/4 = 1.05.
    assert out.loss.item() == pytest.approx((-0.975 + 1.05) / 2)
    # TRL's clip metrics over 8 tokens: low = (w < 0.8 & A < 0) -> 1; high = (w > 1.2 & A > 0)
    # -> 2 (1.5 and 1.25); region = 3.
    assert out.metrics == pytest.approx(
        {
            "clip_ratio/low_mean": 1 / 8,
            "clip_ratio/high_mean": 2 / 8,
            "clip_ratio/region_mean": 3 / 8,
        }
    )
    assert "kl" not in out.metrics


def test_clip_higher_keeps_gradient_below_epsilon_high() -> None:
    # DAPO clip-higher 0.28: w = 1.25 < 1.28 is no longer clipped -> gradient -1.25 / 8.
    grad, out = _clip_case(epsilon_high=0.28)
    assert grad[0].tolist() == pytest.approx([-1.0 / 8, 0.0, -0.5 / 8, -1.25 / 8])
    assert out.metrics["clip_ratio/high_mean"] == pytest.approx(1 / 8)


def test_clip_metrics_ignore_padding() -> None:
    # A clipped ratio on a padded token counts for nothing: 1 clipped of 3 real tokens.
    logps = torch.zeros(1, 4, requires_grad=True)
    old_logps = -torch.tensor([[0.0, 0.0, math.log(1.5), math.log(1.5)]])
    mask = torch.tensor([[1, 1, 1, 0]])
    out = policy_loss(logps, old_logps, None, torch.tensor([1.0]), mask)
    assert out.metrics["clip_ratio/high_mean"] == pytest.approx(1 / 3)


# --- KL ----------------------------------------------------------------------------------------


def test_kl_zero_when_ref_equals_policy() -> None:
    logps = torch.randn(3, 5).requires_grad_(True)
    mask = torch.ones(3, 5)
    adv = torch.tensor([1.0, -0.5, -0.5])
    plain = policy_loss(logps, None, None, adv, mask)
    with_kl = policy_loss(logps, None, logps.detach().clone(), adv, mask, beta=0.04)
    # k3 = e^0 - 0 - 1 = 0 everywhere.
    assert with_kl.metrics["kl"] == 0.0
    assert with_kl.loss.item() == pytest.approx(plain.loss.item())


def test_kl_positive_and_added_with_beta() -> None:
    # ref - logp = 0.5 on every token: k3 = e^0.5 - 0.5 - 1 = 0.148721. With A = 0 the policy term
    # vanishes and the loss is beta * k3 = 0.1 * 0.148721; d/dlogp of k3 = -e^0.5 + 1 = -0.648721,
    # spread over 2 x 2 tokens by the grpo mean: 0.1 * -0.648721 / 4.
    logps = torch.full((2, 2), -1.0, requires_grad=True)
    ref = torch.full((2, 2), -0.5)
    out = policy_loss(logps, None, ref, torch.zeros(2), torch.ones(2, 2), beta=0.1)
    out.loss.backward()
    k3 = math.exp(0.5) - 1.5
    assert out.metrics["kl"] == pytest.approx(k3, rel=1e-6)
    assert out.loss.item() == pytest.approx(0.1 * k3, rel=1e-6)
    _assert_tensor(logps.grad, [[0.1 * (1 - math.exp(0.5)) / 4] * 2] * 2)
    # k3 is positive on the other side too: ref - logp = -0.5 -> e^-0.5 + 0.5 - 1 = 0.106531.
    out = policy_loss(logps, None, ref - 1.0, torch.zeros(2), torch.ones(2, 2), beta=0.1)
    assert out.metrics["kl"] == pytest.approx(math.exp(-0.5) - 0.5, rel=1e-6)


def test_beta_zero_needs_no_reference_and_beta_positive_does() -> None:
    logps = torch.zeros(1, 2, requires_grad=True)
    out = policy_loss(logps, None, None, torch.ones(1), torch.ones(1, 2), beta=0.0)
    assert out.loss.item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="beta > 0 needs ref_logps"):
        policy_loss(logps, None, None, torch.ones(1), torch.ones(1, 2), beta=0.04)


def test_policy_loss_rejects_bad_arguments() -> None:
    logps = torch.zeros(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(logps, None, None, torch.ones(2), torch.ones(2, 3), loss_type="ppo")
    with pytest.raises(ValueError, match="level"):
        policy_loss(logps, None, None, torch.ones(2), torch.ones(2, 3), level="batch")
    with pytest.raises(ValueError, match=r"\(N, T\)"):
        policy_loss(logps, None, None, torch.ones(2), torch.ones(2, 4))
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logps, None, None, torch.ones(3), torch.ones(2, 3))


# --- sequence level (GSPO) ---------------------------------------------------------------------


def test_sequence_level_on_policy_equals_token_level() -> None:
    # With old = logps.detach(), every ratio is 1. At sequence level d w_i / d logp_t = 1/|o_i| on
    # real tokens, and grpo sums the |o_i| identical token losses and divides by |o_i| again, so
    # value and gradient equal the token level: -A_i / (N |o_i|) per token.
    torch.manual_seed(0)
    logps_tok = (-3 * torch.rand(3, 5)).requires_grad_(True)
    logps_seq = logps_tok.detach().clone().requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    adv = torch.tensor([1.2, -0.3, -0.9])
    tok = policy_loss(logps_tok, None, None, adv, mask, level="token")
    seq = policy_loss(logps_seq, None, None, adv, mask, level="sequence")
    tok.loss.backward()
    seq.loss.backward()
    assert seq.loss.item() == pytest.approx(tok.loss.item(), abs=1e-7)
    assert torch.allclose(logps_seq.grad, logps_tok.grad, atol=1e-7)
    expected = -(adv / (3 * mask.sum(1))).unsqueeze(1) * mask
    assert torch.allclose(logps_tok.grad, expected, atol=1e-7)


def test_sequence_level_ratio_is_exp_of_mean_log_ratio() -> None:
    # Log-ratios [0.1, -0.05, 0.09] on the real tokens (the padded 5.0 is ignored): mean 0.14 / 3,
    # w = exp(0.046667) = 1.047773, inside [0.8, 1.2] -> unclipped. grpo with A = +1: every token's
    # loss is -w, so the loss is -w and each real token's gradient is -w / 3 (d w / d logp_t = w/3).
    logps = torch.full((1, 4), -1.0, requires_grad=True)
    old_logps = logps.detach() - torch.tensor([[0.1, -0.05, 0.09, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    out = policy_loss(logps, old_logps, None, torch.ones(1), mask, level="sequence")
    out.loss.backward()
    w = math.exp(0.14 / 3)
    assert out.loss.item() == pytest.approx(-w, rel=1e-6)
    _assert_tensor(logps.grad, [[-w / 3] * 3 + [0.0]])
    # At token level, the 5.0 ratio would not matter either (masked), but per-token ratios differ.
    tok = policy_loss(logps, old_logps, None, torch.ones(1), mask, level="token")
    assert tok.loss.item() == pytest.approx(-(math.exp(0.1) + math.exp(-0.05) + math.exp(0.09)) / 3)


def test_sequence_level_clip_metrics_count_sequences() -> None:
    # As TRL: at sequence level the clip fractions are over sequences. Sequence 0 has
    # w = exp(0.5) = 1.65 > 1.2 with A > 0 -> high-clipped; sequence 1 w = 1 -> not. 1 of 2.
    logps = torch.zeros(2, 3, requires_grad=True)
    old_logps = torch.tensor([[-0.5, -0.5, -0.5], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    out = policy_loss(logps, old_logps, None, torch.tensor([1.0, 1.0]), mask, level="sequence")
    assert out.metrics["clip_ratio/high_mean"] == pytest.approx(0.5)
    assert out.metrics["clip_ratio/low_mean"] == 0.0


# --- histogram ---------------------------------------------------------------------------------


def test_advantage_histogram_counts_and_symmetric_edges() -> None:
    values = [1.732, -0.577, -0.577, -0.577, NAN, 0.0]
    hist = advantage_histogram(values)
    assert len(hist["edges"]) == 22 and len(hist["counts"]) == 21
    assert sum(hist["counts"]) == 5  # NaN ignored
    assert hist["edges"][0] == -1.732 and hist["edges"][-1] == 1.732
    assert hist["edges"] == [-e for e in reversed(hist["edges"])]
    # Bin width 2 * 1.732 / 21 = 0.165: 0 lands in the middle bin (10), -0.577 in bin
    # floor((1.732 - 0.577) / 0.165) = 7, 1.732 (the upper edge) in the last bin.
    assert hist["counts"][10] == 1 and hist["counts"][7] == 3 and hist["counts"][20] == 1
    assert json.loads(json.dumps(hist)) == hist


def test_advantage_histogram_limit_and_tensor_input() -> None:
    # Outside a fixed limit, values go to the outermost bins so nothing is lost.
    hist = advantage_histogram(torch.tensor([-5.0, 0.1, 5.0]), bins=4, limit=2.0)
    assert hist["edges"] == [-2.0, -1.0, 0.0, 1.0, 2.0]
    assert hist["counts"] == [1, 0, 1, 1]
    assert all(isinstance(c, int) for c in hist["counts"])
    empty = advantage_histogram([NAN], bins=3)
    assert empty["counts"] == [0, 0, 0] and empty["edges"][-1] == pytest.approx(1e-6)
