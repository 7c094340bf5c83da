"""Checkpoints: everything needed to continue a run exactly where it stopped.

Layout of one checkpoint, `RUN/checkpoints/step-00000040/`:
    adapter/                 PEFT adapter (adapter_model.safetensors + adapter_config.json), or
    model/                   full weights (model.safetensors) when LoRA is off
    optimizer.pt, scheduler.pt, rng.pt   state dicts of tensors and plain numbers
    trainer_state.json       step, data position, seed, time; written last = the checkpoint is whole

Written to a temporary folder (every file fsynced) and renamed into place, so a crash never leaves
a half checkpoint under a valid name (`save_checkpoint`). Everything is read back with
`torch.load(weights_only=True)`: nothing is unpickled, so a checkpoint from elsewhere cannot run
code. Resuming takes the newest whole checkpoint (`find_resume_point`). Only what the trainer
wrote is ever deleted (engine/runs/layout.py).
Try it:  python -m pytest -q tests/engine/runs/test_damaged_checkpoints.py
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import random
import shutil
import time
from dataclasses import dataclass, field

import torch

from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.runs.layout import (  # noqa: F401 (re-exported)
    DAMAGED_SUFFIX,
    MAX_STATE_BYTES,
    STATE_FILE,
    checkpoint_problem,
    checkpoints_dir,
    latest_checkpoint,
    list_checkpoints,
    remove_checkpoint,
    remove_temporary,
)
from grpo_desktop.engine.units import folder_bytes, size_text

NEARLY_FULL = 1 << 20  # a write that failed with less than this free was the disk filling up
KEPT_SUFFIX = ".kept"  # a checkpoint folder's name, for files in it that the trainer did not write


class DamagedCheckpoint(UserError):
    """A checkpoint that cannot be resumed from; the message names its folder and file."""

    def __init__(self, folder: str, file: str, why: str):
        super().__init__(f"The checkpoint {folder} is damaged: {file}: {why}.")
        self.folder, self.file, self.why = folder, file, why


# Why a pickle that weights_only loading refuses is not loaded (a checkpoint's training state here;
# its weights in `grpo-desktop eval`).
PICKLE_REFUSED = (
    "it holds Python objects other than tensors and numbers, which GRPO Desktop never writes; "
    "it was not loaded, because unpickling them could run code"
)


class DiskFullError(UserError):
    """The disk filled up while the run wrote to it; nothing half-written was left behind."""


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(value):
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


# ---------------------------------------------------------------- a full disk


def _free(folder: str) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def is_disk_full(exc: BaseException, folder: str) -> bool:
    """Whether `exc`, raised while writing into `folder`, means the disk (or quota) is full.
    torch's zip writer reports a short write without an errno: then the free space decides."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(seen)
        if "No space left on device" in text or "os error 28" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    free = _free(folder)
    return isinstance(exc, RuntimeError) and free is not None and free < NEARLY_FULL


def disk_full_error(run_dir: str) -> DiskFullError:
    """The message for a full disk under `run_dir`: what is free, what a checkpoint takes, and
    which checkpoint is intact."""
    free = _free(run_dir)
    saved = list_checkpoints(run_dir)
    where = f"{size_text(free)} free at {run_dir}" if free is not None else f"at {run_dir}"
    if saved:
        where += f"; a checkpoint takes about {size_text(folder_bytes(saved[-1][1]))}"
        intact = f"the last checkpoint (step {saved[-1][0]}) is intact"
    else:
        intact = "there is no checkpoint yet, so continuing starts again from step 0"
    return DiskFullError(
        f"The disk is full ({where}): free some space or choose another folder; {intact}."
    )


# ---------------------------------------------------------------- saving


def _free_name(path: str) -> str:
    candidate, n = path, 1
    while os.path.exists(candidate):
        n += 1
        candidate = f"{path}-{n}"
    return candidate


def _fsync_tree(folder: str) -> None:
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())


