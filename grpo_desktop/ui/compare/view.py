"""The Compare tab: the same problems through two of the run's models, problem by problem.

Pick side A (the base model or a checkpoint) and side B (a checkpoint; the newest by default),
the problems (the held-out set, or a file) and how many; Run (Ctrl+Return) answers each problem
greedily with both sides and scores the answers with the run's accuracy check; Cancel (Esc) stops
after the current token and keeps the problems both sides finished. A progress bar with the
time left, then what it found (results.py). The work runs in `CompareRunner`'s thread
(runner.py) and frees the model when it ends. While training runs, Run is off and a note says
why. A TRL output_dir shown read-only offers its checkpoint-N folders and final model, scored with
the settings engine/variants/trl_config.py builds for it (the note says what they assume).

Reads the session through `SessionModel` only; the checkpoints are listed without torch
(engine/runs/layout.py, engine/variants/trl_models.py). Does not train or export models.
Try it: the Compare tab after a run; tests/ui/compare/test_compare.py.
"""

from __future__ import annotations

import os
import re
import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.runs.layout import list_checkpoints
from grpo_desktop.engine.variants.trl_config import trl_run_config
from grpo_desktop.engine.variants.trl_models import is_trl_output, trl_models
from grpo_desktop.ui.common.job_thread import job_shortcuts
from grpo_desktop.ui.common.slots import connect_slots
from grpo_desktop.ui.common.widgets import (
    MessageBar,
    note_label,
    rich_tooltip,
    set_note,
    show_error_details,
)
from grpo_desktop.ui.compare import tips
from grpo_desktop.ui.compare.results import CompareResults, duration
from grpo_desktop.ui.compare.runner import CompareRequest, CompareRunner

BASE = ("base", "Base model")
CHOOSE_FILE = "choose-file"
PROBLEM_FILES = "Problems (*.jsonl *.json *.csv *.parquet)"


