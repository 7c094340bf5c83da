"""The reward-design Lab's model (engine/lab/rewards.py, lab_verdicts.py): its rewards and
advantages are the engine's, and its verdicts name the lesson's three failure modes.

The real rollouts are one step of the built-in demo (8 prompts × G = 8, with a custom checker of
weight 0.5), recorded by the real trainer into tests/fixtures/lab_step/events.jsonl with:
    cfg = demo_config().replace(algorithm={"prompts_per_step": 8},
        rewards={"custom_checker": <the CHECKER below>, "custom_weight": 0.5},
        run={"max_steps": 1, "eval_every": 1000, "checkpoint_every": 1000, "seed": 3},
        data={"eval_size": 4})
    list(train(cfg, run_dir=d))   # keeping the run_started, rollouts, step, run_finished lines
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace

import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.events import Rollouts
from grpo_desktop.engine.lab.rewards import LabSettings, RewardLab
from grpo_desktop.engine.rewards.functions import RewardSet
from tests.support.paths import FIXTURES

FIXTURE = os.path.join(FIXTURES, "lab_step", "events.jsonl")
G = 8


@pytest.fixture(scope="module")
def step():
    """(rows with prompts, the run's config) of the recorded real step."""
    with open(FIXTURE, encoding="utf-8") as f:
        events = [json.loads(line) for line in f]
    run = next(e for e in events if e["type"] == "run_started")
    ev = next(e for e in events if e["type"] == "rollouts")
    rows = Rollouts(ev["step"], ev["rows"], ev["prompts"]).full_rows()
    return rows, TrainConfig.from_dict(run["config"])


def _lab(step) -> RewardLab:
    rows, config = step
    return RewardLab.from_rows(rows, run_checker_source=config.rewards.custom_checker)


def test_the_runs_own_settings_give_back_the_engines_rewards_and_advantages(step):
    rows, config = step
    result = _lab(step).compute(LabSettings.from_config(config))
    assert len(result.rows) == 64 and len(result.groups) == 8
    for row, recorded in zip(result.rows, rows):
        assert row.rollout.completion == recorded["completion"]
        assert row.parts == recorded["rewards"]  # accuracy and format re-scored, custom reused
        assert row.reward == pytest.approx(recorded["reward"], abs=1e-12)
        assert row.advantage == pytest.approx(recorded["advantage"], abs=1e-9)


def _by_hand(totals: list[float], scale: str, std_type: str) -> list[float]:
    """The advantages of docs/grpo.md, written out: (r − group mean) / (std + 1e-4), etc."""

    def std(xs):
        m = sum(xs) / len(xs)
        return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - (std_type == "sample")))

    out = []
    for b in range(0, len(totals), G):
        group = totals[b : b + G]
        mean = sum(group) / G
        if max(group) - min(group) < 1e-12:
            out += [0.0] * G  # no spread: exactly 0
            continue
        div = {"group": std(group) + 1e-4, "batch": std(totals) + 1e-4, "none": 1.0}[scale]
        out += [(r - mean) / div for r in group]
    return out


@pytest.mark.parametrize(
    "accuracy, fmt, custom, scale, std_type",
    [
        (1.0, 0.2, 0.5, "group", "population"),
        (1.0, 1.0, 0.0, "batch", "sample"),
        (0.5, 2.0, 1.0, "none", "population"),
        (2.0, 0.0, 0.0, "group", "sample"),
    ],
)
def test_reweighting_and_rescaling_match_the_formulas_and_the_engines_reward_set(
    step, accuracy, fmt, custom, scale, std_type
):
    rows, config = step
    settings = replace(
        LabSettings.from_config(config), accuracy_weight=accuracy, format_weight=fmt,
        custom_weight=custom, scale_rewards=scale, std_type=std_type,
    )  # fmt: skip
    result = _lab(step).compute(settings)
    # The totals from the recorded raw parts, weighted by hand.
    totals = [
        accuracy * r["rewards"]["accuracy"]
        + fmt * r["rewards"]["format"]
        + custom * r["rewards"]["custom"]
        for r in rows
    ]
    assert [r.reward for r in result.rows] == pytest.approx(totals, abs=1e-12)
    assert [r.advantage for r in result.rows] == pytest.approx(
        _by_hand(totals, scale, std_type), abs=1e-6
    )
    # And the engine's own RewardSet (accuracy and format; no checker process) agrees.
    cfg = config.replace(
        rewards={"accuracy_weight": accuracy, "format_weight": fmt, "custom_checker": ""}
    )
    with RewardSet(cfg.rewards) as reward_set:
        batch = reward_set.score(
            [r["prompt"] for r in rows],
            [r["completion"] for r in rows],
            [r["answer"] for r in rows],
        )
    lab_no_custom = [
        r.reward - custom * r.parts["custom"] if r.reward is not None else None for r in result.rows
    ]
    assert lab_no_custom == pytest.approx(
        [0.0 if t is None else t for t in batch.totals], abs=1e-12
    )


