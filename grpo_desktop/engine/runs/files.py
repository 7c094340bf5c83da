"""The run folder's own files, named once: the event log, the settings, and how to read them.

    RUN/events.jsonl        every event of the run, one JSON line each (engine/events.py)
    RUN/config.json         the settings the run was started with (written atomically)
    RUN/checkpoints/        whole checkpoints (engine/runs/layout.py)

The trainer writes these; the CLI, Try, Compare, export and the session layer find and read them
here instead of spelling the names themselves, and without importing the training loop. Torch-free.

Try it:  python -c "from grpo_desktop.engine.runs.files import is_run_dir; print(is_run_dir('.'))"
"""

from __future__ import annotations

import contextlib
import os

from grpo_desktop.engine.config import TrainConfig, read_settings_file
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.runs.layout import checkpoints_dir

EVENTS_FILE = "events.jsonl"
CONFIG_FILE = "config.json"
CONFIG_TMP = CONFIG_FILE + ".tmp"  # where write_config writes before the atomic rename
RUN_FILES = (EVENTS_FILE, CONFIG_FILE, CONFIG_TMP)  # what a run folder holds besides checkpoints


def events_path(run_dir: str) -> str:
    return os.path.join(run_dir, EVENTS_FILE)


def config_path(run_dir: str) -> str:
    return os.path.join(run_dir, CONFIG_FILE)


def is_run_dir(path: str) -> bool:
    """A run folder: its settings and either its event log or its checkpoints."""
    return os.path.isfile(config_path(path)) and (
        os.path.isfile(events_path(path)) or os.path.isdir(checkpoints_dir(path))
    )


def write_config(run_dir: str, cfg: TrainConfig) -> None:
    """Write the run's settings atomically: a crash or a full disk leaves the old file or none."""
    os.makedirs(run_dir, exist_ok=True)
    tmp = os.path.join(run_dir, CONFIG_TMP)
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(cfg.to_json())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, config_path(run_dir))
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # e.g. a full disk: no temporary file left behind
        raise


def read_run_config(run_dir: str, error: type[UserError] = UserError) -> TrainConfig:
    """The settings a run was started with; `error` (a UserError) names the folder or file and
    what is wrong: not a run folder, unreadable, not UTF-8, or damaged."""
    path = config_path(run_dir)
    return read_settings_file(
        path,
        error,
        missing=(
            f"{run_dir} is not a run folder (no {CONFIG_FILE}). Give the folder a run was saved to."
        ),
        what=path,
        damaged=f"{path} is damaged",
    )
