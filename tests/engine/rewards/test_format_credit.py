"""Format credit (rewards.format_credit): "all" is the all-or-nothing format reward of before,
"per_tag" gives a quarter per well-placed tag so a model that never writes all four tags still
finds a spread. Scored through format_reward and RewardSet, as training, Try and `score` do."""

from __future__ import annotations

import itertools
import random

import pytest

from grpo_desktop.engine.config import RewardsConfig, TrainConfig, validate
from grpo_desktop.engine.rewards.functions import RewardSet, format_reward

# completion, "all", "per_tag"
TABLE = [
    ("none", "7 × 8 = 56", 0.0, 0.0),
    ("empty", "", 0.0, 0.0),
    ("only think", "<think>7 times 8 is 56", 0.0, 0.25),
    ("think block, no answer", "<think>7 times 8</think>", 0.0, 0.5),
    ("think block, then prose", "<think>7 × 8</think> The answer is 56.", 0.0, 0.5),
    ("only the answer block", "<answer>56</answer>", 0.0, 0.25),
    ("both", "<think>7 × 8</think><answer>56</answer>", 1.0, 1.0),
    ("both, whitespace around", "\n<think>7 × 8</think>\n<answer>56</answer>\n", 1.0, 1.0),
    ("both twice", "<think>a</think><answer>5</answer><think>b</think><answer>56</answer>", 0, 0),
    ("text after", "<think>7 × 8</think><answer>56</answer> So it is 56.", 0.0, 0.75),
    ("text before", "Sure! <think>7 × 8</think><answer>56</answer>", 0.0, 0.75),
    ("text between the blocks", "<think>7 × 8</think> so <answer>56</answer>", 0.0, 0.75),
    ("nested", "<think>7 × 8 <answer>56</answer></think>", 0.0, 0.5),
    ("empty answer", "<think>7 × 8</think><answer> </answer>", 0.0, 0.75),
    ("answer before reasoning", "<answer>56</answer><think>7 × 8</think>", 0.0, 0.25),
    ("answer never closed", "<think>7 × 8</think><answer>56", 0.0, 0.75),
    ("think repeated inside", "<think>a <think>b</think><answer>56</answer>", 0.0, 0.75),
]


@pytest.mark.parametrize("name,text,all_credit,per_tag", TABLE, ids=[t[0] for t in TABLE])
def test_each_credit_scores_the_table(name, text, all_credit, per_tag):
    assert format_reward([text]) == [all_credit]  # the default is "all", as before
    assert format_reward([text], credit="all") == [all_credit]
    assert format_reward([text], credit="per_tag") == [per_tag]


def test_the_tags_come_from_the_settings():
    text = "<reasoning>7 × 8</reasoning><final>56</final>"
    tags = {"think_tag": "reasoning", "answer_tag": "final"}
    assert format_reward([text], credit="per_tag", **tags) == [1.0]
    assert format_reward([text], credit="all", **tags) == [1.0]
    assert format_reward([text], credit="per_tag") == [0.0]  # not <think>/<answer>


def test_per_tag_is_whole_exactly_when_all_is_and_stays_in_0_1():
    pieces = ["<think>", "</think>", "<answer>", "</answer>", "56", " ", "\n", "so", "<think>x"]
    rng = random.Random(0)
    texts = ["".join(p) for p in itertools.product(pieces[:4] + ["56"], repeat=4)]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 9))) for _ in range(3000)]
    whole = format_reward(texts, credit="all")
    parts = format_reward(texts, credit="per_tag")
    for text, a, p in zip(texts, whole, parts):
        assert 0.0 <= p <= 1.0 and p * 4 == int(p * 4), text
        assert (a == 1.0) == (p == 1.0), text
    assert {0.0, 0.25, 0.5, 0.75, 1.0} <= set(parts)


def test_an_unknown_credit_is_refused_by_the_function_and_the_settings():
    with pytest.raises(ValueError, match="per_tag"):
        format_reward(["x"], credit="some")
    cfg = TrainConfig().replace(rewards={"format_credit": "some"})
    assert any("Format credit" in m or "format_credit" in m for m in validate(cfg))
    assert validate(TrainConfig().replace(rewards={"format_credit": "per_tag"})) == []


def test_reward_set_scores_format_with_the_runs_credit():
    texts = [t for _, t, _, _ in TABLE]
    n = len(texts)
    for credit, column in (("all", 2), ("per_tag", 3)):
        with RewardSet(RewardsConfig(format_credit=credit)) as rs:
            batch = rs.score(["What is 7 × 8?"] * n, texts, ["56"] * n)
        assert batch.values["format"] == [float(row[column]) for row in TABLE], credit
        for acc, fmt, total in zip(batch.values["accuracy"], batch.values["format"], batch.totals):
            assert total == pytest.approx(acc + 0.2 * fmt)


def test_format_credit_round_trips_through_the_settings():
    cfg = TrainConfig().replace(rewards={"format_credit": "per_tag"})
    assert TrainConfig.from_dict(cfg.to_dict()).rewards.format_credit == "per_tag"
    assert TrainConfig().rewards.format_credit == "all"  # today's behaviour stays the default
