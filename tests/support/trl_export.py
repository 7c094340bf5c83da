"""Shared by the TRL export tests: a small exported project and the exported train.py loaded as
a module, so its own functions build the GRPOConfig in the test process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.export.trl_project import write_trl_project
from tests.support.paths import ROOT as REPO_ROOT

ROOT = Path(REPO_ROOT)

# Small and quick: B·G = 4 completions of at most 8 tokens; 24 problems.
BASE = TrainConfig().replace(
    algorithm={"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8},
    data={"arithmetic_size": 24, "eval_size": 4},
    run={"max_steps": 3},
)


def load_train(folder: Path):
    """The exported folder's train.py as a module (its HERE is that folder)."""
    spec = importlib.util.spec_from_file_location(
        f"trl_train_{abs(hash(folder))}", folder / "train.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_project(tmp_path_factory, cfg: TrainConfig = BASE):
    """(folder, train module) of cfg's export."""
    folder = tmp_path_factory.mktemp("trl-project")
    write_trl_project(cfg, str(folder))
    return folder, load_train(folder)


def export_settings(folder: Path, cfg: TrainConfig) -> dict:
    """Export cfg into folder; its settings.json."""
    write_trl_project(cfg, str(folder))
    return json.loads((folder / "settings.json").read_text())


def grpo(train, settings: dict, overrides: dict | None = None, world: int = 1):
    """The GRPOConfig the exported train.py builds from settings for `world` processes."""
    return train.build_grpo_config(settings, {"output_dir": "unused", **(overrides or {})}, world)


def run(cmd: list[str], cwd: Path, timeout: int, env: dict | None = None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)
