"""The command line: config printing, a real demo run, and bad input that gets a clear message."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grpo_desktop.cli import main
from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.events import read_events


def _cfg_file(tmp_path, cfg: TrainConfig, name="cfg.json") -> str:
    path = tmp_path / name
    path.write_text(cfg.to_json())
    return str(path)


def _small(cfg: TrainConfig, model_dir: str) -> TrainConfig:
    return cfg.replace(
        model={"name_or_path": model_dir},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 6},
        run={"max_steps": 1},
        data={"eval_size": 2},
    )


def test_config_demo_prints_a_valid_config(capsys):
    assert main(["config", "--demo"]) == 0
    cfg = TrainConfig.from_json(capsys.readouterr().out)
    assert cfg.validate() == [] and cfg.model.name_or_path == "builtin:demo"
    assert main(["config", "--preset", "dapo"]) == 0
    assert TrainConfig.from_json(capsys.readouterr().out).algorithm.loss_type == "dapo"


def test_missing_config_file(tmp_path, capsys):
    assert main(["train", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "nope.json" in err and "not found" in err and "Traceback" not in err


def test_invalid_config_values_are_listed(tmp_path, capsys, micro_model_dir):
    cfg = _small(TrainConfig(), micro_model_dir).replace(
        algorithm={"num_generations": 1, "learning_rate": -1.0}
    )
    assert main(["train", _cfg_file(tmp_path, cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "Group size G" in err and "Learning rate" in err and "Traceback" not in err


def test_malformed_jsonl_line_is_named(tmp_path, capsys, micro_model_dir):
    data = tmp_path / "data.jsonl"
    data.write_text(
        '{"question": "1+1", "answer": "2"}\n{"question": "2+2", "answer": "4"}\n{oops\n'
    )
    cfg = _small(TrainConfig(), micro_model_dir).replace(
        data={"source": "file", "path": str(data), "eval_size": 0}
    )
    assert main(["train", _cfg_file(tmp_path, cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and "Traceback" not in err


def test_missing_column_lists_the_columns(tmp_path, capsys, micro_model_dir):
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"problem": f"{i}+1", "solution": str(i + 1)}) + "\n" for i in range(6))
    )
    cfg = _small(TrainConfig(), micro_model_dir).replace(
        data={"source": "file", "path": str(data), "eval_size": 0}
    )
    assert main(["train", _cfg_file(tmp_path, cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "question" in err and "problem" in err and "solution" in err


def test_missing_model_folder(tmp_path, capsys):
    cfg = _small(TrainConfig(), str(tmp_path / "no-model"))
    assert main(["train", _cfg_file(tmp_path, cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "Model folder not found" in err and "no-model" in err


def test_refuses_to_overwrite_a_run(tmp_path, capsys, micro_model_dir):
    out = tmp_path / "o"
    out.mkdir()
    (out / "events.jsonl").write_text("")
    cfg = _small(TrainConfig(), micro_model_dir)
    assert main(["train", _cfg_file(tmp_path, cfg), "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err


def test_train_then_resume_continues_the_step_count(tmp_path, micro_model_dir):
    out = str(tmp_path / "run")
    cfg = _small(TrainConfig(), micro_model_dir).replace(
        run={"max_steps": 2, "checkpoint_every": 1}
    )
    assert main(["train", _cfg_file(tmp_path, cfg), "--out", out, "--quiet"]) == 0
    assert main(["train", "--resume", out, "--steps", "3", "--quiet"]) == 0
    events = read_events(os.path.join(out, "events.jsonl"))
    starts = [e for e in events if e.type == "run_started"]
    assert [s.start_step for s in starts] == [0, 2]
    assert [e.step for e in events if e.type == "step"] == [1, 2, 3]


@pytest.mark.timeout(300)
def test_python_m_train_demo_writes_events(tmp_path):
    """The real entry point in a fresh process: `python -m grpo_desktop train --demo`."""
    out = tmp_path / "demo"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo_desktop",
            "train",
            "--demo",
            "--out",
            str(out),
            "--steps",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 2/2" in proc.stderr
    types = {e.type for e in read_events(str(out / "events.jsonl"))}
    assert types >= {"run_started", "rollouts", "step", "eval", "checkpoint", "run_finished"}
