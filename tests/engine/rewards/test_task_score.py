"""The accuracy reward of a reasoning-gym task run is the task's own checker on the extracted final
answer: right, wrong and hedged answers, tagged and untagged, on four tasks; through RewardSet,
`grpo-desktop score` and a one-step `grpo-desktop train` of the built-in demo model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grpo_desktop.engine.config import DataConfig, RewardsConfig, TrainConfig
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import read_events
from grpo_desktop.engine.rewards.functions import RewardSet
from grpo_desktop.engine.rewards.task_score import TaskVerifier, accuracy_verdicts_for

FOUR = ("basic_arithmetic", "countdown", "knights_knaves", "gsm_symbolic")
WRONG = {
    "basic_arithmetic": "12345",
    "countdown": "1 + 2",
    "knights_knaves": "Nobody is a knight.",
    "gsm_symbolic": "12345",
}


def task_data(task: str) -> DataConfig:
    return DataConfig(source="task", task=task, task_size=20, eval_size=5)


def scores(verifier: TaskVerifier, entry: dict, completions: list[str]) -> list[float | None]:
    q, a = entry["question"].strip(), entry["answer"]
    return [v.score for v in verifier.verdicts([q] * len(completions), completions, [a] * 3)]


@pytest.mark.parametrize("task", FOUR)
def test_right_wrong_and_hedged_answers_in_tags_and_untagged(task):
    verifier = TaskVerifier(task_data(task))
    for entry in (verifier.problems.train[0], verifier.problems.eval[0]):
        right, wrong = entry["answer"], WRONG[task]
        tagged = [
            f"<think>working</think>\n<answer>{right}</answer>",
            f"<think>working</think>\n<answer>{wrong}</answer>",
            f"<think>working</think>\n<answer>{right}</answer> or <answer>{wrong}</answer>",
        ]
        untagged = [
            f"Let me work it out.\n{right}",
            f"Let me work it out.\n{wrong}",
            f"Let me work it out.\n{right} or maybe {wrong}",
        ]
        for completions in (tagged, untagged):
            got = scores(verifier, entry, completions)
            assert got[0] == 1.0, (completions[0], got)
            assert got[1] < 1.0, (completions[1], got)
            assert got[2] == 0.0, (completions[2], got)


def test_the_tasks_partial_credit_and_the_reasons():
    verifier = TaskVerifier(task_data("countdown"))
    entry = verifier.problems.train[0]
    q, a = entry["question"].strip(), entry["answer"]
    completions = ["<answer>1 + 2</answer>", "<answer>1+2</answer><answer>3</answer>", "Hmm."]
    verdicts = verifier.verdicts([q] * 3, completions, [a] * 3)
    assert verdicts[0].score == pytest.approx(0.05) and verdicts[0].extracted == "1 + 2"
    assert verdicts[1].score == 0.0 and verdicts[1].reason.startswith("several answers")
    # countdown's checker needs the problem's numbers: found by the question, not the answer
    assert verifier.entry(q)[1]["metadata"]["target"] == entry["metadata"]["target"]
    ks = TaskVerifier(task_data("knights_knaves"))
    e = ks.problems.train[0]
    names = e["metadata"]["names"]
    half = f"{names[0]} is a knight, and {names[1]} is a knight."
    half_score = ks.verdicts([e["question"]], [f"<answer>{half}</answer>"], [e["answer"]])[0].score
    if half == e["answer"]:
        assert half_score == 1.0
    else:  # knights_knaves gives part marks per person right
        assert 0.0 <= half_score < 1.0


def test_a_problem_that_is_not_the_tasks_and_has_no_reference_is_not_scored():
    verifier = TaskVerifier(task_data("basic_arithmetic"))
    [v] = verifier.verdicts(["What is 2 + 2?"], ["<answer>4</answer>"], [""])
    assert v.score is None and "not one of the task's problems" in v.reason
    [v] = verifier.verdicts(["What is 2 + 2?"], ["<answer>4</answer>"], ["4"])
    assert v.score == 1.0  # an entry made of the question and the reference


def test_reward_set_and_the_other_sources_dispatch():
    data = task_data("gsm_symbolic")
    entry = TaskVerifier(data).problems.train[0]
    q, a = entry["question"].strip(), entry["answer"]
    with RewardSet(RewardsConfig(), data) as rs:
        batch = rs.score([q, q], [f"<answer>{a}</answer>", f"<answer>{a}1</answer>"], [a, a])
    assert batch.values["accuracy"][0] == 1.0 and batch.values["accuracy"][1] < 1.0
    assert batch.extracted[0] == a
    # not a task run: the app's own checker
    verdicts = accuracy_verdicts_for(DataConfig(), RewardsConfig(), ["x"], ["It is 18."], ["18"])
    assert verdicts[0].score == 1.0


def _cli(*args: str, cwd, timeout: int = 280) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_CACHE_HOME=str(cwd / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "grpo_desktop", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(cwd),
        timeout=timeout,
    )


def test_score_command_uses_the_tasks_checker(tmp_path):
    cfg = TrainConfig().replace(
        data={"source": "task", "task": "countdown", "task_size": 20, "eval_size": 4}
    )
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    entry = TaskVerifier(cfg.data).problems.train[3]
    q, a = entry["question"].strip(), entry["answer"]
    rows = [
        {"prompt": q, "completion": f"<think>t</think><answer>{a}</answer>", "answer": a},
        {"prompt": q, "completion": "<think>t</think><answer>1 + 2</answer>", "answer": a},
    ]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = _cli("score", "cfg.json", "--input", "s.jsonl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["rewards"]["accuracy"] for r in results] == [1.0, pytest.approx(0.05)]


@pytest.mark.timeout(300)
def test_train_one_step_of_the_demo_model_on_a_task(tmp_path):
    cfg = demo_config().replace(
        data={
            "source": "task",
            "task": "basic_arithmetic",
            "task_options": {"max_terms": 2, "max_digits": 2, "operators": ["+", "-"]},
            "task_size": 20,
            "eval_size": 4,
        },
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 8},
        run={"max_steps": 1, "eval_every": 1},
    )
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    proc = _cli("train", "cfg.json", "--out", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = read_events(str(tmp_path / "run" / "events.jsonl"))
    evals = [e for e in events if e.type == "eval"]
    assert evals and evals[-1].n == 4
    rollouts = next(e for e in events if e.type == "rollouts")
    problems = {ex["question"].strip() for ex in TaskVerifier(cfg.data).problems.train}
    assert set(rollouts.prompts) <= problems
    assert all(r["rewards"]["accuracy"] is not None for r in rollouts.rows)


def test_the_exported_trl_project_scores_with_the_tasks_checker(tmp_path):
    import importlib.util

    from grpo_desktop.engine.export.trl_project import write_trl_project

    cfg = demo_config().replace(
        data={"source": "task", "task": "countdown", "task_size": 12, "eval_size": 3}
    )
    write_trl_project(cfg, str(tmp_path / "trl"))
    settings = json.loads((tmp_path / "trl" / "settings.json").read_text())
    assert settings["data"]["task"]["task"] == "countdown"
    assert "reasoning-gym>=0.1.25" in (tmp_path / "trl" / "requirements.txt").read_text()
    rows = [json.loads(line) for line in (tmp_path / "trl" / "data" / "train.jsonl").open()]
    spec = importlib.util.spec_from_file_location("exported_train", tmp_path / "trl" / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    rewards = train.AppRewards(settings, tokenizer=None)
    try:
        q, a = rows[0]["question"], rows[0]["answer"]
        batch = rewards.reward_set.score(
            [q, q], [f"<answer>{a}</answer>", "<answer>1 + 2</answer>"], [a, a]
        )
    finally:
        rewards.close()
    assert batch.values["accuracy"] == [1.0, pytest.approx(0.05)]


def test_open_in_lab_scores_a_task_runs_rollouts_with_the_tasks_checker():
    from grpo_desktop.engine.lab.rewards import LabSettings, RewardLab

    data = task_data("countdown")
    entry = TaskVerifier(data).problems.train[1]
    q, a = entry["question"].strip(), entry["answer"]
    completions = [f"<think>t</think><answer>{a}</answer>", "<think>t</think><answer>1+2</answer>"]
    rows = [
        {"prompt": q, "completion": c, "answer": a, "length": 9, "group": 0} for c in completions
    ]
    lab = RewardLab.from_rows(rows, data=data)
    try:
        result = lab.compute(LabSettings())
    finally:
        lab.close()
    scored = sorted(result.rows, key=lambda r: r.index)
    assert [r.parts["accuracy"] for r in scored] == [1.0, pytest.approx(0.05)]


@pytest.mark.timeout(60)
def test_a_tower_of_powers_is_not_handed_to_a_checker_that_would_never_return():
    # countdown's checker evaluates with sympy, which computes 9**9**9 exactly: forever
    verifier = TaskVerifier(task_data("countdown"))
    entry = verifier.problems.train[0]
    q, a = entry["question"].strip(), entry["answer"]
    completions = [
        "<answer>9**9**9</answer>",
        "<answer>2**123456</answer>",
        "<answer>factorial(99999999)</answer>",
        "<answer>3**2</answer>",
    ]
    verdicts = verifier.verdicts([q] * 4, completions, [a] * 4)
    assert [v.score for v in verdicts] == [0.0, 0.0, 0.0, pytest.approx(0.05)]
    assert verdicts[0].reason == "powers too large to check safely"
