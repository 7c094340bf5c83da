"""Autosave and crash recovery: unsaved edits survive a crash, saved work is never overwritten.

Edits are autosaved (debounced by the GUI) to `session.autosave.json` inside the bundle, never to
session.json, and a newer autosave is offered on opening. Training needs none: the trainer
appends every event and writes checkpoints as it goes. Each window with a session open leaves a
marker (session path, process id) in the user's data folder and removes it on a clean close; a
marker whose process is gone means a crash, and the next launch offers to reopen the session.
Never-saved sessions live in the data folder's `untitled/`, so they survive too.

Data folder: GRPO_DESKTOP_DATA_DIR, else XDG_DATA_HOME or ~/.local/share, then grpo-desktop.
Pure Python, no Qt. Try: open a session in the app, kill it, start it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time

from grpo_desktop.engine.runs import bounded_json
from grpo_desktop.session.document import (
    SESSION_FILE,
    SUFFIX,
    SessionDocument,
    SessionError,
    document_from_data,
)
from grpo_desktop.session.fsio import atomic_write_text

AUTOSAVE_FILE = "session.autosave.json"


def data_dir() -> str:
    explicit = os.environ.get("GRPO_DESKTOP_DATA_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "grpo-desktop")


def untitled_path() -> str:
    """A fresh folder for a session that has not been saved under a name yet."""
    folder = os.path.join(data_dir(), "untitled")
    os.makedirs(folder, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(folder, f"Untitled-{stamp}{SUFFIX}")
    n = 2
    while os.path.exists(path):
        path = os.path.join(folder, f"Untitled-{stamp}-{n}{SUFFIX}")
        n += 1
    return path


def is_untitled(doc: SessionDocument) -> bool:
    return os.path.dirname(doc.path) == os.path.join(data_dir(), "untitled")


# ---------------------------------------------------------------- autosave of edits


def write_autosave(doc: SessionDocument) -> None:
    data = doc.to_dict()
    data["modified"] = time.time()
    atomic_write_text(os.path.join(doc.path, AUTOSAVE_FILE), json.dumps(data, indent=2))


def discard_autosave(doc: SessionDocument) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(doc.path, AUTOSAVE_FILE))


def newer_autosave(path: str) -> SessionDocument | None:
    """The autosaved version of the bundle at `path` when it is newer than the saved one."""
    auto = os.path.join(path, AUTOSAVE_FILE)
    saved = os.path.join(path, SESSION_FILE)
    if not os.path.isfile(auto):
        return None
    if os.path.isfile(saved) and os.path.getmtime(saved) >= os.path.getmtime(auto):
        return None
    try:
        data = bounded_json.loads(bounded_json.read_text(auto, SessionError), auto, SessionError)
        return document_from_data(data, os.path.abspath(path), auto)
    except (OSError, ValueError, SessionError):
        return None  # a damaged autosave is ignored: the saved version stays authoritative


# ---------------------------------------------------------------- crash markers


def _markers_dir() -> str:
    return os.path.join(data_dir(), "open")


def _marker(path: str) -> str:
    key = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    return os.path.join(_markers_dir(), f"{key}.json")


def mark_open(path: str) -> None:
    os.makedirs(_markers_dir(), exist_ok=True)
    record = {"path": os.path.abspath(path), "pid": os.getpid(), "time": time.time()}
    atomic_write_text(_marker(path), json.dumps(record))


def mark_closed(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(_marker(path))


def _alive(pid: int) -> bool:
    try:
        import psutil

        return psutil.pid_exists(pid)
    except ImportError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def crashed_sessions() -> list[str]:
    """Sessions whose window ended without closing them (the process is gone), newest first."""
    folder = _markers_dir()
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        full = os.path.join(folder, name)
        try:
            with open(full, encoding="utf-8") as fh:
                record = json.load(fh)
            path, pid = record["path"], int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            with contextlib.suppress(OSError):
                os.remove(full)
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        if os.path.isfile(os.path.join(path, SESSION_FILE)):
            found.append((record.get("time", 0.0), path))
        else:
            with contextlib.suppress(OSError):
                os.remove(full)
    return [p for _, p in sorted(found, reverse=True)]
