"""Run controls: Start, Pause/Resume and Stop actions with shortcuts, and a progress bar with ETA.

`RunControls` owns the QActions (the window puts them in its toolbar and Run menu) and follows
the run state from the session model: what is enabled, what Pause says, what the progress bar
shows ("step 12 / 30 · 0:42 left"). Pressing a button calls the session model; starting may be
refused (invalid settings), which the window shows.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLabel, QProgressBar, QStyle, QWidget

from grpo_desktop.ui.worker import ACTIVE_STATES, PAUSED, RUNNING, STARTING, STOPPING

STATE_TEXT = {
    "idle": "Ready",
    "starting": "Loading the model and data…",
    "running": "Training",
    "paused": "Pausing after this step…",
    "stopping": "Stopping: finishing the step and saving a checkpoint…",
    "finished": "Finished",
    "stopped": "Stopped",
    "failed": "Failed",
}


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RunControls(QObject):
    start_requested = Signal()

    def __init__(self, model, parent: QWidget):
        super().__init__(parent)
        self.model = model
        style = parent.style()
        self.start_action = QAction(
            style.standardIcon(QStyle.StandardPixmap.SP_MediaPlay), "Start", parent
        )
        self.start_action.setShortcut(QKeySequence("Ctrl+R"))
        self.start_action.setToolTip("Start training with these settings (Ctrl+R)")
        self.pause_action = QAction(
            style.standardIcon(QStyle.StandardPixmap.SP_MediaPause), "Pause", parent
        )
        self.pause_action.setShortcut(QKeySequence("Ctrl+P"))
        self.pause_action.setToolTip("Pause after the current step / resume (Ctrl+P)")
        self.stop_action = QAction(
            style.standardIcon(QStyle.StandardPixmap.SP_MediaStop), "Stop", parent
        )
        self.stop_action.setShortcut(QKeySequence("Ctrl+."))
        self.stop_action.setToolTip("Finish the current step, save a checkpoint and stop (Ctrl+.)")
        self.progress = QProgressBar()
        self.progress.setMinimumWidth(260)
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)  # the text sits beside the bar, always readable
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress_label = QLabel("No run yet")
        self.progress_label.setMinimumWidth(200)
        self.progress_label.setContentsMargins(10, 0, 10, 0)
        self.paused_at: int | None = None

        self.start_action.triggered.connect(self.start_requested)
        self.pause_action.triggered.connect(self._on_pause_triggered)
        self.stop_action.triggered.connect(model.stop)
        model.state_changed.connect(self._on_model_state_changed)
        model.run_started.connect(self._on_model_run_started)
        model.step_finished.connect(self._on_model_step_finished)
        model.pause_reached.connect(self._on_model_pause_reached)
        self._on_model_state_changed(model.state)

    def actions(self) -> list[QAction]:
        return [self.start_action, self.pause_action, self.stop_action]

    def _on_pause_triggered(self) -> None:
        if self.model.state == PAUSED:
            self.model.resume()
        else:
            self.model.pause()

    def state_text(self) -> str:
        state = self.model.state
        if state == PAUSED and self.paused_at is not None:
            return f"Paused after step {self.paused_at}"
        return STATE_TEXT.get(state, state)

    def _on_model_state_changed(self, state: str) -> None:
        active = state in ACTIVE_STATES
        self.start_action.setEnabled(not active)
        self.pause_action.setEnabled(state in (RUNNING, PAUSED))
        self.pause_action.setText("Resume" if state == PAUSED else "Pause")
        self.stop_action.setEnabled(state in (STARTING, RUNNING, PAUSED))
        if state != PAUSED:
            self.paused_at = None
        if state == STARTING:
            self.progress.setRange(0, 0)  # busy indicator while the model loads
            self.progress_label.setText("Loading the model and data…")
        elif not active and self.progress.maximum() == 0:
            self.progress.setRange(0, 1)
            self.progress_label.setText(STATE_TEXT.get(state, state))
        self._update_text()

    def _on_model_run_started(self, event) -> None:
        self.progress.setRange(0, max(1, event.total_steps))
        self.progress.setValue(event.start_step)
        self._update_text()

    def _on_model_step_finished(self, step: int) -> None:
        self.progress.setMaximum(max(1, self.model.history.total_steps))
        self.progress.setValue(step)
        self._update_text()

    def _on_model_pause_reached(self) -> None:
        self.paused_at = self.model.history.last_step
        self._update_text()

    def _update_text(self) -> None:
        h = self.model.history
        if self.progress.maximum() == 0:
            return
        if not h.total_steps:
            return
        text = f"step {h.last_step} / {h.total_steps}"
        state = self.model.state
        eta = h.eta_seconds() if state in (RUNNING, STOPPING) else None
        if eta is not None and h.last_step < h.total_steps:
            text += f" · {format_duration(eta)} left"
        elif state not in ACTIVE_STATES:
            text += f" · {STATE_TEXT.get(state, state).lower()}"
        self.progress_label.setText(text)
