"""The exported TRL project's format reward follows rewards.format_credit: settings.json carries
it to the app's RewardSet inside train.py, so TRL's "format" reward function gives per-tag
partial credit exactly as the app does (and all-or-nothing when that is the setting)."""

from __future__ import annotations

import json

import pytest

from grpo_desktop.engine.export.trl_project import write_trl_project
from grpo_desktop.engine.rewards.functions import RewardSet
from tests.support.trl_export import BASE, load_train

pytest.importorskip("trl")

TEXTS = [
    "8 × 7 = 56",
    "<think>8 × 7</think> The answer is 56.",
    "<think>8 × 7 = 56",
    "<think>7 × 8</think><answer>56",
    "<think>8 × 7</think><answer>56</answer>",
]
EXPECTED = {"all": [0.0, 0.0, 0.0, 0.0, 1.0], "per_tag": [0.0, 0.5, 0.25, 0.75, 1.0]}


@pytest.mark.parametrize("credit", ["per_tag", "all"])
def test_the_exported_format_reward_scores_with_the_runs_credit(tmp_path, credit):
    from grpo_desktop.engine.models.tiny import build_tokenizer

    cfg = BASE.replace(rewards={"format_credit": credit})
    out = tmp_path / "p"
    write_trl_project(cfg, str(out))
    settings = json.loads((out / "settings.json").read_text())
    assert settings["rewards"]["app"]["format_credit"] == credit
    train = load_train(out)
    tok = build_tokenizer()
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in TEXTS]
    n = len(TEXTS)
    problems, answers = ["What is 8 × 7?"] * n, ["56"] * n
    rewards = train.AppRewards(train.load_settings(str(out / "settings.json")), tok)
    try:
        got = {
            fn.__name__: fn(
                prompts=problems,
                completions=TEXTS,
                completion_ids=ids,
                problem=problems,
                answer=answers,
            )
            for fn in rewards.functions()
        }
    finally:
        rewards.close()
    assert got["format"] == EXPECTED[credit]
    with RewardSet(cfg.rewards) as app:
        assert got == app.score(problems, TEXTS, answers).values  # as the app scores them
