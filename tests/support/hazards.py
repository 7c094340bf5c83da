"""Shared pieces of the hazard tests (model code, run folders, damaged
checkpoints and full disks): a model folder that ships code whose import leaves a marker file,
sessions written by hand the way a file from elsewhere would be, small real runs, and the CLI in
a subprocess. Not a test module (no test_ prefix)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from grpo_desktop.engine.config import TrainConfig
from tests.support.paths import ROOT


def cli(*args: str, cwd=None, timeout: int = 600) -> tuple[int, str]:
    """`python -m grpo_desktop ARGS` in a subprocess (the user's way in): (exit code, stderr)."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", *args],
        capture_output=True,
        text=True,
        cwd=str(cwd or ROOT),
        env=env,
        timeout=timeout,
    )
    return out.returncode, out.stderr


def small_config(model_dir: str, steps: int = 1, lora: bool = False, **run) -> TrainConfig:
    """A run of a few quick steps on a local model, a checkpoint after every step."""
    return TrainConfig().replace(
        model={"name_or_path": model_dir},
        lora={"enabled": lora},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 6},
        data={"eval_size": 0},
        run={
            "max_steps": steps,
            "checkpoint_every": 1,
            "keep_checkpoints": 3,
            "eval_every": 0,
            **run,
        },
    )


def _code(marker: str) -> str:
    return f"import pathlib\npathlib.Path({marker!r}).write_text('ran ' + __name__)\n"


def plant_model_code(folder: str, marker: str) -> None:
    """Make `folder` (a model folder saved by transformers) ship its own code, the way a model
    from elsewhere does: configuration, modeling and tokenization .py files named by auto_map in
    config.json and tokenizer_config.json. Importing any of them writes `marker`."""
    files = {
        "configuration_shipped.py": "from transformers import LlamaConfig\n\n"
        "class ShippedConfig(LlamaConfig):\n    pass\n",
        "modeling_shipped.py": "from transformers import LlamaForCausalLM\n"
        "from .configuration_shipped import ShippedConfig\n\n"
        "class ShippedForCausalLM(LlamaForCausalLM):\n    config_class = ShippedConfig\n",
        "tokenization_shipped.py": "from transformers import PreTrainedTokenizerFast\n\n"
        "class ShippedTokenizer(PreTrainedTokenizerFast):\n    pass\n",
    }
    for name, body in files.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as fh:
            fh.write(_code(marker) + body)
    maps = {
        "config.json": {
            "AutoConfig": "configuration_shipped.ShippedConfig",
            "AutoModelForCausalLM": "modeling_shipped.ShippedForCausalLM",
        },
        "tokenizer_config.json": {"AutoTokenizer": [None, "tokenization_shipped.ShippedTokenizer"]},
    }
    for name, auto_map in maps.items():
        path = os.path.join(folder, name)
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        data["auto_map"] = auto_map
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)


def model_with_code(model_dir: str, folder: str, marker: str) -> str:
    """A copy of `model_dir` at `folder` that ships code (see plant_model_code)."""
    shutil.copytree(model_dir, folder)
    plant_model_code(folder, marker)
    return folder


def write_session(path: str, cfg: TrainConfig, run: str = "run", trust_code: bool = False) -> str:
    """A session folder written by hand, as one from elsewhere would arrive (no trust recorded
    here); `trust_code` sets model.trust_remote_code in it."""
    os.makedirs(path, exist_ok=True)
    config = cfg.to_dict()
    config["model"]["trust_remote_code"] = trust_code
    data = {
        "schema_version": 2,
        "name": os.path.basename(path).removesuffix(".grpo"),
        "created": 0.0,
        "modified": 0.0,
        "run": run,
        "trained": False,
        "config": config,
        "layout": {},
    }
    with open(os.path.join(path, "session.json"), "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    return path


def set_trust_remote_code(json_path: str, on: bool = True, key: str | None = None) -> None:
    """Flip model.trust_remote_code in a config.json (key None) or a session.json (key "config")."""
    with open(json_path, encoding="utf-8") as fh:
        data = json.load(fh)
    (data[key] if key else data)["model"]["trust_remote_code"] = on
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)


def train_in_process(cfg: TrainConfig, run_dir: str, resume: bool = False) -> list:
    """Run the real engine to the end; its events."""
    from grpo_desktop.engine.grpo.trainer import train

    return list(train(cfg, run_dir=run_dir, resume=resume))


def tree(folder: str) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (what "nothing was touched" compares)."""
    found = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                found[os.path.relpath(path, folder)] = fh.read()
    return found


def temporary_files(run_dir: str) -> list[str]:
    """What a failed write could leave behind: temporary checkpoint folders and temp files."""
    left = []
    for root, dirs, files in os.walk(run_dir):
        for name in dirs + files:
            if name.startswith(".") or name.endswith((".tmp", ".part")):
                left.append(os.path.relpath(os.path.join(root, name), run_dir))
    return left


def unshare() -> list[str]:
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]


def mount_problem(tmp_path) -> str:
    """Why a small tmpfs cannot be mounted here ('' when it can)."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux with unshare(1) to mount a small private tmpfs"
    probe = tmp_path / "probe"
    probe.mkdir()
    out = subprocess.run(
        [*unshare(), "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
        capture_output=True,
        text=True,
    )
    if out.returncode:
        return f"mounting a private tmpfs is not permitted here: {out.stderr.strip()}"
    return ""
