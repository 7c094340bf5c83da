"""One calm message area above the plots: a strip of fixed height that shows the most important
message of the window and counts the others, so nothing under it moves when messages come or go.

Before it, up to four banners stacked there (an alarm, "run stopped", restored changes, the
welcome) and the tabs jumped 48-130 px each time one came or went. Now every banner is a *source*
added to the area with a priority (`PRIORITY`: an alarm, or an error answering what the user
just did such as Start refused or a failed run > the run that can be continued > a warning >
restored changes > the welcome; among equals the newest first). A source says it has a
message by showing itself and that it has none by hiding itself, as the banners always did; the
area watches that (Show/HideToParent) and shows one of them on one line, with "‹ 1 of 4 ›" to
step through the others, "More…" when the line had to be cut short (the whole text in a box),
and × to dismiss it (each source says what dismissing means: an alarm for this run, the welcome
for good, a note until it is posted again). A new message comes to the front when it matters at
least as much as the one shown; a lesser one only adds to the count.

`ElidedLabel` is the one-line text the banners use: the whole text stays its `text()` and its
tooltip, the line shows what fits. `WindowMessage` is the main window's error/warning/info
message (the API of common/widgets.MessageBar, which the Try and Compare tabs keep).
Try it: tests/ui/test_message_area.py.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QToolButton,
    QWidget,
)

from grpo_desktop.ui.common.widgets import MessageBar

HEIGHT = 38  # one line of text and a row of buttons
PRIORITY = {
    "alarm": 100,
    "error": 100,  # what the user just did failed (Start refused, a failed run): as an alarm
    "stopped": 80,  # the run can be continued
    "folder": 75,  # a run folder shown read-only
    "warning": 70,
    "info": 60,  # restored changes, saved files
    "welcome": 10,
}
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TAG = re.compile(r"<[^>]+>")
_LEAD = re.compile(r"^\s*<b>(.*?)</b>", re.IGNORECASE | re.DOTALL)
SEPARATOR = "  ·  "


def plain(text: str) -> str:
    """`text` without markup; line breaks kept as newlines."""
    return html.unescape(_TAG.sub("", _BR.sub("\n", text)).replace("&nbsp;", " "))


class ElidedLabel(QLabel):
    """One line of (rich or plain) text cut to the width with "…". `text()` is the whole text;
    when it is cut, the tooltip holds it all and `is_elided()` says so."""

    def __init__(self, text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self._full = ""
        self._elided = False
        self._own_tip = ""
        self.setWordWrap(False)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt API)
        self._full = text
        self._fit()

    def text(self) -> str:
        return self._full

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt API)
        self._own_tip = tip
        self._fit()

    def is_elided(self) -> bool:
        return self._elided

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        width = max(0, self.contentsRect().width() - 6)
        one_line = _BR.sub(SEPARATOR, self._full).replace(SEPARATOR + "•", "  •")  # lists
        flat = plain(one_line)
        bold = self.font()
        bold.setBold(True)
        metrics = self.fontMetrics()
        bold_metrics = QFontMetrics(bold)
        lead_match = _LEAD.match(one_line)
        lead = plain(lead_match.group(1)) if lead_match else ""
        rest = plain(one_line[lead_match.end() :]) if lead_match else flat
        needed = bold_metrics.horizontalAdvance(lead) + metrics.horizontalAdvance(rest)
        self._elided = needed > width
        if not self._elided:
            shown = one_line
        else:
            room = width - bold_metrics.horizontalAdvance(lead)
            cut = metrics.elidedText(rest, Qt.TextElideMode.ElideRight, max(room, 0))
            shown = (f"<b>{html.escape(lead)}</b>" if lead else "") + html.escape(cut)
        super().setText(shown)
        tip = self._own_tip
        if self._elided:
            whole = html.escape(plain(self._full)).replace("\n", "<br>")
            tip = f"<p style='white-space:pre-wrap'>{whole}</p>" + (f"<hr>{tip}" if tip else "")
        super().setToolTip(tip)


@dataclass
class _Entry:
    source: QWidget
    page: QWidget
    priority: Callable[[], int]
    dismiss: Callable[[], None]
    dismiss_tip: str
    serial: int = 0


class MessageArea(QFrame):
    """See the module docstring. `add(source, priority, dismiss)` once per banner."""

    changed = Signal()  # the message shown or the count changed

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("messageArea")
        self.setFixedHeight(HEIGHT)
        self._entries: list[_Entry] = []
        self._current: _Entry | None = None
        self._serials = itertools.count(1)
        self.stack = QStackedWidget()
        self.stack.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
        self._empty = QWidget()
        self.stack.addWidget(self._empty)
        self.more_button = QPushButton("More…")
        self.more_button.setToolTip("Read the whole message")
        self.prev_button = QToolButton(text="‹")
        self.prev_button.setToolTip("The previous message")
        self.position = QLabel()
        self.next_button = QToolButton(text="›")
        self.next_button.setToolTip("The next message")
        self.dismiss_button = QToolButton(text="×")
        self.dismiss_button.setAutoRaise(True)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 1, 0, 1)
        row.setSpacing(4)
        row.addWidget(self.stack, 1)
        for w in (
            self.more_button, self.prev_button, self.position, self.next_button,
            self.dismiss_button,
        ):  # fmt: skip
            row.addWidget(w, 0, Qt.AlignmentFlag.AlignVCenter)
        self.more_button.clicked.connect(self.show_whole_message)
        self.prev_button.clicked.connect(lambda: self.step(-1))
        self.next_button.clicked.connect(lambda: self.step(1))
        self.dismiss_button.clicked.connect(self.dismiss_current)
        self._update()

    # ------------------------------------------------------------------ sources

    def add(
        self,
        source: QWidget,
        priority: int | Callable[[], int],
        dismiss: Callable[[], None] | None = None,
        dismiss_tip: str = "Dismiss this message",
    ) -> None:
        """Show `source` here whenever it is shown (not hidden); × calls `dismiss` (default:
        hide it). A `posted` signal on the source, if any, brings it to the front."""
        wanted = not (
            source.testAttribute(Qt.WidgetAttribute.WA_WState_ExplicitShowHide)
            and source.testAttribute(Qt.WidgetAttribute.WA_WState_Hidden)
        )
        page = QWidget()
        page.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
        box = QHBoxLayout(page)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(source)
        self.stack.addWidget(page)
        rank = priority if callable(priority) else (lambda p=priority: p)
        entry = _Entry(source, page, rank, dismiss or source.hide, dismiss_tip)
        self._entries.append(entry)
        source.installEventFilter(self)
        posted = getattr(source, "posted", None)
        if posted is not None:
            posted.connect(lambda e=entry: self._posted(e))
        source.setVisible(wanted)
        if wanted:
            self._posted(entry)

    def remove(self, source: QWidget) -> None:
        """Stop showing `source` (it is about to be deleted)."""
        for entry in list(self._entries):
            if entry.source is source:
                source.removeEventFilter(self)
                self._entries.remove(entry)
                self.stack.removeWidget(entry.page)
                source.setParent(None)
                entry.page.deleteLater()
                if self._current is entry:
                    self._current = None
        self._update()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt API)
        kind = event.type()
        if kind == QEvent.Type.ShowToParent:
            entry = self._entry(watched)
            if entry is not None:
                self._posted(entry)
        elif kind == QEvent.Type.HideToParent:
            self._update()
        return False

    def _entry(self, source: QObject) -> _Entry | None:
        return next((e for e in self._entries if e.source is source), None)

    def _posted(self, entry: _Entry) -> None:
        if entry.source.isHidden():
            return
        entry.serial = next(self._serials)
        current = self._current
        if current is None or current.source.isHidden() or (entry.priority() >= current.priority()):
            self._current = entry
        self._update()

    # ------------------------------------------------------------------ what is shown

    def messages(self) -> list[QWidget]:
        """The sources with a message, most important first (newest first among equals)."""
        return [e.source for e in self._ordered()]

    def count(self) -> int:
        return len(self._ordered())

    def current(self) -> QWidget | None:
        """The source shown now, or None."""
        return self._current.source if self._current is not None else None

    def _ordered(self) -> list[_Entry]:
        shown = [e for e in self._entries if not e.source.isHidden()]
        return sorted(shown, key=lambda e: (-e.priority(), -e.serial))

    def step(self, by: int) -> None:
        """Show the next (`by` 1) or previous (-1) message."""
        ordered = self._ordered()
        if not ordered:
            return
        index = ordered.index(self._current) if self._current in ordered else 0
        self._current = ordered[(index + by) % len(ordered)]
        self._update()

    def show_source(self, source: QWidget) -> None:
        """Bring `source`'s message to the front (if it has one)."""
        entry = self._entry(source)
        if entry is not None and not source.isHidden():
            self._current = entry
            self._update()

    def dismiss_current(self) -> None:
        if self._current is not None:
            self._current.dismiss()
        self._update()

    def show_whole_message(self) -> None:
        label = self._label()
        if label is None:
            return
        box = QMessageBox(QMessageBox.Icon.Information, "Message", "", parent=self)
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(label.text())
        box.exec()

    def _label(self) -> ElidedLabel | None:
        if self._current is None:
            return None
        source = self._current.source
        return source if isinstance(source, ElidedLabel) else source.findChild(ElidedLabel)

    def _update(self) -> None:
        ordered = self._ordered()
        if self._current not in ordered:
            self._current = ordered[0] if ordered else None
        current = self._current
        self.stack.setCurrentWidget(current.page if current else self._empty)
        many = len(ordered) > 1
        for w in (self.prev_button, self.position, self.next_button):
            w.setVisible(many)
        if current is not None:
            self.position.setText(f"{ordered.index(current) + 1} of {len(ordered)}")
            self.dismiss_button.setToolTip(current.dismiss_tip)
        self.dismiss_button.setVisible(current is not None)
        label = self._label()
        self.more_button.setVisible(label is not None and label.is_elided())
        self.changed.emit()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        label = self._label()  # the width changed: the line may now fit, or no longer
        self.more_button.setVisible(label is not None and label.is_elided())


class WindowMessage(MessageBar):
    """The main window's error, warning or info message, one line in the MessageArea (Details…
    for a traceback): a MessageBar laid out on one line; `posted` when a message is set."""

    posted = Signal()

    def _make_label(self) -> QLabel:
        return ElidedLabel()

    def _lay_out(self) -> None:
        self.close_button.hide()  # the area's × does this; kept for scripts
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 2, 4, 2)
        row.addWidget(self.text, 1)
        row.addWidget(self.details_button, 0, Qt.AlignmentFlag.AlignVCenter)

    def _shown(self, text: str) -> str:
        return html.escape(text, quote=False).replace("\n", "<br>")

    def priority(self) -> int:
        return PRIORITY.get(self.kind, PRIORITY["info"])

    def show_message(self, kind: str, text: str, details: str = "") -> None:
        super().show_message(kind, text, details)
        self.posted.emit()

    def message(self) -> str:
        return plain(self.text.text()) if self.kind else ""
