"""Short background jobs (dataset preview, model scan, tokenizer load, checker test) off the GUI
thread.

`BackgroundTasks.submit(key, fn, on_done)` runs `fn()` in the app's thread pool and calls
`on_done(result, error)` on the GUI thread, only for the newest job of each key: a newer request
cancels the older one (taken off the queue if it has not started, its result dropped if it has,
so a slow preview never overwrites a newer one). `cancel(key)` does the same without a new job.
A job already running is not interrupted (a network call cannot be); the pool has room for a
few, so one stuck on the network does not hold up the others. `wait_for_all()` lets the app
(and the tests) wait for them before quitting.

Not for long jobs with progress and Cancel, such as training (ui/common/job_thread.py).
Try it: tests/ui/panels/test_hub.py.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

from grpo_desktop.ui.common import gui_gc

_pool: QThreadPool | None = None
_emitter: _Emitter | None = None
_ids = itertools.count(1)
_alive: set = set()  # jobs not deleted by the pool (to be cancellable) live here until they end


class _Emitter(QObject):
    """One long-lived sender in the GUI thread; results travel through its queued signal."""

    job_done = Signal(int, object, object)  # owner id, (key, generation), (result, error)


def pool() -> QThreadPool:
    global _pool
    if _pool is None:
        _pool = QThreadPool()
        _pool.setMaxThreadCount(4)
        _pool.setExpiryTimeout(2000)
    return _pool


def _shared_emitter() -> _Emitter:
    global _emitter
    if _emitter is None:
        _emitter = _Emitter()
    return _emitter


def wait_for_all(timeout_ms: int = 30_000) -> bool:
    """Block until every background job has finished; True when they did."""
    if _pool is None:
        return True
    with gui_gc.gui_waiting():
        return _pool.waitForDone(timeout_ms)


def active_jobs() -> int:
    return 0 if _pool is None else _pool.activeThreadCount()


class _Job(QRunnable):
    def __init__(self, owner: int, tag: tuple, fn: Callable[[], Any], emitter: _Emitter):
        super().__init__()
        self._owner, self._tag, self._fn, self._emitter = owner, tag, fn, emitter

    def run(self) -> None:
        try:
            with gui_gc.background():  # reference cycles are collected on the GUI thread
                outcome = (self._fn(), None)
        except Exception as exc:  # delivered to on_done as the error
            outcome = (None, exc)
        # RuntimeError: the application is gone (quit while the job ran): nobody to tell.
        with contextlib.suppress(RuntimeError):
            self._emitter.job_done.emit(self._owner, self._tag, outcome)
        _alive.discard(self)  # `self` keeps it alive until run() returns


class BackgroundTasks(QObject):
    """Submits jobs and delivers each key's newest result on the GUI thread."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._id = next(_ids)
        self._generation: dict[str, int] = {}
        self._callbacks: dict[tuple, Callable[[Any, Exception | None], None]] = {}
        self._queued: dict[tuple, _Job] = {}
        self._emitter = _shared_emitter()
        gui_gc.install()
        self._emitter.job_done.connect(self._on_emitter_job_done)

    def submit(
        self, key: str, fn: Callable[[], Any], on_done: Callable[[Any, Exception | None], None]
    ) -> None:
        self.cancel(key)
        generation = self._generation.get(key, 0) + 1
        self._generation[key] = generation
        tag = (key, generation)
        self._callbacks[tag] = on_done
        job = _Job(self._id, tag, fn, self._emitter)
        job.setAutoDelete(False)  # kept while queued, so cancel() can take it off the queue
        self._queued[tag] = job
        _alive.add(job)
        pool().start(job)

    def cancel(self, key: str) -> bool:
        """Drop the pending job of `key`: off the queue if not started, else its result is
        ignored. True when there was one."""
        pending = [tag for tag in self._callbacks if tag[0] == key]
        for tag in pending:
            self._callbacks.pop(tag, None)
            job = self._queued.pop(tag, None)
            if job is not None and pool().tryTake(job):
                _alive.discard(job)  # never started
        self._generation[key] = self._generation.get(key, 0) + 1
        return bool(pending)

    def busy(self, key: str) -> bool:
        return any(tag[0] == key for tag in self._callbacks)

    @Slot(int, object, object)
    def _on_emitter_job_done(self, owner: int, tag: tuple, outcome: tuple) -> None:
        if owner != self._id:
            return
        self._queued.pop(tag, None)
        callback = self._callbacks.pop(tag, None)
        if callback is not None and self._generation.get(tag[0]) == tag[1]:
            callback(*outcome)
