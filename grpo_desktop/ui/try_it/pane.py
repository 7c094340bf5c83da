"""One answer pane of the Try tab: a title (or a checkpoint picker), a status line, the answer.

The pane only shows what it is given (`show_status`, `show_streaming`, `show_result`); the view
decides what runs. Rendering is render.py's. Try it: tests/ui/try_it/test_try.py.
"""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QFrame, QHBoxLayout, QLabel, QTextBrowser, QVBoxLayout

from grpo_desktop.ui.common.widgets import rich_tooltip
from grpo_desktop.ui.try_it.render import answer_html, sample_tally, streaming_html

ANSWER_TIP = (
    "The model's answer as it is decoded, then its score with the run's rewards: the total "
    "(weighted as in training) and each part. Think and answer blocks are highlighted."
)


class AnswerPane(QFrame):
    def __init__(self, title: str, picker: QComboBox | None = None, parent=None):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.title = QLabel(f"<b>{title}</b>")
        self.picker = picker
        self.status = QLabel()
        self.status.setStyleSheet("color: palette(placeholder-text);")
        self.status.setWordWrap(True)
        self.text = QTextBrowser()
        self.text.setOpenLinks(False)
        self.text.setToolTip(rich_tooltip(ANSWER_TIP))
        self.result: dict | None = None
        self.tags = ("think", "answer")
        head = QHBoxLayout()
        head.addWidget(self.title)
        if picker is not None:
            head.addWidget(picker, 1)
        else:  # as tall as a picker, so both answers start at the same height
            head.addStretch(1)
            self.title.setMinimumHeight(QComboBox().sizeHint().height())
        col = QVBoxLayout(self)
        col.setContentsMargins(6, 6, 6, 6)
        col.addLayout(head)
        col.addWidget(self.status)
        col.addWidget(self.text, 1)

    def clear(self, status: str = "") -> None:
        self.result = None
        self.text.clear()
        self.status.setText(status)

    def show_status(self, text: str) -> None:
        self.status.setText(text)

    def show_streaming(self, texts: list[str]) -> None:
        bar = self.text.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        self.text.setHtml(streaming_html(texts, *self.tags))
        if at_end:
            bar.setValue(bar.maximum())
        tokens = "" if len(texts) > 1 else f" ({len(texts[0])} characters)"
        self.status.setText(f"Generating…{tokens}")

    def show_result(self, result: dict) -> None:
        self.result = result
        self.text.setHtml(answer_html(result, *self.tags))
        n = len(result["samples"])
        what = "Stopped" if result["cancelled"] else "Answered"
        samples = f"{n} samples" if n > 1 else f"{result['samples'][0]['tokens']} tokens"
        tally = sample_tally(result) if n > 1 else ""
        self.status.setText(f"{what} in {result['seconds']:.1f} s · {samples}{tally}")

    def plain_text(self) -> str:
        return self.text.toPlainText()
