"""Python's cycle collector runs on the GUI thread only, while other threads run Python.

CPython collects reference cycles in whichever thread happens to allocate when a threshold is
crossed: usually a busy background thread (training, an export, a preview). A cycle that holds a
Qt object (a closed dialog, a timer, a widget's lambda) is then destroyed in that thread, while Qt
requires a QObject to be deleted in its own thread: at best a warning, at worst a segmentation
fault at a random moment (seen once in the test suite: the Export dialog's size measurement was
copying files in the thread pool when the process died).

So while any job of the app runs Python off the GUI thread (`background()`, entered by
`JobWorker.run` and the thread pool's jobs), automatic collection is off and a timer on the GUI
thread collects instead, by the same thresholds CPython uses (`_Collector.tick`; the timer runs
only while jobs do). When the last job has ended, the GUI thread turns automatic collection
back on at its next tick: not the job's thread, whose next object after a long job would start
a collection there and then (a segmentation fault in the test suite, Qt's event processing
meeting a panel freed in a thread-pool job).

The engine's own explicit collections (freeing a model before emptying the CUDA cache,
engine/ops/host_memory.py `collect_cycles`) are handed to the GUI thread too and waited for: not
while the GUI thread is itself blocked waiting for jobs to end (`gui_waiting()`, around
JobRunner.wait and tasks.wait_for_all; the job then goes on at once and the timer collects
moments later), and never longer than HANDOFF_WAIT_S.

Try it: tests/ui/common/test_gui_gc.py.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer, Signal, Slot

TICK_MS = 250  # how often the GUI thread looks at the collector's counts while jobs run
HANDOFF_WAIT_S = 2.0  # how long a job waits for the GUI thread to collect for it

_lock = threading.Lock()
_jobs = 0  # jobs running Python off the GUI thread now
_was_enabled = True  # automatic collection's state when the first of them started
_disabled = False  # automatic collection is off for jobs, until the GUI thread restores it
_collector: _Collector | None = None
_gui_blocked = threading.Event()  # the GUI thread waits for jobs: it cannot collect for them
_in_job = threading.local()  # .active: this thread is inside background()


class _Collector(QObject):
    """Lives on the GUI thread: collects on its timer while automatic collection is off, and
    when a job asks (`requested`, a queued signal carrying the event to set)."""

    requested = Signal(object)
    wake = Signal()  # a job started: tick until the last one has ended

    def __init__(self, parent: QObject):
        super().__init__(parent)
        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self.tick)
        self.wake.connect(self.timer.start)
        self.requested.connect(self._collect_for)

    @Slot()
    def tick(self) -> None:
        if gc.isenabled():
            self.timer.stop()
            return  # no job is running: CPython collects by itself
        counts, thresholds = gc.get_count(), gc.get_threshold()
        for generation in (2, 1, 0):  # the oldest generation whose count passed its threshold
            if thresholds[generation] and counts[generation] > thresholds[generation]:
                gc.collect(generation)
                break
        if _jobs == 0:
            self.timer.stop()  # no wake-ups while nothing runs; the next job wakes it
            _restore_automatic()  # after the collection the jobs' allocations called for

    @Slot(object)
    def _collect_for(self, done: threading.Event) -> None:
        gc.collect()
        done.set()


def install() -> None:
    """Create the GUI thread's collector (once; called on the GUI thread by whatever starts
    jobs, before it starts one)."""
    global _collector
    if _collector is not None or not on_gui_thread():
        return
    _collector = _Collector(QCoreApplication.instance())
    from grpo_desktop.engine.ops import host_memory

    host_memory.set_cycle_collector(collect_cycles)


def on_gui_thread() -> bool:
    app = QCoreApplication.instance()
    return app is not None and QThread.currentThread() is app.thread()


@contextlib.contextmanager
def background() -> Iterator[None]:
    """Around a job's Python code off the GUI thread: no automatic collection meanwhile (where
    the GUI thread's collector is installed; elsewhere this does nothing)."""
    global _jobs, _was_enabled, _disabled
    if _collector is None or on_gui_thread():
        yield
        return
    with _lock:
        if _jobs == 0 and not _disabled:
            _was_enabled, _disabled = gc.isenabled(), True
            gc.disable()
        _jobs += 1
    with contextlib.suppress(RuntimeError):  # (the application is closing)
        _collector.wake.emit()
    _in_job.active = True
    try:
        yield
    finally:
        _in_job.active = False
        with _lock:
            _jobs -= 1
        # Not re-enabled here: the collector's count has grown all through the job, so this
        # thread's next object would start a collection in this thread. The GUI thread's next
        # tick turns it back on (the timer runs until it has).


def _restore_automatic() -> None:
    """On the GUI thread, once no job runs: automatic collection as it was before the jobs."""
    global _disabled
    with _lock:
        if _jobs == 0 and _disabled:
            _disabled = False
            if _was_enabled:
                gc.enable()


def collect_cycles() -> None:
    """gc.collect() on the GUI thread for a job (inside `background()`): handed over and waited
    for (up to HANDOFF_WAIT_S, and not while the GUI thread waits for jobs). Anywhere else (the
    GUI thread, a script's own thread) at once."""
    if _collector is None or not getattr(_in_job, "active", False):
        gc.collect()
        return
    done = threading.Event()
    try:
        _collector.requested.emit(done)
    except RuntimeError:  # the application is closing: nothing of Qt's is left to delete
        gc.collect()
        return
    deadline = time.monotonic() + HANDOFF_WAIT_S
    while not done.wait(0.02) and not _gui_blocked.is_set() and time.monotonic() < deadline:
        pass


@contextlib.contextmanager
def gui_waiting() -> Iterator[None]:
    """Around a blocking wait of the GUI thread for jobs: their hand-offs do not wait for it."""
    if not on_gui_thread():
        yield
        return
    _gui_blocked.set()
    try:
        yield
    finally:
        _gui_blocked.clear()
        _restore_automatic()  # the jobs waited for may have ended meanwhile


def running_jobs() -> int:
    return _jobs


def ticking() -> bool:
    """Whether the GUI thread's collector timer runs (only while jobs do)."""
    return _collector is not None and _collector.timer.isActive()
