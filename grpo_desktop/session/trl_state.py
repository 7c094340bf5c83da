"""A TRL run's `trainer_state.json`: where the newest one is, and its log history as our metrics.

TRL's `Trainer` writes `OUTPUT_DIR/checkpoint-N/trainer_state.json` at every save and, when the
script calls `trainer.save_state()`, `OUTPUT_DIR/trainer_state.json`. Each holds the whole
`log_history`: one entry per logging step with TRL's GRPO metric names, which are the app's own
(reward, kl, clip_ratio/…, step_time, …), plus evaluation entries (`eval_…`) and one summary
entry at the end. `step_metrics(state)` gives {step: metrics} without the evaluation and summary
values (TRL's evaluation loss is not the app's held-out accuracy), `summary(state)` the end entry;
`read_state` raises ValueError for a file that is not (yet) a whole JSON object. Reads only; no
Qt, no torch.

    python -c "from grpo_desktop.session import trl_state as t;
    print(t.step_metrics(t.read_state('OUTPUT_DIR/trainer_state.json')))"
"""

from __future__ import annotations

import json
import math
import os

from grpo_desktop.engine.runs.layout import trl_checkpoint_dirs

STATE_FILE = "trainer_state.json"
SUMMARY_KEYS = frozenset(
    {
        "train_runtime",
        "train_loss",
        "train_samples_per_second",
        "train_steps_per_second",
        "total_flos",
    }
)
NOT_METRICS = frozenset({"step"})


def state_files(folder: str) -> list[str]:
    """The state files that can hold the newest log history, in the order to try them: the
    top-level one (written at the end), then each checkpoint's, newest first; only those that
    exist."""
    paths = [os.path.join(folder, STATE_FILE)]
    paths += [os.path.join(p, STATE_FILE) for _, p in reversed(trl_checkpoint_dirs(folder))]
    return [p for p in paths if os.path.isfile(p)]


def read_state(path: str) -> dict:
    """The parsed trainer_state.json; ValueError when it is not a whole JSON object with a
    log_history list (cut short, being written, or not TRL's)."""
    with open(path, "rb") as fh:
        data = json.loads(fh.read().decode("utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("log_history", []), list):
        raise ValueError("it is not a trainer state (no log_history list)")
    return data


def global_step(state: dict) -> int:
    value = state.get("global_step")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    steps = step_metrics(state)
    return max(steps) if steps else 0


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def step_metrics(state: dict) -> dict[int, dict[str, float | None]]:
    """{step: metrics} of the training log entries, in step order. Entries of the same step are
    merged (TRL may log twice at one step); evaluation (`eval_…`) and summary values are left
    out, and so are values that are not numbers. A value TRL wrote as null stays None."""
    out: dict[int, dict[str, float | None]] = {}
    for entry in state.get("log_history") or []:
        if not isinstance(entry, dict):
            continue
        step = entry.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            continue
        metrics = {
            k: _number(v)
            for k, v in entry.items()
            if k not in NOT_METRICS
            and k not in SUMMARY_KEYS
            and not k.startswith("eval_")
            and (v is None or _number(v) is not None)
        }
        if any(v is not None for k, v in metrics.items() if k != "epoch"):
            out.setdefault(step, {}).update(metrics)
    return dict(sorted(out.items()))


def summary(state: dict) -> dict | None:
    """The end-of-training entry (train_runtime, train_loss, …), or None while training."""
    for entry in reversed(state.get("log_history") or []):
        if isinstance(entry, dict) and "train_runtime" in entry:
            return entry
    return None


def total_steps(state: dict) -> int:
    value = state.get("max_steps")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
