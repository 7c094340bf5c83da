"""The Reward panel's "Test on a file…": the reward dry-run of `grpo-desktop score`, with a table.

`ScoreFileRow` is the button (and what it says while busy) that the panel adds: it asks for a
.jsonl file of samples (`completion`, `answer`, optional `prompt`; engine/rewards/score_file.py),
scores it off the GUI thread with the panel's current reward settings (the same code as the CLI)
and opens a `ScoreDialog`: one row per sample with the completion (elided, full text in the
tooltip), the answer as read, the extracted answer, each reward part, the total and the reason or
checker error, plus a summary line (mean per part, errors). A file that cannot be scored gets a
message naming its bad lines; nothing here raises into the event loop.

What this does not do: edit or save samples, or score with a checker that has not been trusted
(the button is disabled until it is, as "Test checker" is). Try it: tests/ui/panels/test_score.py.
"""

from __future__ import annotations

import dataclasses
import html
import os
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.config import RewardsConfig
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.rewards.score_file import ScoreReport, score_file, summary_line
from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import wrapped_label
from grpo_desktop.ui.session.model import UNTRUSTED_CHECKER

SCORE_FILE_TIP = (
    "Score a file of sample answers with these reward settings before you train: a silently "
    "broken reward is the most common way to waste a GRPO run. The file is JSON lines, one "
    'sample a line: {"completion": "…", "answer": "18"} and optionally "prompt"; answers are read '
    "like a dataset's answer column (GSM8K's \"… #### 18\" works). Same as `grpo-desktop score`."
)
FILE_FILTER = "JSON lines (*.jsonl);;All files (*)"
MAX_ROWS = 5000  # rows shown in the table (the summary covers all of them)
COMPLETION_CHARS = 90
_ERROR = QColor("#b3261e")
_MUTED = QColor("#777777")
_RIGHT, _WRONG = QColor("#e6f4ea"), QColor("#fdecea")


def _tooltip(text: str) -> str:
    body = html.escape(text, quote=False).replace("\n", "<br>") or "(empty)"
    return f"<qt><span style='white-space:pre-wrap'>{body}</span></qt>"


def _one_line(text: str, limit: int) -> str:
    flat = " ⏎ ".join(part.strip() for part in text.strip().splitlines()) or "(empty)"
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class _NumberItem(QTableWidgetItem):
    """A cell that sorts by its number (no score sorts first)."""

    def __init__(self, value: float | None, text: str | None = None):
        super().__init__(text or ("no score" if value is None else f"{value:.4g}"))
        self.value = value
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if value is None:
            self.setForeground(_MUTED)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        mine = getattr(self, "value", None)
        theirs = getattr(other, "value", None)
        return (-1e300 if mine is None else mine) < (-1e300 if theirs is None else theirs)


class ScoreDialog(QDialog):
    """One scored sample file as a sortable table with a summary line."""

    def __init__(self, report: ScoreReport, path: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.report, self.path = report, path
        self.setWindowTitle(f"Reward test: {os.path.basename(path)}")
        parts = list(report.weights)
        weights = ", ".join(f"{name} × {w:g}" for name, w in report.weights.items())
        self.source_label = wrapped_label(f"{path} — scored with {weights}.", muted=True)
        self.summary_label = wrapped_label(summary_line(report.summary))
        bold = QFont(self.summary_label.font())
        bold.setBold(True)
        self.summary_label.setFont(bold)
        self.columns = ["Line", "Completion", "Answer", "Extracted", *parts, "Total", "Reason"]
        shown = min(len(report.rows), MAX_ROWS)
        self.table = QTableWidget(shown, len(self.columns))
        self.table.setHorizontalHeaderLabels(
            [
                f"{c.capitalize()}\n× {report.weights[c]:g}" if c in parts else c
                for c in self.columns
            ]
        )
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 10)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setAlternatingRowColors(True)
        for i in range(shown):
            self._fill_row(i, parts)
        self.table.setSortingEnabled(True)
        self.table.sortItems(0, Qt.SortOrder.AscendingOrder)  # file order until a header is clicked
        self.table.resizeColumnsToContents()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        for col in (2, 3):
            self.table.setColumnWidth(col, min(self.table.columnWidth(col), 160))
        for col in range(4, len(self.columns) - 1):  # the numbers
            self.table.setColumnWidth(col, self.fontMetrics().horizontalAdvance("Accuracy") + 24)
        self.table.setColumnWidth(len(self.columns) - 1, 260)
        self.more_label = wrapped_label(
            f"Showing the first {MAX_ROWS:,} of {len(report.rows):,} samples; the summary covers "
            "all of them."
            if len(report.rows) > MAX_ROWS
            else "",
            muted=True,
        )
        self.more_label.setVisible(len(report.rows) > MAX_ROWS)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.source_label)
        layout.addWidget(self.summary_label)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.more_label)
        layout.addWidget(buttons)
        self.resize(1100, 520)

    def _fill_row(self, i: int, parts: list[str]) -> None:
        row, result = self.report.rows[i], self.report.results[i]
        extracted = result["extracted"]
        reason = result["error"] or "; ".join(f"{k}: {v}" for k, v in result["reasons"].items())
        cells: list[QTableWidgetItem] = [
            _NumberItem(row.line, str(row.line)),
            QTableWidgetItem(_one_line(row.completion, COMPLETION_CHARS)),
            QTableWidgetItem(row.answer),
            QTableWidgetItem("(none found)" if extracted is None else str(extracted)),
            *(_NumberItem(result["rewards"].get(name)) for name in parts),
            _NumberItem(result["reward"]),
            QTableWidgetItem(reason),
        ]
        cells[1].setToolTip(_tooltip(row.completion))
        cells[2].setToolTip(_tooltip(row.answer))
        if extracted is None:
            cells[3].setForeground(_MUTED)
        if reason:
            cells[-1].setToolTip(_tooltip(reason))
        if result["error"]:
            cells[-1].setForeground(_ERROR)
        accuracy = result["rewards"].get("accuracy")
        if accuracy is not None:
            cells[4 + parts.index("accuracy")].setBackground(_RIGHT if accuracy > 0 else _WRONG)
        for col, item in enumerate(cells):
            self.table.setItem(i, col, item)


