"""Where a session's run stands, and whether "Continue training" makes sense.

`run_state(history, run_dir)` reads the replayed event log and the checkpoints folder (no torch)
and says how the run ended (completed, stopped, failed, or interrupted: the log just stops), its
last logged step and its newest whole checkpoint; `can_continue(state, max_steps)` is the rule
the window and the CLI share, and `describe` says it in words. `clear_run(run_dir)` removes what
a run wrote, and nothing else, before a fresh start. Pure Python: no Qt, no torch.

    grpo-desktop train my-run.grpo --resume --steps 60   (continues where the state allows)
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from grpo_desktop.engine.runs.files import RUN_FILES
from grpo_desktop.engine.runs.layout import intact_checkpoints, remove_checkpoints
from grpo_desktop.session.history import RunHistory

NONE, COMPLETED, STOPPED, FAILED, INTERRUPTED = (
    "none",
    "completed",
    "stopped",
    "failed",
    "interrupted",
)
_EVENTS_TEMPORARY = re.compile(r"\.events-[A-Za-z0-9_]+")  # events.truncate_events_after


@dataclass(frozen=True)
class RunState:
    status: str  # none, completed, stopped, failed or interrupted
    last_step: int  # the last step logged
    total_steps: int  # the steps the run was going for
    checkpoint_step: int  # the newest whole checkpoint's step, 0 when there is none
    damaged: tuple[str, ...] = ()  # newer checkpoints that are not whole: "step 40 (file: why)"

    @property
    def has_steps(self) -> bool:
        return self.last_step > 0 or self.checkpoint_step > 0


def run_state(history: RunHistory, run_dir: str | None) -> RunState:
    """The state of the run whose events `history` replayed and whose folder is `run_dir`."""
    if history.run is None:
        status = NONE
    elif history.finished is None:
        status = INTERRUPTED
    else:
        status = str(history.finished.get("status") or FAILED)
    whole, broken = intact_checkpoints(run_dir) if run_dir else ([], [])
    # A checkpoint past the log's end belongs to steps the log lost (a torn write): ignore it.
    saved = [s for s, _ in whole if s <= history.last_step]
    newest = saved[-1] if saved else 0
    damaged = tuple(f"step {s} ({why})" for s, _, why in broken if newest < s <= history.last_step)
    return RunState(status, history.last_step, history.total_steps, newest, damaged)


def can_continue(state: RunState, max_steps: int) -> bool:
    """Whether training this run further makes sense. A run that was stopped, failed after some
    steps, or was interrupted continues from its newest whole checkpoint (the engine restores
    step count, LR schedule, data order and RNG, and trims the log so each step appears once),
    or from step 0 with none; a cut-short or damaged checkpoint does not count. A completed run
    continues only when the settings now ask for more steps than it ran; a run that never
    logged a step (a wrong model path) has nothing to continue."""
    if state.status == NONE or not state.has_steps:
        return False
    if state.status == COMPLETED:
        return max_steps > state.last_step
    return True


def describe(state: RunState, max_steps: int) -> str:
    """One or two sentences for the user: how the run ended and where Continue picks up."""
    of = f" of {state.total_steps}" if state.total_steps else ""
    where = {
        COMPLETED: f"The run finished all {state.last_step} steps",
        STOPPED: f"The run was stopped after step {state.last_step}{of}",
        FAILED: f"The run failed after step {state.last_step}{of}",
        INTERRUPTED: (
            f"The run was interrupted after step {state.last_step}{of} (the app or the "
            "computer stopped before it could finish)"
        ),
    }.get(state.status, "This session has no run yet")
    if state.status == COMPLETED and max_steps > state.last_step:
        where += f"; the settings now ask for {max_steps}"
    if not can_continue(state, max_steps):
        return where + "."
    ckpt, last = state.checkpoint_step, state.last_step
    if state.damaged and not ckpt:
        return (
            f"{where}. Its checkpoints are damaged ({'; '.join(state.damaged)}), so it cannot "
            "be continued: Start Over trains it again from step 0."
        )
    if state.damaged:
        where += f". The newer checkpoint of {', '.join(state.damaged)} is damaged and is skipped"
    if ckpt:
        again = ""
        if last == ckpt + 1:
            again = f" (step {last} is trained again)"
        elif last > ckpt + 1:
            again = f" (steps {ckpt + 1}–{last} are trained again)"
        return (
            f"{where}. Continue training picks up from the checkpoint at step {ckpt}{again}: "
            "the step count, learning-rate schedule and data order carry on as if it had never "
            "stopped."
        )
    return f"{where}, before its first checkpoint. Continue training starts it again from step 0."


def clear_run(run_dir: str) -> None:
    """Remove what a run wrote (events, config, checkpoints, temporary files) so a fresh run
    starts clean. Files the trainer does not write, and folders holding them, stay."""
    for name in RUN_FILES:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.remove(os.path.join(run_dir, name))
    with contextlib.suppress(OSError):
        for name in os.listdir(run_dir):
            if _EVENTS_TEMPORARY.fullmatch(name):
                os.remove(os.path.join(run_dir, name))
    remove_checkpoints(run_dir)