class CompareView(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.runner = CompareRunner(self)
        self.last_dir = os.path.expanduser("~")
        self._first: tuple[float, int] | None = None  # (time, answers) at the first progress
        self._asked_for = ""  # the run folder of the comparison running or shown
        self._latest = ""  # the newest side when the pickers were last filled

        self.message_bar = MessageBar()
        self.note = note_label("info")
        self.side_a, self.side_b = QComboBox(), QComboBox()
        self.side_a.setToolTip(rich_tooltip(tips.SIDE_A))
        self.side_b.setToolTip(rich_tooltip(tips.SIDE_B))
        self.source_box = QComboBox()
        self.source_box.addItem("Held-out problems", None)
        self.source_box.addItem("Problems from a file…", CHOOSE_FILE)
        self.source_box.setToolTip(rich_tooltip(tips.SOURCE))
        self._source_index = 0
        self.count = QSpinBox()
        self.count.setRange(1, 10_000)
        self.count.setValue(100)
        self.count.setToolTip(rich_tooltip(tips.COUNT))
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip(rich_tooltip(tips.CANCEL, "Esc"))
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(10)
        self.progress_label = QLabel()
        self.results = CompareResults(self.message_bar)
        pick = QHBoxLayout()
        for caption, box in (("A (before):", self.side_a), ("B (after):", self.side_b)):
            label = QLabel(caption)
            label.setBuddy(box)
            label.setToolTip(box.toolTip())
            pick.addWidget(label)
            pick.addWidget(box)
            pick.addSpacing(8)
        pick.addWidget(QLabel("Problems:"))
        pick.addWidget(self.source_box)
        pick.addWidget(self.count)
        pick.addStretch(1)
        pick.addWidget(self.run_button)
        pick.addWidget(self.cancel_button)
        progress = QHBoxLayout()
        progress.addWidget(self.progress, 1)
        progress.addWidget(self.progress_label)
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.message_bar)
        col.addWidget(self.note)
        col.addLayout(pick)
        col.addLayout(progress)
        col.addWidget(self.results, 1)

        job_shortcuts(self, self.run, self.cancel)
        self.run_button.clicked.connect(self.run)
        self.cancel_button.clicked.connect(self.cancel)
        self.source_box.activated.connect(self._on_source_box_activated)
        self.side_a.currentIndexChanged.connect(self._update_state)
        self.side_b.currentIndexChanged.connect(self._update_state)
        self.message_bar.details_requested.connect(self._on_message_bar_details_requested)
        connect_slots(self.runner, self, "progressed", "compared", "failed", "finished",
                      "importing", name="runner")  # fmt: skip
        connect_slots(self.model, self, "state_changed", "session_replaced", "checkpoint_saved")
        self._show_progress(False)
        self.refresh()

    # ------------------------------------------------------------------ what the run offers

    def run_dir(self) -> str:
        """The run whose models are compared: the session's, or a run folder the window shows
        read-only (File ▸ Open Run Folder…: an app run, or a TRL output_dir)."""
        return self.model.read_only_folder or self.model.run_dir

    def sides(self) -> list[tuple[str, str]]:
        """(variant key, label): the base model, then each whole checkpoint, oldest first (a
        TRL output's checkpoint-N folders, then its final model)."""
        run_dir = self.run_dir()
        if is_trl_output(run_dir):
            return [BASE] + [(key, label) for key, label, *_ in trl_models(run_dir)]
        steps = [step for step, _ in list_checkpoints(run_dir)] if os.path.isdir(run_dir) else []
        return [BASE] + [(f"step-{s}", f"Step {s}") for s in steps]

    def refresh(self) -> None:
        """Re-read the run's checkpoints (after a checkpoint, a run, a session switch)."""
        sides = self.sides()
        latest = sides[-1][0]
        for box, default in ((self.side_a, "base"), (self.side_b, latest)):
            chosen = box.currentData()
            if box is self.side_b and chosen == self._latest:
                chosen = None  # B was the newest checkpoint: it stays the newest one
            box.blockSignals(True)
            box.clear()
            for key, label in sides:
                box.addItem(label + (" (latest)" if key == latest != "base" else ""), key)
            index = box.findData(chosen) if chosen else -1
            box.setCurrentIndex(index if index >= 0 else box.findData(default))
            box.blockSignals(False)
        self._latest = latest
        self._update_state()

    def blocked_reason(self) -> str:
        """Why Run cannot start now ('' when it can)."""
        if self.model.runner.active:
            return tips.TRAINING
        if self.side_b.count() < 2:
            return tips.TRL_NO_MODEL if is_trl_output(self.run_dir()) else tips.NO_CHECKPOINT
        if self.side_a.currentData() == self.side_b.currentData():
            return tips.SAME_SIDES
        return ""

    def _update_state(self, *_args) -> None:
        busy = self.runner.busy
        reason = self.blocked_reason()
        run_dir = self.run_dir()
        trl = trl_run_config(run_dir, self.model.config).notes if is_trl_output(run_dir) else []
        shown = reason if reason not in ("", tips.SAME_SIDES) else " ".join(trl)
        set_note(self.note, shown)
        self.run_button.setEnabled(not busy and not reason)
        self.run_button.setToolTip(rich_tooltip(reason or tips.RUN, "Ctrl+Return"))
        self.cancel_button.setEnabled(busy and not self.runner.cancelling)
        for w in (self.side_a, self.side_b, self.source_box, self.count):
            w.setEnabled(not busy and self.side_b.count() > 1)

    # ------------------------------------------------------------------ problems

    def problem_file(self) -> str | None:
        """The chosen problem file; None: the held-out set."""
        data = self.source_box.currentData()
        return None if data == CHOOSE_FILE else data

    def use_problem_file(self, path: str) -> None:
        """Compare on the problems in `path` (listed in the source picker from now on)."""
        index = self.source_box.findData(path)
        if index < 0:
            index = self.source_box.count() - 1  # before "Problems from a file…"
            self.source_box.insertItem(index, os.path.basename(path), path)
            self.source_box.setItemData(index, path, Qt.ItemDataRole.ToolTipRole)
        self.source_box.setCurrentIndex(index)
        self._source_index = index
        self.last_dir = os.path.dirname(path)

    def _on_source_box_activated(self, index: int) -> None:
        if self.source_box.itemData(index) != CHOOSE_FILE:
            self._source_index = index
            return
        path, _ = QFileDialog.getOpenFileName(
            self, "Compare on the problems in a file", self.last_dir, PROBLEM_FILES
        )
        if path:
            self.use_problem_file(path)
        else:
            self.source_box.setCurrentIndex(self._source_index)

    # ------------------------------------------------------------------ running

    def run(self) -> bool:
        """Start comparing; False (the reason in the message bar) when it cannot run now."""
        if self.runner.busy:
            return False
        reason = self.blocked_reason()
        if reason:
            self.message_bar.show_message("warning", reason)
            return False
        self.message_bar.clear()
        request = CompareRequest(
            run_dir=self.run_dir(),
            side_a=self.side_a.currentData(),
            side_b=self.side_b.currentData(),
            n=self.count.value(),
            problems=self.problem_file(),
            remote_code=self.model.remote_code_permission(resume=True),
            config=self.model.config,
        )
        self._first = None
        self._asked_for = request.run_dir
        self.progress.setRange(0, 0)  # busy until the model is loaded
        self.progress_label.setText("Loading the model…")
        self._show_progress(True)
        where = os.path.basename(request.problems) if request.problems else "held-out problems"
        labels = [box.currentText().removesuffix(" (latest)") for box in (self.side_a, self.side_b)]
        self.results.show_running(*labels, request.n, where)
        self.runner.start(request)
        self._update_state()
        return True

    def cancel(self) -> None:
        if self.runner.busy:
            self.runner.cancel()
            self.progress_label.setText("Cancelling after the current token…")
            self._update_state()

    def shutdown(self) -> None:
        """Cancel any comparison and wait for it (the window closes)."""
        self.runner.close()
        self.results.clear()

    def _show_progress(self, shown: bool) -> None:
        self.progress.setVisible(shown)
        self.progress_label.setVisible(shown)

    def _on_runner_progressed(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = (now, done)
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        text = f"{done} of {total} answers (2 per problem)"
        t_first, d_first = self._first
        if done > d_first and done < total:
            left = (now - t_first) / (done - d_first) * (total - done)
            text += f" · about {duration(left)} left"
        self.progress_label.setText(text)

    def _on_runner_importing(self, text: str) -> None:
        """A GGUF model is imported before the first answer: its own progress and time left."""
        fraction = re.search(r"\[(\d+)%\]$", text)
        self.progress.setRange(0, 100)
        self.progress.setValue(int(fraction.group(1)) if fraction else 0)
        self.progress_label.setText(re.sub(r"\s*\[\d+%\]$", "", text))

    def _on_runner_compared(self, comparison) -> None:
        if self._asked_for == self.run_dir():  # not a session left since
            self.results.show_comparison(comparison)

    def _on_runner_failed(self, message: str, details: str) -> None:
        self.message_bar.show_message("error", message, details)

    def _on_runner_finished(self) -> None:
        self._show_progress(False)
        self._update_state()

    def _on_message_bar_details_requested(self, details: str) -> None:
        show_error_details(self, details)

    # ------------------------------------------------------------------ the session

    def _on_model_state_changed(self, _state: str) -> None:
        if self.model.runner.active and self.runner.busy:
            self.cancel()  # training needs the memory, and the checkpoints change
            self.message_bar.show_message(
                "warning", "The comparison was cancelled: training started."
            )
        self.refresh()

    def _on_model_checkpoint_saved(self, _event) -> None:
        self.refresh()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if is_trl_output(self.run_dir()) and not self.runner.busy:
            self.refresh()  # a TRL run followed live logs no checkpoint events: list them now

    def _on_model_session_replaced(self) -> None:
        self.cancel()
        self.results.clear()
        self.side_a.clear()  # another run: its own defaults
        self.side_b.clear()
        self.refresh()
