"""One long job (training, a Try generation, a comparison, an export) on its own QThread.

Every long job in the window runs the same way: a `JobWorker` (its `work()` does the job) is
moved to a new named QThread by a `JobRunner`, which starts it, cancels it through a
`threading.Event` (a plain call: a queued slot would never run while `work()` is busy), and
delivers the worker's signals, `failed` and `finished` on the GUI thread. The worker's
`finished` reaches the thread's `quit` directly, not queued: quit() is thread-safe, and a queued
call would wait for a GUI thread that may itself be blocked in `wait()` while the window closes.
Every job thread is registered, so quitting and the tests' leak check can ask which still run
(`live_threads`). `job_shortcuts` gives a tab that runs such jobs the house keys: Ctrl+Return
starts, Esc cancels.

Not for short jobs that only need a result back (ui/common/tasks.py). Try it: tests/ui/run/,
tests/ui/try_it/, tests/ui/compare/ and tests/ui/export/ drive the four runners built on it.
"""

from __future__ import annotations

import threading
import traceback
import weakref
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QWidget

from grpo_desktop.ui.common import gui_gc

_threads: weakref.WeakSet = weakref.WeakSet()  # every job thread started, held weakly


def live_threads(name: str | None = None) -> list[QThread]:
    """Job threads still running (all, or those named `name`): for quitting and the tests."""
    return [t for t in list(_threads) if t.isRunning() and (name is None or t.objectName() == name)]


class JobWorker(QObject):
    """The part of a job that runs in its thread: subclasses write `work()`.

    An exception from `work()` becomes `failed(message, details)`: a UserError's own message
    (no details), `out_of_memory` for a MemoryError when the subclass says one, else "`doing`
    failed with an internal error" with the traceback as details. `finished` comes last, always.
    """

    failed = Signal(str, str)  # message for the user, technical details ('' for a UserError)
    finished = Signal()

    doing = "The job"  # the start of the internal-error message: "Generating", "The export"
    out_of_memory: str | None = None  # what a MemoryError says (None: an internal error)

    def __init__(self, cancel_event: threading.Event | None = None):
        super().__init__()
        self.cancel_event = cancel_event if cancel_event is not None else threading.Event()

    def work(self) -> None:
        raise NotImplementedError

    @Slot()
    def run(self) -> None:
        try:
            with gui_gc.background():  # reference cycles are collected on the GUI thread
                self.work()
        except Exception as exc:  # said in words by report(); a bug's traceback behind Details
            self.report(exc)
        finally:
            self.finished.emit()

    def report(self, exc: Exception) -> None:
        """Say what went wrong (called inside the `except`, so the traceback is at hand)."""
        from grpo_desktop.engine.errors import UserError

        if isinstance(exc, UserError):
            self.failed.emit(str(exc), "")
        elif isinstance(exc, MemoryError) and self.out_of_memory:
            self.failed.emit(self.out_of_memory, "")
        else:
            self.failed.emit(
                f"{self.doing} failed with an internal error: {type(exc).__name__}: {exc}",
                traceback.format_exc(),
            )


class JobRunner(QObject):
    """One job at a time on a QThread named `thread_name`; subclasses make the worker, connect
    its own signals and call `_launch(worker)`. `finished` says the job ended (done, cancelled or
    failed) and its thread with it."""

    failed = Signal(str, str)  # the worker's failed, on the GUI thread
    finished = Signal()

    thread_name = "grpo-job"
    busy_message = "A job is already running."

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.cancel_event = threading.Event()
        self._thread: QThread | None = None
        self._worker: JobWorker | None = None

    @property
    def busy(self) -> bool:
        """Whether a job's thread exists (running, or ended with `finished` not yet delivered)."""
        return self._thread is not None

    @property
    def thread(self) -> QThread | None:
        """The running job's thread (None when there is no job)."""
        return self._thread

    @property
    def cancelling(self) -> bool:
        return self.busy and self.cancel_event.is_set()

    def _launch(self, worker: JobWorker) -> None:
        """Run `worker.run` on a new thread (connect the worker's own signals first)."""
        if self.busy:
            raise RuntimeError(self.busy_message)
        self.cancel_event.clear()
        gui_gc.install()
        thread = QThread()
        thread.setObjectName(self.thread_name)
        _threads.add(thread)
        self._thread, self._worker = thread, worker
        worker.moveToThread(thread)
        worker.failed.connect(self.failed)
        thread.started.connect(worker.run)
        worker.finished.connect(thread.quit, Qt.ConnectionType.DirectConnection)
        thread.finished.connect(self._on_thread_finished)
        self._job_starting()
        thread.start()

    def cancel(self) -> None:
        """Ask the job to stop at its next check of `cancel_event`."""
        self.cancel_event.set()

    def wait(self, timeout_ms: int | None = 60_000) -> bool:
        """Block until the job's thread has ended (`None`: however long it takes); True when it
        did. Only for quitting and tests."""
        if self._thread is None:
            return True
        with gui_gc.gui_waiting():
            return self._thread.wait() if timeout_ms is None else self._thread.wait(timeout_ms)

    def close(self, timeout_ms: int | None = 60_000) -> bool:
        """Cancel any job, wait for it and deliver its `finished` now (the window is closing).
        True when no thread is left running."""
        self.cancel()
        ended = self.wait(timeout_ms)
        if ended and self._thread is not None:  # ended, its finished signal not delivered yet
            self._on_thread_finished()
        return ended

    def _job_starting(self) -> None:
        """Called once the job's thread exists (`busy` is True), just before it starts."""

    def _job_ended(self) -> None:
        """Called on the GUI thread once the job's thread has ended, before `finished`."""

    @Slot()
    def _on_thread_finished(self) -> None:
        if self._thread is None:  # close() has handled it already
            return
        thread, worker = self._thread, self._worker
        self._thread = self._worker = None
        thread.deleteLater()
        if worker is not None:
            worker.deleteLater()
        self._job_ended()
        self.finished.emit()


def job_shortcuts(view: QWidget, start: Callable[[], object], cancel: Callable[[], object]) -> None:
    """Ctrl+Return (and Ctrl+Enter on the keypad) calls `start`, Esc `cancel`, while the focus is
    anywhere in `view`."""
    for keys, slot in (("Ctrl+Return", start), ("Ctrl+Enter", start), ("Esc", cancel)):
        shortcut = QShortcut(QKeySequence(keys), view)
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(slot)
