"""Where a run folder keeps its checkpoints, readable without torch; what the trainer may delete.

    RUN/checkpoints/step-NNNNNNNN/trainer_state.json    written last: the checkpoint is whole
    RUN/checkpoints/step-NNNNNNNN.damaged/              one found damaged on resuming, set aside
    RUN/checkpoints/.tmp-step-NNNNNNNN-PID/             one being written

engine.runs.checkpoint writes and reads checkpoints (and needs torch); this module finds them,
says whether one is whole (`checkpoint_problem`) and deletes only what the trainer wrote
(`remove_checkpoint`, `remove_temporary`), never anything a user put beside it. The GUI and the
session layer use it to tell where a run would continue from without loading torch.

Try it:  python -c "from grpo_desktop.engine.runs.layout import *; print(list_checkpoints('runs/demo'))"
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import zipfile

STATE_FILE = "trainer_state.json"
MAX_STATE_BYTES = 4 * 2**20  # a checkpoint's state is a few hundred bytes; more is damage
TRAINING_FILES = ("optimizer.pt", "scheduler.pt", "rng.pt")  # torch.save'd, read weights_only
WEIGHT_DIRS = ("adapter", "model")  # save_pretrained folders: a LoRA adapter or full weights
DAMAGED_SUFFIX = ".damaged"
_CHECKPOINT = re.compile(r"step-\d{8}(\.damaged)?")
_TEMPORARY = re.compile(r"\.tmp-step-\d{8}-\d+")


def checkpoints_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def list_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint, oldest first."""
    root = checkpoints_dir(run_dir)
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith("step-") and os.path.isfile(os.path.join(path, STATE_FILE)):
            try:
                found.append((int(name[5:]), path))
            except ValueError:
                continue
    return sorted(found)


TRL_CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)")  # a TRL (transformers Trainer) save


def numbered_entries(folder: str, pattern: re.Pattern, folders: bool) -> list[tuple[int, str]]:
    """(N, path) of every entry of `folder` whose whole name matches `pattern` (its first group
    the number N), only folders when `folders`, else any entry; oldest (smallest N) first, and
    [] when `folder` cannot be listed."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        match = pattern.fullmatch(name)
        path = os.path.join(folder, name)
        if match and (not folders or os.path.isdir(path)):
            found.append((int(match.group(1)), path))
    return sorted(found)


def trl_checkpoint_dirs(folder: str) -> list[tuple[int, str]]:
    """(N, path) of every `checkpoint-N` folder in a TRL output_dir, oldest first."""
    return numbered_entries(folder, TRL_CHECKPOINT_DIR, folders=True)


def latest_checkpoint(run_dir: str) -> str | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def _safetensors_problem(path: str) -> str:
    """Why a .safetensors file is not whole ('' when its header and size agree)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return "it is cut short (no header)"
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > 100_000_000:
                return "it is cut short (the header runs past the end of the file)"
            header = json.loads(fh.read(n))
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    except (ValueError, UnicodeDecodeError, RecursionError):
        return "its header is not valid (the file is damaged)"
    ends = [
        v["data_offsets"][1]
        for k, v in header.items()
        if k != "__metadata__" and isinstance(v, dict) and len(v.get("data_offsets", ())) == 2
    ]
    expected = 8 + n + max(ends, default=0)
    if size < expected:
        return f"it is cut short ({size:,} of {expected:,} bytes)"
    return ""


def checkpoint_problem(path: str) -> tuple[str, str] | None:
    """(file, what is wrong) when the checkpoint folder `path` is not whole, else None: a file
    missing or cut short, what a crash or a full disk leaves. A pickle that would be refused is
    only found when torch loads it (engine/runs/checkpoint.py)."""
    try:
        state_path = os.path.join(path, STATE_FILE)
        if os.path.getsize(state_path) > MAX_STATE_BYTES:
            return STATE_FILE, "it is far larger than a checkpoint's state (the file is damaged)"
        with open(state_path, encoding="utf-8") as fh:
            state = json.load(fh)
        if not isinstance(state, dict) or not isinstance(state.get("step"), int):
            return STATE_FILE, "it does not say which step it is"
    except OSError as exc:
        return STATE_FILE, f"it cannot be read ({exc.strerror or exc})"
    except (ValueError, UnicodeDecodeError, RecursionError):
        return STATE_FILE, "it is not valid JSON (the file is damaged)"
    weights = [d for d in WEIGHT_DIRS if os.path.isdir(os.path.join(path, d))]
    if not weights:
        return "adapter/", "the saved weights are missing"
    folder = os.path.join(path, weights[0])
    tensors = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not tensors:
        return f"{weights[0]}/", "it holds no .safetensors weights"
    for name in tensors:
        problem = _safetensors_problem(os.path.join(folder, name))
        if problem:
            return f"{weights[0]}/{name}", problem
    for name in TRAINING_FILES:
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            return name, "it is missing"
        try:
            with zipfile.ZipFile(file):
                pass
        except (zipfile.BadZipFile, OSError, EOFError):
            return name, "it is cut short or damaged (its index at the end cannot be read)"
    return None


def intact_checkpoints(run_dir: str) -> tuple[list[tuple[int, str]], list[tuple[int, str, str]]]:
    """(whole checkpoints as (step, path), damaged ones as (step, path, "file: why")), oldest
    first."""
    whole, damaged = [], []
    for step, path in list_checkpoints(run_dir):
        problem = checkpoint_problem(path)
        if problem is None:
            whole.append((step, path))
        else:
            damaged.append((step, path, f"{problem[0]}: {problem[1]}"))
    return whole, damaged


def remove_checkpoint(path: str) -> None:
    """Delete what the trainer writes into a checkpoint (or temporary) folder, then the folder
    itself unless something else was put there."""
    for name in WEIGHT_DIRS:
        shutil.rmtree(os.path.join(path, name), ignore_errors=True)
    for name in (*TRAINING_FILES, STATE_FILE):
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.remove(os.path.join(path, name))
    with contextlib.suppress(OSError):
        os.rmdir(path)


def remove_temporary(run_dir: str) -> None:
    """Delete the temporary checkpoint folders a crash or a full disk left behind."""
    root = checkpoints_dir(run_dir)
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if _TEMPORARY.fullmatch(name):
                remove_checkpoint(os.path.join(root, name))


def remove_checkpoints(run_dir: str) -> None:
    """Delete every checkpoint the trainer wrote in a run (whole, damaged, temporary) and the
    checkpoints folder when nothing else is left in it."""
    root = checkpoints_dir(run_dir)
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if _CHECKPOINT.fullmatch(name) or _TEMPORARY.fullmatch(name):
                remove_checkpoint(os.path.join(root, name))
    with contextlib.suppress(OSError):
        os.rmdir(root)
