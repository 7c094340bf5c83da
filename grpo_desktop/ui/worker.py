"""Runs the engine's `train` generator in a QThread and forwards its events as Qt signals.

`TrainingRunner` owns the thread and the run state (idle → starting → running ⇄ paused → stopping →
finished | stopped | failed). Stop and pause set `threading.Event`s through `TrainControl`, because
a queued slot would never run while the worker is busy inside the generator. The train function
is injected so tests can drive a fake generator.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from grpo_desktop.engine.control import TrainControl

IDLE, STARTING, RUNNING, PAUSED, STOPPING = "idle", "starting", "running", "paused", "stopping"
FINISHED, STOPPED, FAILED = "finished", "stopped", "failed"


def default_train_fn(config, control, run_dir=None, resume=False):
    from grpo_desktop.engine.trainer import train

    return train(config, control, run_dir=run_dir, resume=resume)


class TrainingWorker(QObject):
    event_emitted = Signal(object)
    finished = Signal()

    def __init__(self, train_fn: Callable, config, control: TrainControl, run_dir, resume):
        super().__init__()
        self._train_fn, self._config, self._control = train_fn, config, control
        self._run_dir, self._resume = run_dir, resume

    @Slot()
    def run(self) -> None:
        from grpo_desktop.engine.events import RunFinished

        try:
            for event in self._train_fn(self._config, self._control, self._run_dir, self._resume):
                self.event_emitted.emit(event)
        except Exception as exc:  # the engine reports its own errors; this catches fakes and bugs
            self.event_emitted.emit(
                RunFinished("failed", 0, f"{type(exc).__name__}: {exc}", traceback.format_exc())
            )
        finally:
            self.finished.emit()


class TrainingRunner(QObject):
    """Starts, pauses, resumes and stops one run at a time; emits the run state and events."""

    state_changed = Signal(str)
    event_received = Signal(object)

    def __init__(self, train_fn: Callable = default_train_fn, parent: QObject | None = None):
        super().__init__(parent)
        self._train_fn = train_fn
        self._thread: QThread | None = None
        self._worker: TrainingWorker | None = None
        self._control: TrainControl | None = None
        self.state = IDLE

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    @property
    def active(self) -> bool:
        return self._thread is not None

    def start(self, config, run_dir: str | None = None, resume: bool = False) -> None:
        if self.active:
            raise RuntimeError("A run is already active.")
        self._control = TrainControl()
        self._thread = QThread()
        self._worker = TrainingWorker(self._train_fn, config, self._control, run_dir, resume)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.run)
        self._worker.event_emitted.connect(self._on_worker_event_emitted)
        self._worker.finished.connect(self._thread.quit)
        self._thread.finished.connect(self._on_thread_finished)
        self._set_state(STARTING)
        self._thread.start()

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

    def wait(self, timeout_ms: int = 60_000) -> bool:
        """Block until the thread has ended (used on quit); True when it did."""
        return self._thread.wait(timeout_ms) if self._thread is not None else True

    @Slot(object)
    def _on_worker_event_emitted(self, event) -> None:
        kind = event.type
        if kind == "run_started" and self.state == STARTING:
            self._set_state(RUNNING)
        self.event_received.emit(event)
        if kind == "run_finished":
            self._final = {"completed": FINISHED, "stopped": STOPPED}.get(event.status, FAILED)

    @Slot()
    def _on_thread_finished(self) -> None:
        final = getattr(self, "_final", FAILED)
        self._final = FAILED
        self._thread.deleteLater()
        self._worker.deleteLater()
        self._thread = self._worker = self._control = None
        self._set_state(final)