def _save_tensors(obj, path: str) -> None:
    with open(path, "wb") as fh:  # a Python file: a full disk surfaces as OSError(ENOSPC)
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def save_checkpoint(
    run_dir: str, step: int, policy, optimizer, scheduler, state: dict, keep: int = 2
) -> str:
    """Save atomically; delete all but the newest `keep` checkpoints. Returns the folder.

    Raises DiskFullError when the disk fills up: its message says how much is free and which
    checkpoint is intact, and the temporary folder is removed, so nothing is left behind. A
    checkpoint folder that already exists under the new one's name is replaced by removing what
    the trainer wrote there; files someone else put in it are kept, in `step-N.kept`."""
    root = checkpoints_dir(run_dir)
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, f"step-{step:08d}")
    tmp = os.path.join(root, f".tmp-step-{step:08d}-{os.getpid()}")
    remove_temporary(run_dir)  # ours, from a crash or a full disk earlier
    try:
        os.makedirs(tmp)
        weights_dir = os.path.join(tmp, "adapter" if policy.uses_lora else "model")
        policy.model.save_pretrained(weights_dir, safe_serialization=True)
        if not policy.uses_lora:
            policy.tokenizer.save_pretrained(weights_dir)
        _fsync_tree(weights_dir)
        _save_tensors(optimizer.state_dict(), os.path.join(tmp, "optimizer.pt"))
        _save_tensors(scheduler.state_dict(), os.path.join(tmp, "scheduler.pt"))
        _save_tensors(rng_state(), os.path.join(tmp, "rng.pt"))
        full_state = dict(state, step=step, saved_at=time.time())
        with open(os.path.join(tmp, STATE_FILE), "w", encoding="utf-8") as fh:
            json.dump(full_state, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(final):
            remove_checkpoint(final)
        if os.path.exists(final):  # files someone else put there: keep them, under another name
            os.replace(final, _free_name(final + KEPT_SUFFIX))
        os.replace(tmp, final)
    except BaseException as exc:
        full = not isinstance(exc, UserError) and is_disk_full(exc, root)
        remove_checkpoint(tmp)  # only now: is_disk_full measured with its bytes still used
        if full:
            raise disk_full_error(run_dir) from exc
        raise
    for _, old in list_checkpoints(run_dir)[:-keep]:
        remove_checkpoint(old)
    return final


# ---------------------------------------------------------------- resuming


def read_state(ckpt_dir: str) -> dict:
    path = os.path.join(ckpt_dir, STATE_FILE)
    try:
        if os.path.getsize(path) > MAX_STATE_BYTES:
            raise DamagedCheckpoint(
                ckpt_dir, STATE_FILE, "it is far larger than a checkpoint's state (damaged)"
            )
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
    except (OSError, ValueError, RecursionError) as exc:
        what = "its brackets nest too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise DamagedCheckpoint(ckpt_dir, STATE_FILE, f"it cannot be read ({what})") from None
    if not isinstance(state, dict):
        raise DamagedCheckpoint(ckpt_dir, STATE_FILE, "it holds no checkpoint state")
    return state


def weights_path(ckpt_dir: str) -> tuple[str, bool]:
    """(folder, is_adapter) of the weights saved in a checkpoint."""
    adapter = os.path.join(ckpt_dir, "adapter")
    if os.path.isdir(adapter):
        return adapter, True
    return os.path.join(ckpt_dir, "model"), False


@dataclass
class ResumePoint:
    """A checkpoint whose files all read back: where a resumed run starts."""

    folder: str
    step: int
    state: dict
    training: dict = field(repr=False)  # optimizer.pt, scheduler.pt, rng.pt as loaded

    @property
    def weights(self) -> tuple[str, bool]:
        return weights_path(self.folder)


def _load(folder: str, name: str):
    try:
        return torch.load(os.path.join(folder, name), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise DamagedCheckpoint(folder, name, PICKLE_REFUSED) from exc
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        first = str(exc).split(". ")[0].rstrip(".")
        raise DamagedCheckpoint(folder, name, f"it cannot be read ({first})") from exc


def open_checkpoint(folder: str) -> ResumePoint:
    """Check a checkpoint and read its training state; raises DamagedCheckpoint."""
    problem = checkpoint_problem(folder)
    if problem is not None:
        raise DamagedCheckpoint(folder, *problem)
    state = read_state(folder)
    training = {name: _load(folder, name) for name in ("optimizer.pt", "scheduler.pt", "rng.pt")}
    return ResumePoint(folder, int(state["step"]), state, training)


def find_resume_point(run_dir: str) -> tuple[ResumePoint | None, list[DamagedCheckpoint]]:
    """The newest checkpoint that reads back whole, and the newer ones skipped (each damaged one
    is set aside as step-N.damaged, kept but never chosen again). A checkpoint is damaged when
    it was cut short, a file does not read back, or it holds a pickle that weights_only loading
    refuses; the DamagedCheckpoint names its folder and file. (None, []) when the run has no
    checkpoint; a UserError when it has some but none is whole (nothing is moved then)."""
    skipped: list[DamagedCheckpoint] = []
    for _step, folder in reversed(list_checkpoints(run_dir)):
        try:
            point = open_checkpoint(folder)
        except DamagedCheckpoint as exc:
            skipped.append(exc)
            continue
        for damaged in skipped:
            set_aside(damaged.folder)
        return point, skipped
    if skipped:
        raise UserError(
            "No checkpoint of this run can be resumed from: "
            + " ".join(str(s) for s in skipped)
            + " Start the run over, or put back an intact copy of a checkpoint."
        )
    return None, []


def set_aside(folder: str) -> str:
    """Rename a damaged checkpoint to step-N.damaged (replacing an older set-aside copy)."""
    target = folder.rstrip(os.sep) + DAMAGED_SUFFIX
    if os.path.exists(target):
        remove_checkpoint(target)
    os.replace(folder, target)
    return target


def load_training_state(point: ResumePoint, optimizer, scheduler) -> None:
    """Restore optimizer, scheduler and RNG states in place from what `open_checkpoint` read."""
    try:
        optimizer.load_state_dict(point.training["optimizer.pt"])
        scheduler.load_state_dict(point.training["scheduler.pt"])
        set_rng_state(point.training["rng.pt"])
    except (KeyError, ValueError, TypeError, RuntimeError) as exc:
        raise UserError(
            f"The checkpoint {point.folder} does not fit these settings ({exc}): it was saved "
            "by a run with another model, LoRA or optimizer setup. Start the run over, or "
            "resume it with the settings it was started with."
        ) from exc


def skipped_message(damaged: DamagedCheckpoint, point: ResumePoint) -> str:
    """The log line for a checkpoint skipped on resuming: which, why, and where it went."""
    name = os.path.basename(damaged.folder.rstrip(os.sep))
    return (
        f"Skipped the newer checkpoint {damaged.folder}: {damaged.file}: {damaged.why}. It was "
        f"moved aside to {name}{DAMAGED_SUFFIX} (delete it when you no longer need it); the run "
        f"continues from the newest intact checkpoint, step {point.step}."
    )
