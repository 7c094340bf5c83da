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


def _assert_step_was_the_gradient(policy, before, grads):
    """An SGD step at learning rate 1 moved every trainable parameter by its gradient: the
    step's gradient equals `grads` (the reference's), within float rounding."""
    moved = [b - a for a, b in zip(policy.trainable_parameters(), before)]
    scale = max(float(g.abs().max()) for g in grads)
    assert scale > 0
    for g, m in zip(grads, moved):
        assert torch.allclose(g, m, atol=1e-5 * scale, rtol=1e-4)


def _reference_update(policy, groups, cfg):
    """The step's loss, entropy and gradients computed the plain way: every row, one pass."""
    from grpo_desktop.engine.grpo.loss import compute_advantages, policy_loss
    from grpo_desktop.engine.sampling.rollout import token_logps

    a, c = cfg.algorithm, groups.completions
    advantages, _ = compute_advantages(groups.totals, a.num_generations)  # (N,)
    policy.model.train()
    logps, entropy = token_logps(
        policy.model,
        c.prompt_ids,
        c.prompt_mask,
        c.completion_ids,
        c.completion_mask,
        a.temperature,
        with_entropy=True,
    )  # (N, C) each
    out = policy_loss(
        logps,
        None,
        None,
        advantages,
        c.completion_mask,
        loss_type=a.loss_type,
        max_completion_length=a.max_completion_length,
    )
    out.loss.backward()
    grads = [p.grad.detach().clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad(set_to_none=True)
    mask = c.completion_mask
    return float(out.loss), float((entropy * mask).sum() / mask.sum()), grads


@pytest.mark.parametrize(
    "loss_type, sampler_entropy",
    [("grpo", True), ("dr_grpo", True), ("dapo", True), ("bnpo", True), ("grpo", False)],
)
def test_rows_without_advantage_are_left_out_of_the_update_with_the_same_gradient(
    micro_model_dir, loss_type, sampler_entropy, monkeypatch
):
    # Issue 28: rows of flat groups (advantage 0) add nothing to the gradient, so the update
    # skips them; the loss, the entropy over every row and the gradient stay what all rows give.
    # The entropy comes from the sampler; without it (a model that fell back to `generate`)
    # the skipped rows get a pass without gradients to measure it.
    from grpo_desktop.engine.grpo import step as step_module

    cfg = _cfg(micro_model_dir, max_completion_length=12, loss_type=loss_type)
    policy = load_policy(cfg)
    rewards = RewardSet(cfg.rewards)
    passes = []
    real = step_module._Batch.token_logps

    def counting(self, model, s, with_entropy=False):
        passes.append((self.N, torch.is_grad_enabled(), self.advantages[s].tolist()))
        return real(self, model, s, with_entropy)

    monkeypatch.setattr(step_module._Batch, "token_logps", counting)
    try:
        torch.manual_seed(3)
        # 10 and 15 give flat groups (every reward 0); 11 and 13 groups with spread.
        examples = [Example(f"What is {i} × 1?", str(i)) for i in (10, 11, 15, 13)]
        groups = sample_groups(policy, examples, cfg, rewards)
        assert groups.completions.entropy is not None
        if not sampler_entropy:
            groups.completions.entropy = None
        loss, entropy, grads = _reference_update(policy, groups, cfg)
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=1.0)
        before = [p.detach().clone() for p in policy.trainable_parameters()]
        out = grpo_step(policy, opt, make_scheduler(opt, cfg), groups, cfg)
    finally:
        rewards.close()
    graded = [adv for n, grad, advs in passes if grad for adv in advs]
    if loss_type == "bnpo":  # its micro-batch divisor needs every row: nothing is left out
        assert len(graded) == 16
    else:
        assert len(graded) == 8 and all(adv != 0 for adv in graded)
        quiet = [adv for n, grad, advs in passes if not grad for adv in advs]
        if sampler_entropy:
            assert quiet == []  # no pass at all over the rows that teach nothing
        else:
            assert len(quiet) == 8 and all(adv == 0 for adv in quiet)  # measured for the entropy
    assert out.metrics["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert out.metrics["entropy"] == pytest.approx(entropy, rel=1e-5)
    _assert_step_was_the_gradient(policy, before, grads)


@pytest.mark.parametrize("loss_type, beta", [("grpo", 0.0), ("dapo", 0.0), ("dr_grpo", 0.04)])
def test_each_micro_batch_reads_only_its_own_columns_with_the_same_gradient(
    micro_model_dir, loss_type, beta, monkeypatch
):
    # Issue 28 (SmolLM2: one answer of 64 tokens made every group's pass 64 wide while most
    # ended near 25): a micro-batch's pass cuts the completion padding all its rows share (and
    # the prompt padding on the left), so a group of short answers pays for its own length.
    # The loss, the entropy and the gradient stay what one full-width pass over all rows gives.
    from grpo_desktop.engine.grpo import step as step_module

    cfg = _cfg(micro_model_dir, max_completion_length=12, loss_type=loss_type, beta=beta)
    cfg = cfg.replace(algorithm={"micro_batch_size": 4})  # one group per pass
    policy = load_policy(cfg)
    rewards = RewardSet(cfg.rewards)
    widths = []
    real = step_module.token_logps

    def recording(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *a, **k):
        longest = int(completion_mask.sum(dim=1).max())  # the longest of these rows' answers
        widths.append((torch.is_grad_enabled(), completion_ids.size(1), longest))
        return real(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *a, **k)

    monkeypatch.setattr(step_module, "token_logps", recording)
    try:
        torch.manual_seed(4)
        examples = [Example(f"What is {i} × 1?", str(i)) for i in (11, 12, 13, 14)]
        groups = sample_groups(policy, examples, cfg, rewards)
        c = groups.completions
        C = c.completion_ids.size(1)
        assert C == 12  # a random model runs (nearly) every row to the limit
        # Group 0's answers end after 3 tokens, group 1's after 3 to 6, as if they had met EOS;
        # one answer each of groups 2 and 3 runs to the limit.
        c.completion_mask[0:4, 3:] = 0
        for row, end in zip(range(4, 8), (3, 6, 4, 5)):
            c.completion_mask[row, end:] = 0
        c.completion_mask[[8, 12]] = 1
        loss, entropy, grads = _reference_update(policy, groups, cfg)
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=1.0)
        before = [p.detach().clone() for p in policy.trainable_parameters()]
        widths.clear()
        out = grpo_step(policy, opt, make_scheduler(opt, cfg), groups, cfg)
    finally:
        rewards.close()
    # Every pass is as wide as its longest answer, no wider (rows of flat groups are left out
    # of the update, so a pass may hold rows of two groups); group 0's pass is 3 wide.
    assert widths and all(width == longest for _, width, longest in widths)
    graded = [w for grad, w, _ in widths if grad]
    assert graded[0] == 3 and sum(graded) < 12 * len(graded)
    if beta > 0:  # the reference's pass (no gradient) over every row, one group at a time
        assert [w for grad, w, _ in widths if not grad] == [3, 6, 12, 12]
    assert out.metrics["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert out.metrics["entropy"] == pytest.approx(entropy, rel=1e-5)
    _assert_step_was_the_gradient(policy, before, grads)


@pytest.mark.parametrize("loss_type, beta", [("grpo", 0.04), ("dapo", 0.0)])
def test_packed_passes_give_the_padded_steps_loss_and_gradient(
    micro_model_dir, loss_type, beta, monkeypatch
):
    # A group's answers of uneven length go through the log-prob passes packed into one row
    # (engine/sampling/packing.py; forced on here, whatever the cost rule says): the step's
    # loss, entropy and gradient stay those of the padded passes.
    from grpo_desktop.engine.sampling import logps as logps_module
    from grpo_desktop.engine.sampling import packing

    cfg = _cfg(micro_model_dir, max_completion_length=12, loss_type=loss_type, beta=beta)
    policy = load_policy(cfg)
    rewards = RewardSet(cfg.rewards)
    packed = []
    real = logps_module._kept_hidden_packed

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        packed.append(out is not None)
        return out

    monkeypatch.setattr(logps_module, "_kept_hidden_packed", recording)
    try:
        torch.manual_seed(4)
        examples = [Example(f"What is {i} × 1?", str(i)) for i in (11, 12, 13, 14)]
        groups = sample_groups(policy, examples, cfg, rewards)
        c = groups.completions
        for row in range(16):  # answers of 1 to 12 tokens, as if they had met EOS
            c.completion_mask[row, 1 + (row * 5) % 12 :] = 0
        monkeypatch.setattr(packing, "PACK_BELOW", 0.0)  # never pack: the reference
        loss, entropy, grads = _reference_update(policy, groups, cfg)
        assert packed and not any(packed)
        monkeypatch.setattr(packing, "PACK_BELOW", 100.0)  # always pack
        packed.clear()
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=1.0)
        before = [p.detach().clone() for p in policy.trainable_parameters()]
        out = grpo_step(policy, opt, make_scheduler(opt, cfg), groups, cfg)
    finally:
        rewards.close()
    assert packed and all(packed)  # every pass (the reference's too at β > 0) packed
    assert out.metrics["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert out.metrics["entropy"] == pytest.approx(entropy, rel=1e-5)
    _assert_step_was_the_gradient(policy, before, grads)


def test_a_step_where_no_row_teaches_still_steps_the_optimizer_with_a_zero_gradient(
    micro_model_dir,
):
    # Every group flat: no forward or backward with gradients, but AdamW's weight decay (and
    # any momentum) applies as it would after a backward of the zero loss.
    cfg = _cfg(micro_model_dir, max_completion_length=6)
    policy = load_policy(cfg)
    rewards = RewardSet(cfg.rewards)
    try:
        torch.manual_seed(0)
        examples = [Example(f"What is {i} × 1?", str(i)) for i in (10, 15, 20, 25)]
        groups = sample_groups(policy, examples, cfg, rewards)
        opt = torch.optim.AdamW(policy.trainable_parameters(), lr=0.1, weight_decay=0.5)
        lr = opt.param_groups[0]["lr"]  # the first update's, as the schedule set it
        before = [p.detach().clone() for p in policy.trainable_parameters()]
        out = grpo_step(policy, opt, make_scheduler(opt, cfg), groups, cfg)
    finally:
        rewards.close()
    assert lr > 0
    assert out.metrics["frac_reward_zero_std"] == 1.0
    assert out.metrics["loss"] == 0.0 and out.metrics["grad_norm"] == 0.0
    assert out.metrics["entropy"] > 0  # still measured, over every row
    for b, p in zip(before, policy.trainable_parameters()):
        # AdamW after a zero gradient: the decay p·(1 − lr·wd), and no Adam move (m = v = 0).
        assert torch.allclose(p, b * (1 - lr * 0.5), rtol=1e-6, atol=1e-9)
