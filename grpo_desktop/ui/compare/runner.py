"""The Compare tab's background work: one comparison at a time, in its own QThread.

`CompareRunner.start(request)` loads the run's model (engine/compare.compare_run: one base model,
each side's adapter switched on in turn), answers the problems with both sides and delivers the
`Comparison` (plain data: rows of str and bool) in `finished`. `cancel()` sets a
threading.Event that the decode loop checks after every token (a queued slot would not run while
the job is busy); a cancelled comparison still arrives, with the problems both sides finished.
The model is freed when the job ends: Compare holds no memory between runs. torch and the
engine's model code are imported in the job's thread, never in the GUI thread.

What this is not: the view (view.py) or the comparison itself (engine/variants/compare.py).
"""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass

from PySide6.QtCore import QObject, QThread, Signal, Slot

from grpo_desktop.ui.common.job_thread import ThreadRegistry, start_job_thread

_threads = ThreadRegistry()


def live_threads() -> list[QThread]:
    """Compare threads still running (for quitting and the tests)."""
    return _threads.running()


@dataclass(frozen=True)
class CompareRequest:
    run_dir: str
    side_a: str  # variant keys: "base", "step-40"
    side_b: str
    n: int
    problems: str | None = None  # a problem file; None: the held-out set
    seed: int = 0
    remote_code: object = None  # RemoteCodePermission | None
    config: object = None  # TrainConfig: the session's, for a TRL output's data and rewards


class CompareWorker(QObject):
    """Lives in the job's thread; `run()` runs the comparison."""

    progressed = Signal(int, int)  # answers done, answers in all (2 per problem)
    compared = Signal(object)  # engine.variants.compare.Comparison
    failed = Signal(str, str)  # message for the user, technical details ('' for a UserError)
    finished = Signal()

    def __init__(self, request: CompareRequest, cancel: threading.Event):
        super().__init__()
        self._request, self._cancel = request, cancel

    @Slot()
    def run(self) -> None:
        from grpo_desktop.engine.errors import UserError

        try:
            self.compared.emit(self._compare())
        except UserError as exc:
            self.failed.emit(str(exc), "")
        except MemoryError:
            self.failed.emit(
                "Out of memory while loading or running the model. Close other programs (or "
                "the Try tab's model), or compare fewer problems.",
                "",
            )
        except Exception as exc:  # a bug: said in words, the traceback behind Details
            self.failed.emit(
                f"The comparison failed with an internal error: {type(exc).__name__}: {exc}",
                traceback.format_exc(),
            )
        finally:
            self.finished.emit()

    def _compare(self):
        from grpo_desktop.engine.variants.compare import compare_run

        r = self._request
        return compare_run(
            r.run_dir,
            r.side_a,
            r.side_b,
            n=r.n,
            seed=r.seed,
            problems=r.problems,
            remote_code=r.remote_code,
            progress=self.progressed.emit,
            cancel=self._cancel,
            fallback=r.config,
        )


class CompareRunner(QObject):
    """Starts comparisons and forwards what they report."""

    progressed = Signal(int, int)
    compared = Signal(object)
    failed = Signal(str, str)
    finished = Signal()  # the job ended (compared, cancelled or failed)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._cancel = threading.Event()
        self._thread: QThread | None = None
        self._worker: CompareWorker | None = None

    @property
    def busy(self) -> bool:
        return self._thread is not None

    @property
    def cancelling(self) -> bool:
        return self.busy and self._cancel.is_set()

    def start(self, request: CompareRequest) -> None:
        if self.busy:
            raise RuntimeError("A comparison is already running.")
        self._cancel.clear()
        self._worker = CompareWorker(request, self._cancel)
        self._worker.progressed.connect(self.progressed)
        self._worker.compared.connect(self.compared)
        self._worker.failed.connect(self.failed)
        self._thread = start_job_thread(
            "grpo-compare", self._worker, self._on_thread_finished, _threads
        )

    def cancel(self) -> None:
        """Ask the job to stop after the token being decoded."""
        self._cancel.set()

    def wait(self, timeout_ms: int = 60_000) -> bool:
        """Block until the job's thread has ended; True when it did. For quitting and tests."""
        return self._thread.wait(timeout_ms) if self._thread is not None else True

    def close(self, timeout_ms: int = 60_000) -> None:
        """Cancel any job and wait for it (the window is closing)."""
        self.cancel()
        self.wait(timeout_ms)
        if self._thread is not None:  # ended, but its finished signal not delivered yet
            self._on_thread_finished()

    @Slot()
    def _on_thread_finished(self) -> None:
        if self._thread is None:  # close() has handled it already
            return
        thread, worker = self._thread, self._worker
        self._thread = self._worker = None
        thread.deleteLater()
        if worker is not None:
            worker.deleteLater()
        self.finished.emit()
