"""The small-model starter from the command line, in a fresh process as a user runs it:
`grpo-desktop estimate` on a pretrained-looking model folder (engine/models/tiny.py) ends with
a "Starter" line naming what to change (and --json carries the change), none once the settings
are the starter's; `grpo-desktop train` with LoRA at the default learning rate logs the one-line
hint that points at the starter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grpo_desktop.engine.config import TrainConfig, small_model_starter
from tests.support.paths import ROOT


def _run(*args: str, cache: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=ROOT, XDG_CACHE_HOME=cache)
    return subprocess.run(
        [sys.executable, "-m", "grpo_desktop", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=240,
    )


def _write(tmp_path, name: str, cfg: TrainConfig) -> str:
    path = tmp_path / name
    path.write_text(cfg.to_json())
    return str(path)


@pytest.mark.timeout(300)
def test_estimate_recommends_the_starter_for_a_small_pretrained_model(tmp_path, tiny_model_dir):
    cfg = TrainConfig().replace(model={"name_or_path": tiny_model_dir})
    cache = str(tmp_path / "cache")
    proc = _run("estimate", _write(tmp_path, "cfg.json", cfg), "--free-gb", "8", cache=cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("Starter "))
    assert (
        "Starter    For a small pretrained model: learning rate 3e-4 with LoRA (now 1e-5)" in line
    )
    assert "per-tag format credit (now all-or-nothing)" in line
    assert "a worked example in the format (now none)" in line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_estimate_json_carries_the_change_and_none_once_applied(tmp_path, tiny_model_dir):
    cfg = TrainConfig().replace(model={"name_or_path": tiny_model_dir})
    cache = str(tmp_path / "cache")
    started = small_model_starter(cfg)
    path = _write(tmp_path, "started.json", started)
    proc = _run("estimate", path, "--free-gb", "8", "--json", cache=cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1])["starter"] is None
    proc = _run("estimate", _write(tmp_path, "cfg.json", cfg), "--json", cache=cache)
    change = json.loads(proc.stdout.splitlines()[-1])["starter"]["change"]
    assert cfg.replace(**change).to_dict() == started.to_dict()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_with_lora_at_the_default_rate_logs_the_hint(tmp_path, tiny_model_dir):
    cfg = TrainConfig().replace(
        model={"name_or_path": tiny_model_dir},
        algorithm={"num_generations": 2, "prompts_per_step": 1, "max_completion_length": 4},
        data={"eval_size": 0, "arithmetic_size": 10},
        run={"max_steps": 1, "eval_every": 0, "checkpoint_every": 100},
    )
    out = str(tmp_path / "run")
    cache = str(tmp_path / "cache")
    proc = _run("train", _write(tmp_path, "cfg.json", cfg), "--out", out, cache=cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    hints = [x for x in proc.stderr.splitlines() if "barely moves the adapters" in x]
    assert len(hints) == 1, proc.stderr[-2000:]
    assert "warning: LoRA at learning rate 1e-5" in hints[0]
    assert "'Starter: small real model'" in hints[0] and "3e-4" in hints[0]
