"""A small Python editor for the custom checker: line numbers, syntax highlighting, error line mark.

`CodeEditor` is a QPlainTextEdit with a line-number gutter (the classic Qt example) and a
`PythonHighlighter`; `mark_error_line(n)` tints a line red (a test run or the compiler found a
problem there), `mark_error_line(None)` clears it. Tab inserts four spaces.

Not an IDE: no completion, no linting beyond what the checker test reports.
Try it: the Reward panel's custom checker; tests/ui/common/test_widgets.py.
"""

from __future__ import annotations

import keyword
import re

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QPainter,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
)
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit, QWidget


def _fmt(color: str, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    f = QTextCharFormat()
    f.setForeground(QColor(color))
    if bold:
        f.setFontWeight(QFont.Weight.Bold)
    f.setFontItalic(italic)
    return f


class PythonHighlighter(QSyntaxHighlighter):
    """Keywords, builtins, numbers, strings and comments; triple-quoted strings span lines."""

    RULES = [
        (re.compile(r"\b(" + "|".join(keyword.kwlist) + r")\b"), _fmt("#0033b3", bold=True)),
        (
            re.compile(r"\b(float|int|str|len|abs|min|max|sum|round|range|isinstance|print)\b"),
            _fmt("#7a3e9d"),
        ),
        (re.compile(r"\bdef\s+(\w+)"), _fmt("#00627a", bold=True)),
        (re.compile(r"\b\d+(\.\d+)?([eE][+-]?\d+)?\b"), _fmt("#1750eb")),
        (re.compile(r"'[^'\\\n]*(\\.[^'\\\n]*)*'|\"[^\"\\\n]*(\\.[^\"\\\n]*)*\""), _fmt("#067d17")),
        (re.compile(r"#[^\n]*"), _fmt("#8c8c8c", italic=True)),
    ]
    TRIPLE = re.compile(r'"""|\'\'\'')

    def highlightBlock(self, text: str) -> None:  # noqa: N802 (Qt API)
        for pattern, fmt in self.RULES:
            for m in pattern.finditer(text):
                group = 1 if pattern.pattern.startswith(r"\bdef") else 0
                self.setFormat(m.start(group), m.end(group) - m.start(group), fmt)
        self._triple_quotes(text)

    def _triple_quotes(self, text: str) -> None:
        string_fmt = self.RULES[4][1]
        start = 0 if self.previousBlockState() == 1 else -1
        self.setCurrentBlockState(0)
        for m in self.TRIPLE.finditer(text):
            if start < 0:
                start = m.start()
            else:
                self.setFormat(start, m.end() - start, string_fmt)
                start = -1
        if start >= 0:
            self.setFormat(start, len(text) - start, string_fmt)
            self.setCurrentBlockState(1)


class _Gutter(QWidget):
    def __init__(self, editor: CodeEditor):
        super().__init__(editor)
        self.editor = editor

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(self.editor.gutter_width(), 0)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt API)
        self.editor.paint_gutter(event)


class CodeEditor(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.setFont(font)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setTabStopDistance(self.fontMetrics().horizontalAdvance(" ") * 4)
        self.highlighter = PythonHighlighter(self.document())
        self._gutter = _Gutter(self)
        self._error_line: int | None = None
        self.blockCountChanged.connect(self._update_gutter_width)
        self.updateRequest.connect(self._on_update_request)
        self._update_gutter_width()

    def gutter_width(self) -> int:
        digits = max(2, len(str(self.blockCount())))
        return 10 + self.fontMetrics().horizontalAdvance("9") * digits

    def _update_gutter_width(self, *_args) -> None:
        self.setViewportMargins(self.gutter_width(), 0, 0, 0)

    def _on_update_request(self, rect: QRect, dy: int) -> None:
        if dy:
            self._gutter.scroll(0, dy)
        else:
            self._gutter.update(0, rect.y(), self._gutter.width(), rect.height())

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        cr = self.contentsRect()
        self._gutter.setGeometry(QRect(cr.left(), cr.top(), self.gutter_width(), cr.height()))

    def paint_gutter(self, event) -> None:
        painter = QPainter(self._gutter)
        painter.fillRect(event.rect(), QColor("#f3f3f3"))
        block = self.firstVisibleBlock()
        number = block.blockNumber()
        top = round(self.blockBoundingGeometry(block).translated(self.contentOffset()).top())
        bottom = top + round(self.blockBoundingRect(block).height())
        height = self.fontMetrics().height()
        while block.isValid() and top <= event.rect().bottom():
            if block.isVisible() and bottom >= event.rect().top():
                is_error = self._error_line == number + 1
                painter.setPen(QColor("#b3261e" if is_error else "#9a9a9a"))
                painter.drawText(
                    0,
                    top,
                    self._gutter.width() - 5,
                    height,
                    Qt.AlignmentFlag.AlignRight,
                    str(number + 1),
                )
            block = block.next()
            top = bottom
            bottom = top + round(self.blockBoundingRect(block).height())
            number += 1
        painter.end()

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if event.key() == Qt.Key.Key_Tab and not event.modifiers():
            self.insertPlainText("    ")
            return
        super().keyPressEvent(event)

    def mark_error_line(self, line: int | None) -> None:
        """Tint `line` (1-based) red, or clear the mark with None."""
        self._error_line = line
        selections = []
        if line is not None and 1 <= line <= self.blockCount():
            sel = QTextEdit.ExtraSelection()
            sel.format.setBackground(QColor("#fde0dc"))
            sel.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
            cursor = QTextCursor(self.document().findBlockByNumber(line - 1))
            sel.cursor = cursor
            selections.append(sel)
        self.setExtraSelections(selections)
        self._gutter.update()

    @property
    def error_line(self) -> int | None:
        return self._error_line