def test_the_lenient_checker_scores_the_hedge_and_the_strict_one_does_not():
    lab = RewardLab.with_builtin_group()
    strict = lab.compute(LabSettings(G=8))
    lenient = lab.compute(LabSettings(G=8, answer_checker="lenient"))
    hedge = 5  # "381 or 391" in tags
    assert strict.rows[hedge].parts["accuracy"] == 0.0
    assert strict.rows[hedge].reason == "several answers: 381, 391"
    assert lenient.rows[hedge].parts["accuracy"] == 1.0
    assert lenient.rows[hedge].advantage > 0 > strict.rows[hedge].advantage


def kinds(settings: LabSettings) -> list[str]:
    return [v.kind for v in RewardLab.with_builtin_group().compute(settings).verdicts]


def test_the_lessons_healthy_step_raises_no_verdict():
    # Accuracy 1.0, format 0.2, G = 8, Dr. GRPO's constant normaliser.
    lab = RewardLab.with_builtin_group()
    result = lab.compute(LabSettings(length_normalise=False))
    assert [v.kind for v in result.verdicts] == ["ok"]
    # Rewards 1.2, 1.2, 1.0, 0.2, 1.2, 0.2, 0, 0: mean 0.625, population std 0.53327.
    assert result.groups[0].mean == pytest.approx(0.625)
    assert result.rows[0].advantage == pytest.approx(0.575 / (0.533268 + 1e-4), abs=1e-5)
    assert result.rows[1].per_token == pytest.approx(result.rows[1].advantage / 160)


def test_reward_hacking_appears_when_format_weighs_at_least_as_much_as_accuracy():
    base = {"length_normalise": False}
    assert kinds(LabSettings(**base, format_weight=1.0)) == ["reward_hacking"]
    assert kinds(LabSettings(**base, format_weight=2.0)) == ["reward_hacking"]
    assert "reward_hacking" not in kinds(LabSettings(**base, format_weight=0.99))
    text = RewardLab.with_builtin_group().compute(LabSettings(**base, format_weight=1.0))
    # #4 is wrong in tags (0 + 1 = 1.00), #3 right without tags (1 + 0 = 1.00).
    assert "#4 is wrong but in tags and scores 1.00; #3 is right without tags and scores 1.00" in (
        text.verdicts[0].text
    )
    # Rewards 2, 2, 1, 1, 2, 1, 0, 0: mean 1.125, so the right #3 (1.00) is pushed down.
    assert "#3 is right, yet pushed down (A = -0.160)" in text.verdicts[0].text


def test_length_bias_appears_with_length_normalisation_and_shows_the_per_token_sizes():
    assert kinds(LabSettings(length_normalise=True)) == ["length_bias"]
    result = RewardLab.with_builtin_group().compute(LabSettings(length_normalise=True))
    # #2 (20 tokens) and #5 (132 tokens) have the same A = 1.0781: per token 0.0539 vs 0.0082.
    assert result.rows[1].per_token == pytest.approx(1.07807 / 20, abs=1e-5)
    assert result.rows[4].per_token == pytest.approx(1.07807 / 132, abs=1e-5)
    text = result.verdicts[0].text
    assert "#2 (20 tokens) is pushed up by +0.0539 per token" in text
    assert (
        "#5 (132 tokens) by +0.0082: for the same reward, each token of the short one moves "
        "6.6× as much (132 / 20)" in text
    )


def test_no_signal_appears_for_an_all_right_group_or_no_weights_and_not_otherwise():
    assert kinds(LabSettings(length_normalise=False, G=2)) == ["no_signal"]  # both right, tags
    result = RewardLab.with_builtin_group().compute(LabSettings(G=2, length_normalise=True))
    assert [r.advantage for r in result.rows] == [0.0, 0.0]
    assert "every rollout is right (each scores 1.20)" in result.verdicts[-1].text
    none = LabSettings(accuracy_weight=0.0, format_weight=0.0, length_normalise=False)
    assert kinds(none) == ["no_signal"]
    assert "no_signal" not in kinds(LabSettings(length_normalise=False, G=3))


