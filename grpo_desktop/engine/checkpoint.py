"""Checkpoints: everything needed to continue a run exactly where it stopped.

Layout of one checkpoint, `RUN/checkpoints/step-00000040/`:
    adapter/                 PEFT adapter (adapter_model.safetensors + adapter_config.json), or
    model/                   full weights (model.safetensors) when LoRA is off
    optimizer.pt, scheduler.pt, rng.pt   state dicts of tensors and plain numbers
    trainer_state.json       step, data position, seed, time; written last = the checkpoint is whole

Written to a temporary folder and renamed into place, so a crash never leaves a half checkpoint
under a valid name. Everything is read back with `torch.load(weights_only=True)`: nothing is
unpickled, so a checkpoint from elsewhere cannot run code.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time

import torch

from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.run_layout import (  # noqa: F401 (re-exported)
    STATE_FILE,
    checkpoints_dir,
    latest_checkpoint,
    list_checkpoints,
)


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


def save_checkpoint(
    run_dir: str, step: int, policy, optimizer, scheduler, state: dict, keep: int = 2
) -> str:
    """Save atomically; delete all but the newest `keep` checkpoints. Returns the folder."""
    root = checkpoints_dir(run_dir)
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, f"step-{step:08d}")
    tmp = os.path.join(root, f".tmp-step-{step:08d}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    weights_dir = os.path.join(tmp, "adapter" if policy.uses_lora else "model")
    policy.model.save_pretrained(weights_dir, safe_serialization=True)
    if not policy.uses_lora:
        policy.tokenizer.save_pretrained(weights_dir)
    torch.save(optimizer.state_dict(), os.path.join(tmp, "optimizer.pt"))
    torch.save(scheduler.state_dict(), os.path.join(tmp, "scheduler.pt"))
    torch.save(rng_state(), os.path.join(tmp, "rng.pt"))
    full_state = dict(state, step=step, saved_at=time.time())
    with open(os.path.join(tmp, STATE_FILE), "w", encoding="utf-8") as fh:
        json.dump(full_state, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)
    for _, old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(ckpt_dir: str) -> dict:
    try:
        with open(os.path.join(ckpt_dir, STATE_FILE), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(
            f"The checkpoint {ckpt_dir} is damaged ({exc}); delete it to resume "
            "from the one before."
        ) from exc


def weights_path(ckpt_dir: str) -> tuple[str, bool]:
    """(folder, is_adapter) of the weights saved in a checkpoint."""
    adapter = os.path.join(ckpt_dir, "adapter")
    if os.path.isdir(adapter):
        return adapter, True
    return os.path.join(ckpt_dir, "model"), False


def load_training_state(ckpt_dir: str, optimizer, scheduler, device: torch.device) -> None:
    """Restore optimizer, scheduler and RNG states in place (weights_only: no unpickling)."""

    def load(name):
        return torch.load(os.path.join(ckpt_dir, name), map_location=device, weights_only=True)

    optimizer.load_state_dict(load("optimizer.pt"))
    scheduler.load_state_dict(load("scheduler.pt"))
    rng = torch.load(os.path.join(ckpt_dir, "rng.pt"), map_location="cpu", weights_only=True)
    set_rng_state(rng)
