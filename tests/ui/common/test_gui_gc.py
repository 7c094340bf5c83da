"""Reference cycles that hold Qt objects are destroyed on the GUI thread, even while jobs run
Python in other threads (ui/common/gui_gc.py): a QObject in a cycle, made garbage on the GUI
thread, is never finalized in the job's thread, whether the job allocates enough to trigger
CPython's automatic collection there or calls the engine's explicit `collect_cycles()`; the GUI
thread's timer collects by the usual thresholds while automatic collection is off; once the jobs
end, automatic collection is on again. The jobs run in the app's real thread pool
(BackgroundTasks) and on a real JobRunner thread."""

from __future__ import annotations

import gc
import threading
import weakref

from PySide6.QtCore import QObject

from grpo_desktop.engine.ops.host_memory import collect_cycles
from grpo_desktop.ui.common import gui_gc
from grpo_desktop.ui.common.job_thread import JobRunner, JobWorker
from grpo_desktop.ui.common.tasks import BackgroundTasks, wait_for_all


class _InACycle(QObject):
    """A parentless QObject only a reference cycle keeps: the cycle collector frees it."""

    def __init__(self):
        super().__init__()
        self.me = self


def _garbage(finalized_in: list[str]) -> None:
    """A Qt object in a cycle, unreachable once this returns; notes the thread that frees it."""
    obj = _InACycle()
    weakref.finalize(obj, lambda: finalized_in.append(threading.current_thread().name))


def _allocate_cycles(n: int = 200_000) -> None:
    """Enough new container objects to pass every generation's threshold many times."""
    for _ in range(n // 1000):
        junk = [[i] for i in range(1000)]
        junk.append(junk)


def _job() -> str:
    _allocate_cycles()  # CPython would collect in this thread on its own
    collect_cycles()  # and this is what the engine calls before emptying the CUDA cache
    return threading.current_thread().name


def test_a_thread_pool_job_never_frees_the_gui_threads_qt_objects(qtbot):
    tasks = BackgroundTasks()
    results: list = []
    finalized_in: list[str] = []
    gc.collect()  # so that nothing the test did before is waiting to be collected
    _garbage(finalized_in)
    tasks.submit("job", _job, lambda result, error: results.append((result, error)))
    qtbot.waitUntil(lambda: bool(results) and bool(finalized_in), timeout=20_000)
    assert wait_for_all(10_000)
    ((job_thread, error),) = results
    assert error is None and job_thread != threading.main_thread().name
    assert finalized_in == [threading.main_thread().name]
    assert gc.isenabled() and gui_gc.running_jobs() == 0


def test_a_job_that_ends_never_collects_in_its_own_thread(qtbot):
    """Automatic collection, off while the job ran, comes back on the GUI thread: re-enabled
    in the job's thread, the allocations the job had made would start a collection right there
    at its next object (its `finally`, the result's signal), freeing the GUI thread's Qt
    objects in the job's thread (a segmentation fault in the test suite, issue 28's CI)."""
    tasks = BackgroundTasks()
    results: list = []
    finalized_in: list[str] = []
    gc.collect()
    _garbage(finalized_in)

    def job() -> list:
        return [[i] for i in range(20_000)]  # kept: the collector's count stays past its threshold

    tasks.submit("job", job, lambda result, error: results.append((result, error)))
    qtbot.waitUntil(lambda: bool(results) and bool(finalized_in), timeout=20_000)
    assert wait_for_all(10_000)
    ((kept, error),) = results
    assert error is None and len(kept) == 20_000
    assert finalized_in == [threading.main_thread().name]
    qtbot.waitUntil(gc.isenabled, timeout=5_000)  # back on once the GUI thread has looked
    assert gui_gc.running_jobs() == 0


class _Worker(JobWorker):
    def __init__(self, release: threading.Event, ran_in: list[str]):
        super().__init__()
        self.release, self.ran_in = release, ran_in

    def work(self) -> None:
        self.ran_in.append(_job())
        self.release.wait(20)  # a long job: the GUI thread goes on meanwhile


class _Runner(JobRunner):
    thread_name = "grpo-test-job"

    def start(self, worker: JobWorker) -> None:
        self._launch(worker)


def test_while_a_long_job_runs_the_gui_thread_collects_by_the_thresholds(qtbot):
    runner = _Runner()
    release, ran_in = threading.Event(), []
    gc.collect()
    runner.start(_Worker(release, ran_in))
    qtbot.waitUntil(lambda: bool(ran_in), timeout=20_000)
    assert not gc.isenabled()  # off while the job runs Python
    qtbot.waitUntil(gui_gc.ticking, timeout=5_000)  # the job woke the GUI thread's timer
    assert ran_in == ["grpo-test-job"] or ran_in[0] != threading.main_thread().name

    finalized_in: list[str] = []
    _garbage(finalized_in)  # garbage made while the job runs ...
    _allocate_cycles()  # ... and enough allocations that CPython would have collected by now
    qtbot.waitUntil(lambda: bool(finalized_in), timeout=10_000)  # the timer's collection
    assert finalized_in == [threading.main_thread().name]

    release.set()
    with qtbot.waitSignal(runner.finished, timeout=20_000):
        pass
    assert gui_gc.running_jobs() == 0
    qtbot.waitUntil(gc.isenabled, timeout=5_000)  # turned back on by the GUI thread's tick
    qtbot.waitUntil(lambda: not gui_gc.ticking(), timeout=5_000)  # no wake-ups while idle


def test_a_job_asking_for_a_collection_while_the_gui_thread_waits_for_it_goes_on(qtbot):
    """Closing the window waits for the job (JobRunner.wait); a collection the job asks for
    then does not wait for the blocked GUI thread (no HANDOFF_WAIT_S pause at every quit)."""
    import time

    runner = _Runner()
    took: list[float] = []

    class Closing(JobWorker):
        def work(self) -> None:
            time.sleep(0.3)  # the GUI thread is in wait() by now
            start = time.perf_counter()
            collect_cycles()
            took.append(time.perf_counter() - start)

    runner.start(Closing())
    assert runner.wait(20_000)
    runner.close()
    assert took and took[0] < gui_gc.HANDOFF_WAIT_S / 2, took


def test_a_thread_that_is_no_job_collects_by_itself_at_once(qtbot):
    """Only the app's jobs hand their collections over: a script's own thread (the engine run
    from a test or a notebook beside the window) collects itself, without waiting for a GUI
    thread that is busy elsewhere (here: joining that thread). Checked by where and when its
    garbage is freed, not by a clock: a full collection of this process can itself take a
    second on a busy host."""
    gui_gc.install()
    seen: dict[str, object] = {}

    def work() -> None:
        finalized_in: list[str] = []
        _garbage(finalized_in)
        collect_cycles()
        seen["after_collect"] = list(finalized_in)  # freed before collect_cycles returned

    thread = threading.Thread(target=work, name="script-thread")
    thread.start()
    thread.join()
    assert seen["after_collect"] == ["script-thread"], seen
