"""One compared problem in full: the problem, its gold answer and both sides' whole answers.

Opened by double-clicking (or Enter on) a row of the Compare table; one window, reused, that
follows the row chosen last. Read-only; Esc or Close closes it.
Try it: tests/ui/compare/test_compare.py.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
)

from grpo_desktop.engine.variants.compare_table import CATEGORY_HELP, CompareRow


class AnswerDetail(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Both answers")
        self.resize(900, 480)
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        self.problem.setTextFormat(Qt.TextFormat.RichText)
        self.headers = [QLabel(), QLabel()]
        self.answers = [QPlainTextEdit(), QPlainTextEdit()]
        grid = QGridLayout()
        for column, (header, answer) in enumerate(zip(self.headers, self.answers)):
            header.setWordWrap(True)
            answer.setReadOnly(True)
            grid.addWidget(header, 0, column)
            grid.addWidget(answer, 1, column)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        col = QVBoxLayout(self)
        col.addWidget(self.problem)
        col.addLayout(grid, 1)
        col.addWidget(buttons)

    def show_row(self, number: int, row: CompareRow, label_a: str, label_b: str) -> None:
        self.setWindowTitle(f"Problem {number}: {row.category}")
        self.problem.setText(
            f"<b>Problem {number}</b>: {html.escape(row.problem)}<br>"
            f"Gold answer: <b>{html.escape(row.gold)}</b> · <i>{row.category}</i>: "
            f"{html.escape(CATEGORY_HELP[row.category])}"
        )
        sides = (
            (label_a, row.answer_a, row.correct_a, row.completion_a),
            (label_b, row.answer_b, row.correct_b, row.completion_b),
        )
        for side, header, answer, (label, found, correct, text) in zip(
            "AB", self.headers, self.answers, sides
        ):
            verdict = "✓ right" if correct else "✗ wrong"
            found_text = html.escape(found) if found is not None else "none found"
            color = "#1e7a3c" if correct else "#a5281b"
            header.setText(
                f"<b>{side}: {html.escape(label)}</b> — <span style='color:{color}'>{verdict}"
                f"</span> (answer: {found_text})"
            )
            answer.setPlainText(text)
        self.show()
        self.raise_()
