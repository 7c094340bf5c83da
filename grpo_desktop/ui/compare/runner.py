"""The Compare tab's background work: one comparison at a time, in its own QThread.

`CompareRunner.start(request)` (a `JobRunner`, ui/common/job_thread.py) loads the run's model
(engine/variants/compare.py `compare_run`: one base model, each side's adapter switched on in
turn), answers the problems with both sides and delivers the `Comparison` (plain data: rows of
str and bool) in `compared`. `cancel()` sets a threading.Event that the decode loop checks after
every token (a queued slot would not run while the job is busy); a cancelled comparison still
arrives, with the problems both sides finished. The model is freed when the job ends: Compare
holds no memory between runs. torch and the engine's model code are imported in the job's
thread, never in the GUI thread.

What this is not: the view (view.py) or the comparison itself (engine/variants/compare.py).
Try it: tests/ui/compare/test_compare.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from PySide6.QtCore import QThread, Signal

from grpo_desktop.ui.common import job_thread
from grpo_desktop.ui.common.job_thread import JobRunner, JobWorker

THREAD_NAME = "grpo-compare"


def live_threads() -> list[QThread]:
    """Compare threads still running (for quitting and the tests)."""
    return job_thread.live_threads(THREAD_NAME)


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


class CompareWorker(JobWorker):
    """Lives in the job's thread; `work()` runs the comparison."""

    progressed = Signal(int, int)  # answers done, answers in all (2 per problem)
    compared = Signal(object)  # engine.variants.compare.Comparison
    importing = Signal(str)  # a GGUF model's import, as it goes (before any answer)

    doing = "The comparison"
    out_of_memory = (
        "Out of memory while loading or running the model. Close other programs (or "
        "the Try tab's model), or compare fewer problems."
    )

    def __init__(self, request: CompareRequest, cancel: threading.Event):
        super().__init__(cancel)
        self._request = request

    def work(self) -> None:
        from grpo_desktop.engine.variants.compare import compare_run

        r = self._request
        self.compared.emit(
            compare_run(
                r.run_dir,
                r.side_a,
                r.side_b,
                n=r.n,
                seed=r.seed,
                problems=r.problems,
                remote_code=r.remote_code,
                progress=self.progressed.emit,
                cancel=self.cancel_event,
                fallback=r.config,
                importing=self.importing.emit,
            )
        )


class CompareRunner(JobRunner):
    """Starts comparisons and forwards what they report; `failed(message, details)` and
    `finished` (the job ended: compared, cancelled or failed) come from JobRunner."""

    progressed = Signal(int, int)
    compared = Signal(object)
    importing = Signal(str)

    thread_name = THREAD_NAME
    busy_message = "A comparison is already running."

    def start(self, request: CompareRequest) -> None:
        worker = CompareWorker(request, self.cancel_event)
        worker.progressed.connect(self.progressed)
        worker.compared.connect(self.compared)
        worker.importing.connect(self.importing)
        self._launch(worker)
