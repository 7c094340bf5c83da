"""One long job (a Try generation, a comparison) on its own QThread, started the same way everywhere.

`start_job_thread(name, worker, on_thread_finished)` moves `worker` (a QObject with a `run` slot
and a `finished` signal) to a new named QThread, starts `run` there and ends the thread when the
worker says it has finished. `finished` reaches `quit` directly, not queued: quit() is
thread-safe, and a queued call would wait for a GUI thread that may itself be blocked in
`thread.wait()` while the window closes. Each module keeps its own `ThreadRegistry` so quitting
and the tests can ask which of its threads still run. `job_shortcuts` gives a tab that runs such
jobs the house keys: Ctrl+Return starts, Esc cancels.

Not for training (ui/run/worker.py has its own state machine) or short jobs (ui/common/tasks.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, QThread
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QWidget


class ThreadRegistry:
    """The job threads one feature started, held weakly."""

    def __init__(self) -> None:
        self._threads: weakref.WeakSet = weakref.WeakSet()

    def add(self, thread: QThread) -> None:
        self._threads.add(thread)

    def running(self) -> list[QThread]:
        return [t for t in list(self._threads) if t.isRunning()]


def start_job_thread(
    name: str,
    worker: QObject,
    on_thread_finished: Callable[[], None],
    registry: ThreadRegistry,
) -> QThread:
    """The started thread running `worker.run` (connect the worker's own signals first)."""
    thread = QThread()
    thread.setObjectName(name)
    registry.add(thread)
    worker.moveToThread(thread)
    thread.started.connect(worker.run)
    worker.finished.connect(thread.quit, Qt.ConnectionType.DirectConnection)
    thread.finished.connect(on_thread_finished)
    thread.start()
    return thread


def job_shortcuts(view: QWidget, start: Callable[[], object], cancel: Callable[[], object]) -> None:
    """Ctrl+Return (and Ctrl+Enter on the keypad) calls `start`, Esc `cancel`, while the focus is
    anywhere in `view`."""
    for keys, slot in (("Ctrl+Return", start), ("Ctrl+Enter", start), ("Esc", cancel)):
        shortcut = QShortcut(QKeySequence(keys), view)
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(slot)
