"""Format credit in the Lab's model (engine/lab/rewards.py, verdicts.py): on a group where no
answer has all the tags, all-or-nothing credit gives the format no share of any advantage and the
"format_flat" verdict; per-tag credit gives the answers with more tags a positive share. The
share is exact: advantage = accuracy's share + format's share, for every advantage scaling."""

from __future__ import annotations

import pytest

from grpo_desktop.engine.lab.rewards import LabRollout, LabSettings, RewardLab


def _kinds(result) -> list[str]:
    return [v.kind for v in result.verdicts]


def test_all_or_nothing_on_the_untagged_group_teaches_no_format():
    result = RewardLab.with_builtin_group("untagged").compute(LabSettings(length_normalise=False))
    assert [r.parts["format"] for r in result.rows] == [0.0] * 8
    assert [r.format_advantage for r in result.rows] == [0.0] * 8
    assert _kinds(result) == ["format_flat"]
    assert "Switch Format credit to per tag" in result.verdicts[0].text


def test_per_tag_pushes_the_answers_with_more_tags_up():
    settings = LabSettings(format_credit="per_tag", length_normalise=False)
    result = RewardLab.with_builtin_group("untagged").compute(settings)
    fmt = [r.parts["format"] for r in result.rows]
    mean = sum(fmt) / len(fmt)
    assert fmt == [0, 0, 0, 0.5, 0.25, 0.75, 0.25, 0.75]
    for r in result.rows:
        assert (r.format_advantage > 0) == (r.parts["format"] > mean)
    assert "format_flat" not in _kinds(result)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("credit", ["all", "per_tag"])
def test_the_format_share_and_the_accuracy_share_make_the_advantage(scale, credit):
    s = LabSettings(format_credit=credit, scale_rewards=scale, format_weight=0.5)
    result = RewardLab.with_builtin_group("multiply").compute(s)
    rows = result.rows
    acc_mean = sum(r.parts["accuracy"] for r in rows) / len(rows)
    # The divisor of this group's advantages, from any row that moved.
    k = max(range(len(rows)), key=lambda i: abs(rows[i].advantage))
    mean = sum(r.reward for r in rows) / len(rows)
    divisor = (rows[k].reward - mean) / rows[k].advantage
    for r in rows:
        accuracy_share = 1.0 * (r.parts["accuracy"] - acc_mean) / divisor
        assert r.advantage == pytest.approx(accuracy_share + r.format_advantage, abs=1e-9)


def test_per_tag_without_a_single_tag_points_at_the_system_prompt():
    rollouts = [LabRollout("What is 2 + 2?", t, "4", 3) for t in ("4", "It is 4.", "5", "2+2=4")]
    lab = RewardLab(rollouts)
    result = lab.compute(LabSettings(format_credit="per_tag"))
    (flat,) = [v for v in result.verdicts if v.kind == "format_flat"]
    assert "system prompt" in flat.text and "per tag" not in flat.text
    assert "format_flat" not in _kinds(lab.compute(LabSettings(format_weight=0.0)))


def test_the_run_settings_bring_their_credit():
    from grpo_desktop.engine.config import TrainConfig

    cfg = TrainConfig().replace(rewards={"format_credit": "per_tag"})
    assert LabSettings.from_config(cfg).format_credit == "per_tag"
    assert LabSettings.from_config(TrainConfig()).format_credit == "all"
