"""The run folder's own files, named once: the event log, the settings, and how to read them.

    RUN/events.jsonl        every event of the run, one JSON line each (engine/events.py)
    RUN/config.json         the settings the run was started with (written atomically)
    RUN/checkpoints/        whole checkpoints (engine/runs/layout.py)

The trainer writes these; the CLI, Try, Compare, export and the session layer find and read them
here instead of spelling the names themselves, and without importing the training loop. A run
folder may come from elsewhere, so `read_run_config` first holds config.json to the bounds of
`bounded_json` (size, nesting, the length of each text field, named by its label). Torch-free.

Try it:  python -c "from grpo_desktop.engine.runs.files import is_run_dir; print(is_run_dir('.'))"
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os

from grpo_desktop.engine.config import TrainConfig, read_settings_file
from grpo_desktop.engine.config.train_config import SECTIONS
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.runs import bounded_json
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


def setting_labels(prefix: str = "") -> dict[str, str]:
    """{"data.system_prompt": "System prompt", …}: each setting's dotted path (after `prefix`)
    and the name the app shows for it, for messages about a field of a settings file."""
    return {
        f"{prefix}{section}.{f.name}": f.metadata.get("label", f.name)
        for section, cls in SECTIONS.items()
        for f in dataclasses.fields(cls)
    }


def check_settings_text(text: str, file: str, error: type[UserError], prefix: str = "") -> None:
    """Refuse settings JSON built to hurt before it is parsed for real: brackets nested deeper
    than any settings file, or a text field longer than the app reads (named by its label).
    Raises `error`; invalid JSON is left to the caller's own message (JSONDecodeError)."""
    data = bounded_json.loads(text, file, error) if text.strip() else None
    bounded_json.check_texts(data, file, error, setting_labels(prefix))
    if isinstance(data, dict) and isinstance(data.get("schema_version"), bool):
        raise error(
            f"{file} is damaged: 'schema_version' must be a whole number, not "
            f"{json.dumps(data['schema_version'])}. Nothing was changed."
        )


def read_run_config(run_dir: str, error: type[UserError] = UserError) -> TrainConfig:
    """The settings a run was started with; `error` (a UserError) names the folder or file and
    what is wrong: not a run folder, unreadable, not UTF-8, damaged, larger than a settings file
    can be, nested too deeply, or with a text field longer than the app reads."""
    path = config_path(run_dir)
    if os.path.isfile(path):
        try:
            text = bounded_json.read_text(path, error)
        except OSError:
            text = ""  # read_settings_file says why
        with contextlib.suppress(json.JSONDecodeError):  # read_settings_file names the line
            check_settings_text(text, path, error)
    return read_settings_file(
        path,
        error,
        missing=(
            f"{run_dir} is not a run folder (no {CONFIG_FILE}). Give the folder a run was saved to."
        ),
        what=path,
        damaged=f"{path} is damaged",
    )
