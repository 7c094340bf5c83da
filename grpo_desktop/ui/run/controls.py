"""Run controls: Start (or Continue), Pause/Resume, Stop and Start over actions with shortcuts,
and a progress bar with ETA.

`RunControls` owns the QActions (the window puts them in its toolbar and Run menu) and follows
the run state from the session model: what is enabled, what Pause says, whether Start continues
the session's stopped or interrupted run ("Continue"), what the progress bar shows ("step 12 /
30 · 0:42 left"). While paused, the Pause action turns into Resume (its play icon and text) and
`state_text` / `device_text` say "Paused" for the status bar; after Resume they say "Training"
again. Start and Start over only ask the window (`start_requested`,
`start_over_requested`), which may refuse (invalid settings, an untrusted checker) and shows why.
Try it: tests/ui/test_newcomer.py, tests/ui/session/test_session.py,
tests/ui/run/test_pause_resume.py.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLabel, QProgressBar, QStyle, QWidget

from grpo_desktop.ui.common.slots import connect_slots
from grpo_desktop.ui.run.worker import (
    ACTIVE_STATES,
    FINAL_STATES,
    IDLE,
    PAUSED,
    RUNNING,
    STARTING,
    STOPPING,
)

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
RUN_STATUS_TEXT = {
    "completed": "Finished",
    "stopped": "Stopped",
    "failed": "Failed",
    "interrupted": "Interrupted",
}
START_TIP = "Start training with these settings (Ctrl+R)"
PAUSE_TIP = "Pause after the current step (Ctrl+P)"
RESUME_TIP = "Resume training from where it paused (Ctrl+P)"
DEVICE_VERB = {RUNNING: "Training", STOPPING: "Training", PAUSED: "Paused"}


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RunControls(QObject):
    start_requested = Signal()
    start_over_requested = Signal()

    def __init__(self, model, parent: QWidget):
        super().__init__(parent)
        self.model = model
        style = parent.style()
        self.start_action = QAction(
            style.standardIcon(QStyle.StandardPixmap.SP_MediaPlay), "Start", parent
        )
        self.start_action.setShortcut(QKeySequence("Ctrl+R"))
        self.start_action.setToolTip(START_TIP)
        self.start_over_action = QAction(
            style.standardIcon(QStyle.StandardPixmap.SP_BrowserReload), "Start Over…", parent
        )
        self.start_over_action.setShortcut(QKeySequence("Ctrl+Shift+R"))
        self.start_over_action.setToolTip(
            "Train again from step 0, replacing this session's run (asks first)"
        )
        self.pause_icon = style.standardIcon(QStyle.StandardPixmap.SP_MediaPause)
        self.resume_icon = style.standardIcon(QStyle.StandardPixmap.SP_MediaPlay)
        self.pause_action = QAction(self.pause_icon, "Pause", parent)
        self.pause_action.setShortcut(QKeySequence("Ctrl+P"))
        self.pause_action.setToolTip(PAUSE_TIP)
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
        # The runner keeps its last state (finished, failed…) when another session is opened;
        # that state then describes no run of this session and is shown as idle.
        self._final_is_ours = False

        self.start_action.triggered.connect(self.start_requested)
        self.start_over_action.triggered.connect(self.start_over_requested)
        self.pause_action.triggered.connect(self._on_pause_triggered)
        self.stop_action.triggered.connect(model.stop)
        connect_slots(
            model,
            self,
            "state_changed",
            "run_started",
            "step_finished",
            "pause_reached",
            "session_replaced",
            "config_changed",
            "run_finished",
        )
        model.config_replaced.connect(self.update_start_action)
        self._on_model_session_replaced()

    def actions(self) -> list[QAction]:
        return [self.start_action, self.pause_action, self.stop_action]

    def update_start_action(self) -> None:
        """Start says "Continue" when it would continue the session's run."""
        if self.model.can_continue():
            step = self.model.run_state().checkpoint_step
            self.start_action.setText("Continue")
            self.start_action.setToolTip(
                f"Continue training from the checkpoint at step {step} (Ctrl+R)"
                if step
                else "Continue training: no checkpoint yet, so from step 0 (Ctrl+R)"
            )
        else:
            self.start_action.setText("Start")
            self.start_action.setToolTip(START_TIP)
        self.start_over_action.setEnabled(
            not self.model.running
            and self.model.history.run is not None
            and not self.model.read_only
        )

    def _on_model_config_changed(self, section: str, name: str) -> None:
        if (section, name) == ("run", "max_steps"):
            self.update_start_action()

    def _state(self) -> str:
        """The runner's state as this session sees it (IDLE for a previous session's end)."""
        state = self.model.state
        return IDLE if state in FINAL_STATES and not self._final_is_ours else state

    def _on_model_session_replaced(self) -> None:
        self._final_is_ours = self.model.running
        h = self.model.history
        self.progress.setRange(0, max(1, h.total_steps))
        self.progress.setValue(h.last_step)
        self.progress_label.setText("No run yet")
        self._on_model_state_changed(self.model.state)

    def _on_pause_triggered(self) -> None:
        if self.model.state == PAUSED:
            self.model.resume()
        else:
            self.model.pause()

    def state_text(self) -> str:
        state = self._state()
        if state == PAUSED and self.paused_at is not None:
            return f"Paused after step {self.paused_at}"
        if self.model.read_only:  # a run folder shown read-only (ui/session/run_folder.py)
            h = self.model.history
            of = f" of {h.total_steps}" if h.total_steps else ""
            return f"Read-only: {'finished, ' if h.finished else ''}step {h.last_step}{of}"
        if state == IDLE and self.model.history.run is not None:  # an opened session's run
            status = self.model.run_state().status
            return (
                RUN_STATUS_TEXT.get(status, status) + f" after step {self.model.history.last_step}"
            )
        return STATE_TEXT.get(state, state)

    def device_text(self) -> str | None:
        """The status bar's device note for this session's run: "Training on cpu" while it
        trains, "Paused on cpu" while paused, "Last run on cpu" once it ended; None before a run
        has started (the window then names the device it probed)."""
        run = self.model.history.run
        device = run.get("device") if run else None
        state = self._state()
        if not device or state in (IDLE, STARTING):
            return None
        return f"{DEVICE_VERB.get(state, 'Last run')} on {device}"

    def _on_model_state_changed(self, state: str) -> None:
        active = state in ACTIVE_STATES
        if active:
            self._final_is_ours = True  # this session's run (even one that fails to start)
        self.start_action.setEnabled(not active and not self.model.read_only)
        self.pause_action.setEnabled(state in (RUNNING, PAUSED))
        paused = state == PAUSED
        self.pause_action.setText("Resume" if paused else "Pause")
        self.pause_action.setIcon(self.resume_icon if paused else self.pause_icon)
        self.pause_action.setToolTip(RESUME_TIP if paused else PAUSE_TIP)
        self.stop_action.setEnabled(state in (STARTING, RUNNING, PAUSED))
        if state != PAUSED:
            self.paused_at = None
        if state == STARTING:
            self.progress.setRange(0, 0)  # busy indicator while the model loads
            self.progress_label.setText("Loading the model and data…")
        elif not active and self.progress.maximum() == 0:
            self.progress.setRange(0, 1)
            self.progress_label.setText(STATE_TEXT.get(self._state(), state))
        self._update_text()
        self.update_start_action()

    def _on_model_run_started(self, event) -> None:
        self._final_is_ours = True
        self.progress.setRange(0, max(1, event.total_steps))
        self.progress.setValue(event.start_step)
        self._update_text()

    def _on_model_step_finished(self, step: int) -> None:
        self.progress.setMaximum(max(1, self.model.history.total_steps))
        self.progress.setValue(step)
        self._update_text()

    def _on_model_run_finished(self, _event) -> None:
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
        state = self._state()
        eta = h.eta_seconds() if state in (RUNNING, STOPPING) else None
        if eta is not None and h.last_step < h.total_steps:
            text += f" · {format_duration(eta)} left"
        elif self.model.read_only:  # a run folder watched (ui/session/run_folder.py)
            text += " · finished" if h.finished else " · read-only"
        elif state == IDLE and h.run is not None:  # a session opened with its run
            text += f" · {self.model.run_state().status}"
        elif state not in ACTIVE_STATES:
            text += f" · {STATE_TEXT.get(state, state).lower()}"
        self.progress_label.setText(text)