class ScoreFileRow(QWidget):
    """The "Test on a file…" button with its status text; owns the background job."""

    def __init__(
        self,
        settings: Callable[[], RewardsConfig],
        parent: QWidget | None = None,
        data: Callable[[], Any] | None = None,
    ):
        super().__init__(parent)
        self.settings = settings
        self.data = data  # the data settings: a reasoning-gym task run scores with its checker
        self.tasks = BackgroundTasks(self)
        self.dialog: ScoreDialog | None = None
        self.message: QMessageBox | None = None
        self.last_dir = ""
        self.button = QPushButton("Test on a file…")
        self.button.setObjectName("rewards.test_on_file")
        self.button.setToolTip(SCORE_FILE_TIP)
        self.status = QLabel()
        self.status.setStyleSheet("color: palette(placeholder-text);")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addStretch(1)
        row.addWidget(self.status)
        row.addWidget(self.button)
        self.button.clicked.connect(self._on_button_clicked)

    def set_trusted(self, trusted: bool) -> None:
        self.button.setEnabled(trusted and not self.tasks.busy("score"))
        self.button.setToolTip(SCORE_FILE_TIP if trusted else UNTRUSTED_CHECKER)

    def _on_button_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Test the reward on a file of samples", self.last_dir, FILE_FILTER
        )
        if path:
            self.score(path)

    def score(self, path: str) -> None:
        """Score `path` in the background with the current settings; the dialog opens when done."""
        self.last_dir = os.path.dirname(path)
        rewards = dataclasses.replace(self.settings())
        data = dataclasses.replace(self.data()) if self.data is not None else None
        self.button.setEnabled(False)
        self.status.setText(f"Scoring {os.path.basename(path)}…")
        self.tasks.submit("score", lambda: score_file(path, rewards, data), self._scored(path))

    def _scored(self, path: str) -> Callable[[ScoreReport | None, Exception | None], None]:
        def done(report: ScoreReport | None, error: Exception | None) -> None:
            self.button.setEnabled(True)
            self.status.setText("")
            if error is not None or report is None:
                self._show_error(path, error)
                return
            self.status.setText(summary_line(report.summary).split(" · ")[0] + " scored")
            self.dialog = ScoreDialog(report, path, self.window())
            self.dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self.dialog.open()

        return done

    def _show_error(self, path: str, error: Exception | None) -> None:
        if isinstance(error, UserError):
            text = str(error)
        else:  # a bug: say what happened instead of failing silently
            text = f"Scoring failed with an internal error ({type(error).__name__}: {error})."
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Cannot test the reward on this file",
            f"{os.path.basename(path)} could not be scored.",
            QMessageBox.StandardButton.Ok,
            self.window(),
        )
        box.setInformativeText(text)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.message = box
        self.status.setText("Could not score the file.")
        box.open()
