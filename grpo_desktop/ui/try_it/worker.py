"""The Try tab's background work: load the model once, answer a prompt with each side's variant.

`TryRunner.start(request)` (a `JobRunner`, ui/common/job_thread.py) runs one job in its own
QThread: it reads the config to try with (the run's config.json, or the session's settings
before any run), loads `ModelVariants` when the run, its settings or its checkpoints differ from
what is held (else reuses it: one copy of the base weights), then answers the prompt with each
requested variant in turn (engine/variants/try_model.py `answer_prompt`), streaming each side's
text. `stop()` sets a threading.Event the decode loop checks after every token. The thread ends
with each job; the loaded model stays until `release()` (the session or run changed, or
training needs the memory) or `close()`. Signals carry plain data only; torch and the engine
are imported in the job's thread, never in the GUI thread.

What this is not: the view (view.py) or the generation itself (engine/variants/try_model.py).
Try it: tests/ui/try_it/test_try.py.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, QThread, Signal

from grpo_desktop.ui.common import job_thread
from grpo_desktop.ui.common.job_thread import JobRunner, JobWorker

LOADING_SECTIONS = ("model", "lora", "quantization")  # what the loaded model depends on
STREAM_EVERY_S = 0.05  # at most ~20 text updates a second per side reach the GUI
THREAD_NAME = "grpo-try"


def live_threads() -> list[QThread]:
    """Try threads still running (for quitting and the tests)."""
    return job_thread.live_threads(THREAD_NAME)


@dataclass
class TryRequest:
    """One Generate: the prompt, and which variant answers on which side ("base", "trained")."""

    run_dir: str | None
    config: object  # TrainConfig: the session's settings, used when the run has no config.json
    problem: str
    gold: str | None
    settings: dict  # engine.variants.try_model.TrySettings' fields (made in the job's thread)
    sides: list[tuple[str, str]] = field(default_factory=list)  # (side, variant key)
    run_checker: bool = True
    remote_code: object = None  # RemoteCodePermission | None


class _Held:
    """The loaded model between jobs (only one job uses it at a time)."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.variants = None  # ModelVariants

    def close(self) -> None:
        variants, self.variants, self.key = self.variants, None, None
        if variants is not None:
            variants.close()


class TryWorker(JobWorker):
    """Lives in the job's thread; `work()` loads if needed and answers for each side."""

    status_changed = Signal(str, str)  # side, what it is doing
    text_changed = Signal(str, list)  # side, each sample's text so far
    answered = Signal(str, object)  # side, the result dict of answer_prompt

    doing = "Generating"
    out_of_memory = (
        "Out of memory while loading or running the model. Close other programs, or "
        "try a smaller model."
    )

    def __init__(self, request: TryRequest, held: _Held, stop: threading.Event):
        super().__init__(stop)
        self._request, self._held = request, held

    def work(self) -> None:
        from grpo_desktop.engine.models.loading import model_import_events
        from grpo_desktop.engine.variants.run_variants import ModelVariants, run_variants
        from grpo_desktop.engine.variants.try_model import TrySettings, answer_prompt, run_config

        req, held = self._request, self._held
        settings = TrySettings(**req.settings)
        cfg, own = run_config(req.run_dir, req.config)
        run_dir = req.run_dir if own else None
        variants = run_variants(run_dir)
        loading = {k: v for k, v in cfg.to_dict().items() if k in LOADING_SECTIONS}
        key = (run_dir, json.dumps(loading, sort_keys=True), tuple(v.key for v in variants))
        if held.key != key:
            held.close()
            # A GGUF model is imported once before it loads: its progress on each side
            for event in model_import_events(cfg, should_stop=self.cancel_event.is_set):
                for side, _ in req.sides:
                    self.status_changed.emit(side, event.message)
            for side, _ in req.sides:
                self.status_changed.emit(side, "Loading the model…")
            held.variants = ModelVariants(
                cfg, run_dir, remote_code=req.remote_code, variants=variants
            )
            held.key = key
        for side, _ in req.sides[1:]:
            self.status_changed.emit(side, "Waiting: answers after the base model.")
        for side, spec in req.sides:
            if self.cancel_event.is_set():
                self.status_changed.emit(side, "Stopped before it began.")
                continue
            self.status_changed.emit(side, "Generating…")
            last = [0.0]

            def on_text(texts: list[str], side: str = side, last: list = last) -> None:
                now = time.monotonic()
                if now - last[0] >= STREAM_EVERY_S:
                    last[0] = now
                    self.text_changed.emit(side, texts)

            result = answer_prompt(
                held.variants,
                cfg,
                spec,
                req.problem,
                req.gold,
                settings,
                on_text=on_text,
                should_stop=self.cancel_event.is_set,
                run_checker=req.run_checker,
            )
            self.answered.emit(side, result)


class TryRunner(JobRunner):
    """One Try job at a time; holds the loaded model between jobs."""

    status_changed = Signal(str, str)
    text_changed = Signal(str, list)
    answered = Signal(str, object)
    # failed(message, details) and finished (the job ended: answered, stopped or failed): JobRunner

    thread_name = THREAD_NAME
    busy_message = "A Try job is already running."

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._held = _Held()
        self._release_after = False

    @property
    def loaded(self) -> bool:
        """Whether a model is held (kept for the next Generate)."""
        return self._held.variants is not None

    @property
    def held(self):
        """The ModelVariants held between jobs (None when none is)."""
        return self._held.variants

    def start(self, request: TryRequest) -> None:
        if self.busy:
            raise RuntimeError(self.busy_message)
        self._release_after = False
        worker = TryWorker(request, self._held, self.cancel_event)
        worker.status_changed.connect(self.status_changed)
        worker.text_changed.connect(self.text_changed)
        worker.answered.connect(self.answered)
        self._launch(worker)

    def stop(self) -> None:
        """Ask the job to stop after the token being decoded."""
        self.cancel()

    def release(self) -> None:
        """Free the held model (now, or when the running job has ended, after stopping it)."""
        if self.busy:
            self._release_after = True
            self.stop()
        else:
            self._held.close()

    def close(self, timeout_ms: int | None = 60_000) -> bool:
        """Stop any job, wait for it, free the model (the window is closing)."""
        ended = super().close(timeout_ms)
        if ended:
            self._held.close()
        return ended

    def _job_ended(self) -> None:
        if self._release_after:
            self._release_after = False
            self._held.close()
