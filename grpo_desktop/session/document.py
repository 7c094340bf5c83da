"""The session document: a folder bundle `NAME.grpo/` that holds everything about one run.

    NAME.grpo/
      session.json     schema_version, name, the config, the window layout, the run's relative path
      run/             the engine's run folder: config.json, events.jsonl, checkpoints/step-N/

A folder moves, copies and zips as one thing, every part is readable by other tools (JSON, JSONL,
safetensors, no pickles), and saving a large run rewrites only session.json, since the history is
the engine's append-only event log. Paths inside are relative, so a moved session still opens.
Opening never writes: a damaged or non-UTF-8 file, a field of the wrong type, a newer schema or a
missing run folder raises SessionError naming the file and the problem; so does a file built to
hurt (larger than a session can be, brackets nested thousands deep, a 100 MB text field: the
bounds are in engine/runs/bounded_json.py), before anything else reads or writes it. Older schemas are
migrated in memory and written in the current schema on the next save.

    python -c "from grpo_desktop.session.document import *; print(load_session('my-run.grpo'))"
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from grpo_desktop import __version__
from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.errors import ConfigError, UserError
from grpo_desktop.engine.runs import bounded_json
from grpo_desktop.engine.runs.files import events_path, setting_labels
from grpo_desktop.session.fsio import atomic_write_text

SCHEMA_VERSION = 2
SESSION_FILE = "session.json"
RUN_DIR = "run"
SUFFIX = ".grpo"


class SessionError(UserError):
    """A session that cannot be opened or saved; the message is for the user."""


@dataclass
class SessionDocument:
    path: str  # the bundle folder
    config: TrainConfig = field(default_factory=TrainConfig)
    name: str = ""
    layout: dict = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    modified: float = field(default_factory=time.time)
    run: str = RUN_DIR  # relative to the bundle
    trained: bool = False  # set once the run folder holds events: from then on it must exist

    @property
    def run_dir(self) -> str:
        return os.path.normpath(os.path.join(self.path, self.run))

    @property
    def events_path(self) -> str:
        return events_path(self.run_dir)

    def has_run(self) -> bool:
        return os.path.isfile(self.events_path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "app_version": __version__,
            "name": self.name,
            "created": self.created,
            "modified": self.modified,
            "run": self.run,
            "trained": self.trained,
            "config": self.config.to_dict(),
            "layout": self.layout,
        }


def is_session(path: str) -> bool:
    return os.path.isfile(os.path.join(path, SESSION_FILE))


def new_session(path: str, config: TrainConfig, name: str | None = None) -> SessionDocument:
    """A new bundle on disk (the folder and session.json); the run folder appears when training."""
    path = os.path.abspath(path)
    if os.path.exists(path) and os.listdir(path):
        raise SessionError(f"{path} already exists and is not empty; choose a new name.")
    doc = SessionDocument(path, config, name or _default_name(path))
    save_session(doc)
    return doc


def _default_name(path: str) -> str:
    base = os.path.basename(os.path.normpath(path))
    return base[: -len(SUFFIX)] if base.endswith(SUFFIX) else base


# ---------------------------------------------------------------- migrations


def _v1_to_v2(data: dict, path: str) -> dict:
    """v1 stored the run folder as an absolute `run_dir` and had no window layout."""
    data = dict(data)
    run_dir = data.pop("run_dir", None) or RUN_DIR
    if not isinstance(run_dir, str):
        raise SessionError(
            f"{path}: session.json is damaged: 'run_dir' must be text, not {run_dir!r}."
        )
    if os.path.isabs(run_dir):  # keep it only while it still exists (a moved bundle has "run")
        run_dir = os.path.relpath(run_dir, path) if os.path.isdir(run_dir) else RUN_DIR
    data["run"] = run_dir
    data.setdefault("layout", {})
    data["trained"] = os.path.isdir(os.path.join(path, data["run"]))
    data["schema_version"] = 2
    return data


MIGRATIONS = {1: _v1_to_v2}  # version n -> function giving version n + 1


def migrate(data: dict, path: str) -> dict:
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SessionError(f"{path}: session.json has no valid schema_version ({version!r}).")
    if version > SCHEMA_VERSION:
        raise SessionError(
            f"{path} was saved by a newer GRPO Desktop (session format {version}; this version "
            f"reads up to {SCHEMA_VERSION}). Update the app to open it; the file was not changed."
        )
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data, path)
        version = data["schema_version"]
    return data


# ---------------------------------------------------------------- open / save


def load_session(path: str) -> SessionDocument:
    """Open a bundle (or its session.json). Never writes anything."""
    path = os.path.abspath(path)
    if os.path.basename(path) == SESSION_FILE:
        path = os.path.dirname(path)
    file = os.path.join(path, SESSION_FILE)
    if not os.path.isdir(path):
        raise SessionError(f"Session not found: {path}.")
    if not os.path.isfile(file):
        raise SessionError(
            f"{path} is not a GRPO Desktop session (it has no {SESSION_FILE}). Open the folder "
            f"ending in {SUFFIX}."
        )
    try:
        text = bounded_json.read_text(file, SessionError)
    except OSError as exc:
        raise SessionError(f"Cannot read {file}: {exc.strerror}.") from None
    try:
        data = bounded_json.loads(text, file, SessionError)
    except json.JSONDecodeError as exc:
        hint = "it is empty" if not text.strip() else f"line {exc.lineno}, column {exc.colno}"
        raise SessionError(
            f"{file} is damaged ({hint}: {exc.msg}) and cannot be opened. The file was not "
            "changed; if you have a copy of the session, open that instead."
        ) from None
    return document_from_data(data, path, file)


def document_from_data(data: Any, path: str, file: str) -> SessionDocument:
    """Build the document of bundle `path` from the JSON read out of `file` (migrated if old)."""
    if not isinstance(data, dict):
        raise SessionError(f"{file} is damaged: it does not hold a session object.")
    bounded_json.check_texts(data, file, SessionError, setting_labels("config."))
    data = migrate(data, path)
    _check_field_types(data, file)
    config_version = (data.get("config") or {}).get("schema_version")
    if isinstance(config_version, bool):
        raise SessionError(
            f"{file} is damaged: 'config.schema_version' must be a whole number, not "
            f"{json.dumps(config_version)}. The file was not changed."
        )
    try:
        config = TrainConfig.from_dict(data.get("config", {}))
    except (ConfigError, TypeError) as exc:
        raise SessionError(f"{file}: the saved settings are invalid: {exc}") from None
    doc = SessionDocument(
        path=path,
        config=config,
        name=data.get("name") or _default_name(path),
        layout=data.get("layout") or {},
        created=float(data.get("created") or 0.0),
        modified=float(data.get("modified") or 0.0),
        run=data.get("run") or RUN_DIR,
        trained=bool(data.get("trained")),
    )
    check_run_inside(doc, file)
    if doc.trained and not os.path.isdir(doc.run_dir):
        raise SessionError(
            f"The session's run folder is missing: {doc.run_dir}. It holds the history and the "
            "checkpoints; move it back into the session folder (or copy the whole session "
            "folder, not only session.json)."
        )
    return doc


def check_run_inside(doc: SessionDocument, file: str | None = None) -> None:
    """Refuse a run folder that is not inside the session folder (an absolute path, `../..`,
    a symlink out): training deletes and writes files there. Raises SessionError."""
    root = os.path.realpath(doc.path)
    real = os.path.realpath(os.path.join(doc.path, doc.run))
    try:
        inside = os.path.commonpath([root, real]) == root and real != root
    except ValueError:  # another drive
        inside = False
    if inside and not os.path.isabs(doc.run):
        return
    raise SessionError(
        f"{file or os.path.join(doc.path, SESSION_FILE)}: its run folder {doc.run!r} is not "
        f"inside the session folder (it is {real}). Training deletes and writes files in the run "
        "folder, so a session may only use one inside its own folder; nothing was opened or "
        f'changed. If you trust this session, set "run" to "{RUN_DIR}" in its session.json and '
        "put its run folder there."
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# The top-level fields of session.json (the config's own fields are checked by validate()): what
# each must hold, in words, and the test. A missing field or null takes its default.
FIELD_TYPES = {
    "name": ("text", lambda v: isinstance(v, str)),
    "created": ("a number (seconds since 1970)", _is_number),
    "modified": ("a number (seconds since 1970)", _is_number),
    "run": ("text (the run folder, relative to the session)", lambda v: isinstance(v, str)),
    "trained": ("true or false", lambda v: isinstance(v, bool)),
    "layout": ("an object", lambda v: isinstance(v, dict)),
    "config": ("an object", lambda v: isinstance(v, dict)),
}


def _check_field_types(data: dict, file: str) -> None:
    """Raise SessionError naming every field of `data` whose value has the wrong type."""
    wrong = [
        f"'{name}' must be {what}, not {json.dumps(data[name])[:60]}"
        for name, (what, ok) in FIELD_TYPES.items()
        if data.get(name) is not None and not ok(data[name])
    ]
    if wrong:
        raise SessionError(
            f"{file} is damaged: " + "; ".join(wrong) + ". The file was not changed; correct "
            "it in a text editor, or open a copy of the session if you have one."
        )


def save_session(doc: SessionDocument, path: str | None = None) -> SessionDocument:
    """Write session.json atomically. With a new `path` (Save As) the bundle, run included, is
    copied there first and the returned document points to the copy."""
    if path is not None and os.path.abspath(path) != doc.path:
        target = os.path.abspath(path)
        if os.path.exists(target) and os.listdir(target):
            raise SessionError(f"{target} already exists and is not empty; choose a new name.")
        os.makedirs(target, exist_ok=True)
        if os.path.isdir(doc.run_dir):
            shutil.copytree(doc.run_dir, os.path.join(target, RUN_DIR), dirs_exist_ok=True)
        doc = SessionDocument(
            target,
            doc.config,
            _default_name(target),
            dict(doc.layout),
            doc.created,
            doc.modified,
            trained=doc.trained,
        )
    os.makedirs(doc.path, exist_ok=True)
    doc.modified = time.time()
    doc.trained = doc.trained or doc.has_run()
    atomic_write_text(os.path.join(doc.path, SESSION_FILE), json.dumps(doc.to_dict(), indent=2))
    return doc
