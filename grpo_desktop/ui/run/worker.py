"""Runs the engine's `train` generator in a QThread and forwards its events as Qt signals.

`TrainingRunner` owns the thread and the run state (idle → starting → running ⇄ paused → stopping →
finished | stopped | failed). Stop and pause set `threading.Event`s through `TrainControl`, because
a queued slot would never run while the worker is busy inside the generator. The engine only
pauses between steps, so `pause_reached` says when it actually waits (the step in flight has
finished). The train function is injected so tests can drive a fake generator; the default one
imports the engine (and torch) in the worker thread, never in the GUI thread.

Try it: see tests/ui/run/test_worker.py.
"""

from __future__ import annotations

import traceback
import weakref
from collections.abc import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from grpo_desktop.engine.control import TrainControl

IDLE, STARTING, RUNNING, PAUSED, STOPPING = "idle", "starting", "running", "paused", "stopping"
FINISHED, STOPPED, FAILED = "finished", "stopped", "failed"
ACTIVE_STATES = (STARTING, RUNNING, PAUSED, STOPPING)
FINAL_STATES = (FINISHED, STOPPED, FAILED)

_live_threads: weakref.WeakSet = weakref.WeakSet()


def live_threads() -> list[QThread]:
    """Training threads that are still running (the tests' leak check reads this)."""
    return [t for t in list(_live_threads) if t.isRunning()]


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


class TrainingWorker(QObject):
    """Lives in the training thread; `run()` iterates the engine generator."""

    event_emitted = Signal(object)
    pause_reached = Signal()
    finished = Signal()

    def __init__(self, train_fn: Callable, config, run_dir, resume, remote_code=None):
        super().__init__()
        self._train_fn, self._config = train_fn, config
        self._run_dir, self._resume = run_dir, resume
        # The permission for the model's own code (engine/models/remote_code.py), passed on only when
        # there is one, so train functions without the parameter keep working.
        self._extra = {"remote_code": remote_code} if remote_code is not None else {}
        self.control = _ObservedControl(self.pause_reached.emit)

    @Slot()
    def run(self) -> None:
        from grpo_desktop.engine.events import RunFinished

        try:
            events = self._train_fn(
                self._config, self.control, self._run_dir, self._resume, **self._extra
            )
            for event in events:
                self.event_emitted.emit(event)
        except Exception as exc:  # the engine reports its own errors; this catches fakes and bugs
            self.event_emitted.emit(
                RunFinished(
                    "failed",
                    0,
                    f"Training failed with an internal error: {type(exc).__name__}: {exc}",
                    traceback.format_exc(),
                )
            )
        finally:
            self.finished.emit()


class TrainingRunner(QObject):
    """Starts, pauses, resumes and stops one run at a time; emits the run state and events."""

    state_changed = Signal(str)
    event_received = Signal(object)
    pause_reached = Signal()

    def __init__(self, train_fn: Callable = default_train_fn, parent: QObject | None = None):
        super().__init__(parent)
        self.train_fn = train_fn
        self._thread: QThread | None = None
        self._worker: TrainingWorker | None = None
        self._final = FAILED
        self.state = IDLE

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    @property
    def active(self) -> bool:
        return self._thread is not None

    def start(
        self, config, run_dir: str | None = None, resume: bool = False, remote_code=None
    ) -> None:
        if self.active:
            raise RuntimeError("A run is already active.")
        self._final = FAILED  # unless the engine says otherwise
        self._thread = QThread()
        self._thread.setObjectName("grpo-training")
        _live_threads.add(self._thread)
        self._worker = TrainingWorker(self.train_fn, config, run_dir, resume, remote_code)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.run)
        self._worker.event_emitted.connect(self._on_worker_event_emitted)
        self._worker.pause_reached.connect(self._on_worker_pause_reached)
        self._worker.finished.connect(self._thread.quit)
        self._thread.finished.connect(self._on_thread_finished)
        self._set_state(STARTING)
        self._thread.start()

    def pause(self) -> None:
        if self._worker is not None and self.state == RUNNING:
            self._worker.control.pause()
            self._set_state(PAUSED)

    def resume(self) -> None:
        if self._worker is not None and self.state == PAUSED:
            self._worker.control.resume()
            self._set_state(RUNNING)

    def stop(self) -> None:
        if self._worker is not None and self.state in (STARTING, RUNNING, PAUSED):
            self._worker.control.stop()
            self._set_state(STOPPING)

    def stop_after(self, step: int) -> None:
        """Have the engine stop by itself once `step` is finished (scripted runs)."""
        if self._worker is not None:
            self._worker.control.stop_after(step)

    def wait(self, timeout_ms: int = 60_000) -> bool:
        """Block until the thread has ended; True when it did. Only for quitting and tests."""
        return self._thread.wait(timeout_ms) if self._thread is not None else True

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

    @Slot()
    def _on_thread_finished(self) -> None:
        thread, worker = self._thread, self._worker
        self._thread = self._worker = None
        if thread is not None:
            thread.deleteLater()
        if worker is not None:
            worker.deleteLater()
        self._set_state(self._final)