def test_no_signal_on_a_real_step_names_its_all_wrong_and_all_right_groups(step):
    rows, config = step
    lab = _lab(step)
    settings = LabSettings.from_config(config)
    assert "no_signal" not in [v.kind for v in lab.compute(settings).verdicts]
    # Accuracy alone: group 1 got every answer wrong, group 5 every answer right.
    only_accuracy = replace(settings, format_weight=0.0, custom_weight=0.0)
    result = lab.compute(only_accuracy)
    flat = [g.group for g in result.groups if not g.spread]
    assert flat == [1, 5]
    assert all(r.advantage == 0.0 for r in result.rows if r.rollout.group in flat)
    text = next(v.text for v in result.verdicts if v.kind == "no_signal")
    assert "2 of 8 groups have no spread" in text
    assert "group 1: every rollout is wrong" in text and "group 5: every rollout is right" in text


def test_a_group_all_wrong_whose_rewards_differ_says_only_format_teaches_there(step):
    rows, config = step
    lab = _lab(step)
    settings = replace(LabSettings.from_config(config), custom_weight=0.0)
    # Group 1 got every answer wrong; with format 0.2 its rewards still differ (tags or not).
    result = lab.compute(settings)
    verdict = next(v for v in result.verdicts if v.title == "Only format teaches here")
    assert verdict.kind == "reward_hacking"
    assert "all equally wrong" in verdict.text
    # Accuracy alone: group 1 has no spread at all, and the verdict gives way to no_signal.
    only_accuracy = replace(settings, format_weight=0.0)
    titles = [v.title for v in lab.compute(only_accuracy).verdicts]
    assert "Only format teaches here" not in titles


def test_the_builtin_group_with_right_and_wrong_answers_keeps_its_healthy_verdict():
    result = RewardLab.with_builtin_group().compute(LabSettings(length_normalise=False, G=4))
    assert "Only format teaches here" not in [v.title for v in result.verdicts]


def test_an_edited_checker_runs_in_the_sandbox_once_per_completion(step):
    rows, config = step
    lab = _lab(step)
    source = "def check(completion, answer, prompt):\n    return float(len(completion) % 2)\n"
    settings = replace(LabSettings.from_config(config), custom_checker=source)
    assert lab.needs_checker(settings) and lab.compute(settings).custom_pending
    try:
        assert lab.run_checker(source, timeout_s=5.0) == 64
        assert lab.run_checker(source, timeout_s=5.0) == 0  # cached per completion
        result = lab.compute(settings)
    finally:
        lab.close()
    assert not result.custom_pending
    assert [r.parts["custom"] for r in result.rows] == [
        float(len(r["completion"]) % 2) for r in rows
    ]


def test_a_right_answer_whose_checker_failed_has_the_engines_unknown_total_in_the_lab():
    # Issue 27 §1 (tests/support/checker_group.py): the checker raises on a right, formatted
    # answer. The engine gives it no reward and no advantage; the Lab must give the same, both
    # with the run's recorded checker results (Open in Lab) and running the checker itself.
    from tests.support import checker_group as cg

    rows, _, _ = cg.engine_step()
    settings = LabSettings.from_config(cg.config())
    fresh = RewardLab.from_rows(rows)  # the recorded scores are not the Lab's: run the checker
    try:
        assert fresh.needs_checker(settings) and fresh.compute(settings).custom_pending
        assert fresh.run_checker(cg.CHECKER, timeout_s=5.0) == cg.G
        results = [RewardLab.from_rows(rows, run_checker_source=cg.CHECKER), fresh]
        results = [lab.compute(settings) for lab in results]
    finally:
        fresh.close()
    for result in results:
        assert not result.custom_pending
        for row, recorded in zip(result.rows, rows):
            assert row.parts == recorded["rewards"]
            assert row.reward == recorded["reward"] or row.reward == pytest.approx(
                recorded["reward"], abs=1e-12
            )
            assert row.advantage == recorded["advantage"] or row.advantage == pytest.approx(
                recorded["advantage"], abs=1e-9
            )
        failed = result.rows[2]
        assert failed.reward is None and failed.advantage is None and failed.per_token is None
        assert "ValueError" in failed.error
        assert result.groups[0].mean == pytest.approx(cg.MEAN, abs=1e-12)  # 4.2 / 3, not 1.35
        assert result.groups[0].std == pytest.approx(cg.STD, abs=1e-12)  # √0.72
        assert result.rows[3].advantage == pytest.approx(-1.414047, abs=1e-6)
