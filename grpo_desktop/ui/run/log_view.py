"""The run log: what the engine reported, in words — start, evaluations, teaching hints, warnings,
checkpoints and the end of the run. Read-only, bounded to the last few thousand lines.

Try it: the Log dock during a run; tests/ui/run/test_alarms.py, tests/ui/test_window.py.
"""

from __future__ import annotations

import html
import time

from PySide6.QtWidgets import QPlainTextEdit, QWidget

from grpo_desktop.engine.events import event_from_dict
from grpo_desktop.ui.common.slots import connect_slots

_REPLAY = {
    "run_started": "_on_model_run_started",
    "log": "_on_model_log_added",
    "alert": "_on_model_alert_raised",
    "eval": "_on_model_eval_finished",
    "checkpoint": "_on_model_checkpoint_saved",
    "run_finished": "_on_model_run_finished",
}
COLORS = {"info": "#1f5fa8", "warning": "#b26a00", "error": "#b3261e", "plain": "#333333"}
MAX_LINES = 5000


class LogView(QPlainTextEdit):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.setReadOnly(True)
        self.setMaximumBlockCount(MAX_LINES)
        self.setPlaceholderText(
            "Messages from the run appear here: held-out accuracy, hints about what the model is "
            "learning (or why it is not), warnings and checkpoints."
        )
        connect_slots(
            model,
            self,
            "run_started",
            "session_replaced",
            "log_added",
            "alert_raised",
            "eval_finished",
            "checkpoint_saved",
            "run_finished",
        )

    def add(self, text: str, kind: str = "plain", stamp: str | None = None) -> None:
        """One line; `stamp` "" for a line read back from a saved run (its time unknown)."""
        stamp = time.strftime("%H:%M:%S") if stamp is None else stamp or "········"
        self.appendHtml(
            f"<span style='color:#999999'>{stamp}</span> "
            f"<span style='color:{COLORS[kind]}'>{html.escape(text)}</span>"
        )

    def _on_model_run_started(self, e, stamp: str | None = None) -> None:
        if self.model.read_only:  # a run folder watched, not trained here (ui/session/run_folder)
            self.add(f"The run was restarted from step {e.start_step} (read-only).", stamp=stamp)
            return
        what = "Resumed" if e.resumed else "Started"
        params = f"{e.num_parameters / 1e6:.2f}M parameters, {e.num_trainable / 1e6:.3f}M trainable"
        self.add(
            f"{what} training {e.model} on {e.device} ({params}), {e.total_steps} steps.",
            stamp=stamp,
        )
        if self.model.run_dir:
            self.add(f"Saving events and checkpoints to {self.model.run_dir}", stamp=stamp)

    def _on_model_session_replaced(self) -> None:
        self.clear()
        doc, h = self.model.doc, self.model.history
        if self.model.read_only:  # a run folder watched: what it says so far
            if h.run is not None:
                run = h.run
                self.add(
                    f"Reading {self.model.read_only} (read-only): {run.get('model', '')}, "
                    f"{h.num_steps} of {h.total_steps} steps"
                    + (", finished." if h.finished else " so far.")
                )
            self._replay(h, with_start=False)
            return
        text = f"Opened the session {doc.name} ({doc.path})"
        if h.num_steps:
            text += f": {h.num_steps} steps of history read back from its run folder"
        self.add(text + (", and the log of its run:" if h.run is not None else "."))
        self._replay(h)

    def _replay(self, h, with_start: bool = True) -> None:
        """The log of a saved run, read back from its events (kept in the session's run folder):
        the same lines it showed while it ran, without their times (the events have none)."""
        lines = [h.logs, h.alerts, h.evals, h.checkpoints]  # within a step, in this order
        items = [(int(d.get("step", 0)), rank, d) for rank, ds in enumerate(lines) for d in ds]
        items.sort(key=lambda item: item[:2])
        if with_start and h.run is not None:
            items.insert(0, (0, -1, h.run))
        if with_start and h.finished is not None:
            items.append((0, 9, h.finished))
        for _step, _rank, d in items:
            try:
                event = event_from_dict(d)
            except (KeyError, TypeError, ValueError):
                continue  # a line the run wrote wrong: the history skipped it too
            getattr(self, _REPLAY[event.type])(event, stamp="")

    def _on_model_log_added(self, e, stamp: str | None = None) -> None:
        kind = "warning" if e.level == "warning" else "info"
        self.add(f"Step {e.step}: {e.message}", kind, stamp)

    def _on_model_alert_raised(self, e, stamp: str | None = None) -> None:
        kind = "error" if e.severity == "critical" else "warning"
        self.add(f"Step {e.step}: {e.message} {e.advice}".rstrip(), kind, stamp)

    def _on_model_eval_finished(self, e, stamp: str | None = None) -> None:
        self.add(
            f"Held-out accuracy at step {e.step}: {e.accuracy:.0%} of {e.n} problems "
            f"(answers in the right format: {e.format_rate:.0%}, mean length {e.mean_length:.0f} "
            "tokens).",
            stamp=stamp,
        )

    def _on_model_checkpoint_saved(self, e, stamp: str | None = None) -> None:
        if e.path:
            self.add(f"Checkpoint saved at step {e.step}: {e.path}", stamp=stamp)

    def _on_model_run_finished(self, e, stamp: str | None = None) -> None:
        kind = "error" if e.status == "failed" else "plain"
        self.add(f"Run {e.status} at step {e.step}. {e.message}", kind, stamp)
