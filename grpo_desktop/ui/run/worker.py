"""Runs the engine's `train` generator in a QThread and forwards its events as Qt signals.

`TrainingRunner` (a `JobRunner`, ui/common/job_thread.py) owns the thread and the run state:
idle → starting → running ⇄ paused → stopping → finished | stopped | failed. Stop and pause set
`threading.Event`s through `TrainControl`, because a queued slot would never run while the worker
is busy inside the generator. The engine only pauses between steps, so `pause_reached` says when
it actually waits (the step in flight has finished). Every ending, an internal error included,
arrives as a `RunFinished` event (`failed` stays silent here). The train function is injected so
tests can drive a fake generator; the default one imports the engine (and torch) in the worker
thread, never in the GUI thread.

Try it: tests/ui/run/test_worker.py.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from grpo_desktop.engine.control import TrainControl
from grpo_desktop.ui.common import job_thread
from grpo_desktop.ui.common.job_thread import JobRunner, JobWorker

IDLE, STARTING, RUNNING, PAUSED, STOPPING = "idle", "starting", "running", "paused", "stopping"
FINISHED, STOPPED, FAILED = "finished", "stopped", "failed"
ACTIVE_STATES = (STARTING, RUNNING, PAUSED, STOPPING)
FINAL_STATES = (FINISHED, STOPPED, FAILED)


def live_threads() -> list[QThread]:
    """Every job thread still running: training, Try, Compare and Export (the tests' leak check
    reads this)."""
    return job_thread.live_threads()


def default_train_fn(config, control, run_dir=None, resume=False, remote_code=None):
    from grpo_desktop.engine.grpo.trainer import train

    return train(config, control, run_dir=run_dir, resume=resume, remote_code=remote_code)


class _ObservedControl(TrainControl):
    """A TrainControl that calls `on_wait` once each time the loop really starts waiting."""

    def __init__(self, on_wait: Callable[[], None]):
        super().__init__()
        self._on_wait = on_wait

    def wait_if_paused(self, poll_s: float = 0.1) -> None:
        if self.paused and not self.should_stop():
            self._on_wait()
        super().wait_if_paused(poll_s)


class TrainingWorker(JobWorker):
    """Lives in the training thread; `work()` iterates the engine generator."""

    event_emitted = Signal(object)
    pause_reached = Signal()

    def __init__(self, train_fn: Callable, config, run_dir, resume, remote_code=None):
        super().__init__()
        self._train_fn, self._config = train_fn, config
        self._run_dir, self._resume = run_dir, resume
        # The permission for the model's own code (engine/models/remote_code.py), passed on only
        # when there is one, so train functions without the parameter keep working.
        self._extra = {"remote_code": remote_code} if remote_code is not None else {}
        self.control = _ObservedControl(self.pause_reached.emit)

    def work(self) -> None:
        events = self._train_fn(
            self._config, self.control, self._run_dir, self._resume, **self._extra
        )
        for event in events:
            self.event_emitted.emit(event)

    def report(self, exc: Exception) -> None:
        """The engine reports its own errors as events; this one (a fake's, a bug) becomes the
        run's failed ending, like theirs."""
        from grpo_desktop.engine.events import RunFinished

        self.event_emitted.emit(
            RunFinished(
                "failed",
                0,
                f"Training failed with an internal error: {type(exc).__name__}: {exc}",
                traceback.format_exc(),
            )
        )


class TrainingRunner(JobRunner):
    """Starts, pauses, resumes and stops one run at a time; emits the run state and events."""

    state_changed = Signal(str)
    event_received = Signal(object)
    pause_reached = Signal()

    thread_name = "grpo-training"
    busy_message = "A run is already active."

    def __init__(self, train_fn: Callable = default_train_fn, parent: QObject | None = None):
        super().__init__(parent)
        self.train_fn = train_fn
        self._final = FAILED
        self.state = IDLE

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    @property
    def active(self) -> bool:
        return self.busy

    @property
    def _control(self) -> TrainControl | None:
        return self._worker.control if isinstance(self._worker, TrainingWorker) else None

    def start(
        self, config, run_dir: str | None = None, resume: bool = False, remote_code=None
    ) -> None:
        if self.active:
            raise RuntimeError(self.busy_message)
        self._final = FAILED  # unless the engine says otherwise
        worker = TrainingWorker(self.train_fn, config, run_dir, resume, remote_code)
        worker.event_emitted.connect(self._on_worker_event_emitted)
        worker.pause_reached.connect(self._on_worker_pause_reached)
        self._launch(worker)

    def _job_starting(self) -> None:
        self._set_state(STARTING)  # `active` already, for those who hear it

    def pause(self) -> None:
        if self._control is not None and self.state == RUNNING:
            self._control.pause()
            self._set_state(PAUSED)

    def resume(self) -> None:
        if self._control is not None and self.state == PAUSED:
            self._control.resume()
            self._set_state(RUNNING)

    def stop(self) -> None:
        if self._control is not None and self.state in (STARTING, RUNNING, PAUSED):
            self._control.stop()
            self._set_state(STOPPING)

    def cancel(self) -> None:
        """A run is cancelled by stopping it (it saves a checkpoint first)."""
        self.stop()

    def stop_after(self, step: int) -> None:
        """Have the engine stop by itself once `step` is finished (scripted runs)."""
        if self._control is not None:
            self._control.stop_after(step)

    @Slot(object)
    def _on_worker_event_emitted(self, event) -> None:
        kind = event.type
        if kind == "run_started" and self.state == STARTING:
            self._set_state(RUNNING)
        if kind == "run_finished":
            self._final = {"completed": FINISHED, "stopped": STOPPED}.get(event.status, FAILED)
        self.event_received.emit(event)

    @Slot()
    def _on_worker_pause_reached(self) -> None:
        if self.state == PAUSED:
            self.pause_reached.emit()

    def _job_ended(self) -> None:
        self._set_state(self._final)
