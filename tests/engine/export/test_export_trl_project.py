"""The exported TRL project itself: prompts render as the app's, the data rows and answers are
the app's, the rewards score as the app's RewardSet (custom checker included), and the project
runs unchanged: one step in one process here, two CPU processes (gloo) in the slow suite, its
output opened with the app's TRL reader."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from grpo_desktop.engine.export.trl_project import write_trl_project
from tests.support.trl_export import BASE, load_train, make_project, run

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory)


# ---------------------------------------------------------------- prompts, data, rewards


def _templates():
    from grpo_desktop.engine.models.tiny import build_tokenizer

    chat = build_tokenizer()
    plain = build_tokenizer()
    plain.chat_template = None
    no_system = build_tokenizer()
    no_system.chat_template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        + chat.chat_template
    )
    return {"chat": chat, "plain": plain, "no_system": no_system}


@pytest.mark.parametrize("kind", ["chat", "plain", "no_system"])
@pytest.mark.parametrize("system", ["Think first.", ""])
def test_prompts_render_as_the_apps(project, kind, system):
    from grpo_desktop.engine.data.dataset import build_prompt

    _, train = project
    tok = _templates()[kind]
    prompt = train.prompt_maker(tok, system)("What is 7 × 8?")
    rendered = (
        prompt
        if isinstance(prompt, str)
        else tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    )
    assert rendered == build_prompt(tok, "What is 7 × 8?", system)
    assert isinstance(prompt, str) == (kind == "plain")


def test_file_data_keeps_the_apps_rows_columns_and_answers(project, tmp_path):
    from grpo_desktop.engine.data.dataset import load_data
    from grpo_desktop.engine.models.tiny import build_tokenizer

    _, train = project
    rows = tmp_path / "gsm.jsonl"
    lines = [
        {"problem": f"Tom has {i} apples. One more?", "solution": f"{i}+1 #### {i + 1:,}"}
        for i in range(998, 1010)
    ]
    lines.insert(3, {"problem": "", "solution": "#### 1"})  # skipped by the app: no prompt
    rows.write_text("".join(json.dumps(r) + "\n" for r in lines))
    cfg = BASE.replace(
        data={
            "source": "file",
            "path": str(rows),
            "prompt_column": "problem",
            "answer_column": "solution",
            "eval_size": 2,
        }
    )
    out = tmp_path / "p"
    summary = write_trl_project(cfg, str(out))
    settings = train.load_settings(str(out / "settings.json"))
    dataset = train.load_train_dataset(
        settings, build_tokenizer(), str(out / "data" / "train.jsonl")
    )
    app = load_data(cfg.data, cfg.run.seed)
    assert summary["train_rows"] == len(dataset) == len(app.train) == 10
    assert dataset["problem"] == [ex.problem for ex in app.train]
    assert dataset["answer"] == [ex.answer for ex in app.train]  # '#### 1,001' -> '1001'
    assert "1001" in dataset["answer"]
    assert dataset[0]["prompt"][0] == {"role": "system", "content": cfg.data.system_prompt}
    assert len((out / "data" / "heldout.jsonl").read_text().splitlines()) == 2


def test_rewards_score_as_the_apps_reward_set(project, tmp_path):
    from grpo_desktop.engine.models.tiny import build_tokenizer
    from grpo_desktop.engine.rewards.functions import RewardSet

    _, train = project
    checker = "def check(completion, answer, prompt):\n    if 'boom' in completion:\n        raise ValueError('boom')\n    return float(answer in completion)\n"
    cfg = BASE.replace(rewards={"custom_checker": checker, "custom_weight": 0.5})
    out = tmp_path / "p"
    write_trl_project(cfg, str(out))
    assert (out / "custom_checker.py").read_text() == checker
    tok = build_tokenizer()
    texts = [
        "<think>7*8</think><answer>56</answer>",
        "It is 54 or 56.",
        "<think>x</think><answer>boom</answer>",
        "The answer is 56",
    ]
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    problems, answers = ["What is 7 × 8?"] * 4, ["56"] * 4
    extra, metrics = {}, {}
    train = load_train(out)  # this export's train.py reads its custom_checker.py
    rewards = train.AppRewards(train.load_settings(), tok)
    try:
        got = {
            fn.__name__: fn(
                prompts=problems,
                completions=texts,
                completion_ids=ids,
                problem=problems,
                answer=answers,
                log_extra=lambda k, v: extra.setdefault(k, v),
                log_metric=lambda k, v: metrics.setdefault(k, v),
            )
            for fn in rewards.functions()
        }
    finally:
        rewards.close()
    with RewardSet(cfg.rewards) as app:
        expected = app.score(problems, texts, answers)
    assert list(got) == expected.names == ["accuracy", "format", "custom"]
    assert got == expected.values
    assert got["accuracy"] == [1.0, 0.0, 0.0, 1.0]  # the hedge scores 0 (strict checker)
    assert extra["extracted"][0] == "56" and extra["answer"] == answers
    assert extra["reasons"][0] is None
    assert "several answers" in extra["reasons"][1]
    assert got["custom"][2] is None and "boom" in extra["checker_error"][2]
    assert extra["checker_error"][0] is None
    assert metrics["checker_error_rate"] == 0.25


# ---------------------------------------------------------------- real runs


def _logged_steps(out: Path) -> list[dict]:
    state = json.loads((out / "trainer_state.json").read_text())
    return [h for h in state["log_history"] if "loss" in h]


METRICS = (
    "reward",
    "reward_std",
    "rewards/accuracy/mean",
    "rewards/format/mean",
    "frac_reward_zero_std",
    "kl",
    "entropy",
    "loss",
    "grad_norm",
    "learning_rate",
    "completions/mean_length",
    "completions/clipped_ratio",
    "clip_ratio/region_mean",
    "num_tokens",
    "step_time",
)


def test_the_exported_project_trains_one_step_unchanged(project, tmp_path):
    folder, _ = project
    out = tmp_path / "out"
    result = run(
        [sys.executable, "train.py", "--max_steps", "1", "--output_dir", str(out)], folder, 300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GRPO on 1 process(es) (cpu, backend none)" in result.stderr
    (step,) = _logged_steps(out)
    assert step["step"] == 1
    assert set(METRICS) <= set(step), sorted(set(METRICS) - set(step))
    import pandas as pd

    table = pd.read_parquet(out / "completions" / "completions_00001.parquet")
    assert len(table) == 4  # B·G
    assert {
        "prompt",
        "completion",
        "accuracy",
        "format",
        "advantage",
        "extracted",
        "answer",
    } <= set(table.columns)
    assert (out / "adapter_config.json").is_file()  # LoRA: the trained adapter is saved
    # The app opens the output folder: one step in the plots, its four rollouts with the gold
    # answer and the answer the checker read.
    from grpo_desktop.session.trl_run import TrlRunReader

    events = TrlRunReader(str(out)).poll()
    assert [e.step for e in events if e.type == "step"] == [1]
    (rollouts,) = [e for e in events if e.type == "rollouts"]
    assert len(rollouts.rows) == 4
    assert all("extracted" in row and row["answer"].isdigit() for row in rollouts.rows)


@pytest.mark.slow
def test_the_exported_project_trains_on_two_cpu_processes(project, tmp_path):
    folder, _ = project
    out = tmp_path / "out"
    # accelerate 1.15 starts several CPU processes only through MPI (`--cpu --num_processes 2`
    # starts one); on a machine without a GPU, --multi_gpu starts two with torchrun and train.py
    # puts them on the CPU, where accelerate joins them with gloo.
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes"]
    cmd += ["2", "train.py", "--max_steps", "2", "--output_dir", str(out)]
    result = run(cmd, folder, 600, {"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GRPO on 2 process(es) (cpu, backend gloo)" in result.stderr
    assert "x 2 = 4 completions per step" in result.stderr
    steps = _logged_steps(out)
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert set(METRICS) <= set(step)
    assert sorted(os.listdir(out / "completions")) == [
        "completions_00001.parquet",
        "completions_00002.parquet",
    ]


@pytest.mark.slow
def test_accelerate_cpu_flag_with_two_processes_is_explained(project, tmp_path):
    """The issue's `accelerate launch --num_processes 2 --cpu` starts one process in accelerate
    1.15 (its simple launcher; several CPU processes need MPI): train.py says so and trains."""
    folder, _ = project
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu"]
    cmd += ["train.py", "--max_steps", "1", "--output_dir", str(out)]
    result = run(cmd, folder, 600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "started one process" in result.stderr and "--multi_gpu --num_processes N" in result.stderr
    )
    assert "GRPO on 1 process(es)" in result.stderr
    assert [s["step"] for s in _logged_steps(out)] == [1]


@pytest.mark.slow
def test_a_run_resumes_from_its_last_checkpoint(project, tmp_path):
    folder, _ = project
    out = tmp_path / "out"
    first = run(
        [sys.executable, "train.py", "--max_steps", "1", "--output_dir", str(out)], folder, 300
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()
    cmd = [sys.executable, "train.py", "--max_steps", "2", "--output_dir", str(out)]
    again = run([*cmd, "--resume_from_checkpoint", "last"], folder, 300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [s["step"] for s in _logged_steps(out)] == [1, 2]  # step 1 restored, step 2 trained
