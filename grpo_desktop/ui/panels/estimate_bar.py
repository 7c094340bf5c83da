"""The "Will it fit?" bar: `MemoryBar`, the memory parts side by side against the free memory,
in shades of one colour that says fits (green), tight (amber) or will not fit (red), each part
with a tooltip that names it and says what it is (texts in `estimate_text.py`).

No knowledge of the session or the engine here: `estimate_view.py` feeds it plain numbers.
Try it: tests/ui/panels/test_estimate.py.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QRectF, QSize
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from grpo_desktop.ui.panels.estimate_text import (
    BAR_ORDER,
    PART_HELP,
    PART_LABELS,
    STATUS_HEX,
    format_bytes,
)

STATUS_COLOURS = {status: QColor(hex_) for status, hex_ in STATUS_HEX.items()}
FREE_COLOUR = QColor("#e4e7eb")
SHADES = (100, 180, 135, 205, 225, 115, 195, 105)  # by BAR_ORDER: neighbours far apart


def part_colour(status: str, key: str) -> QColor:
    """The part's shade of the status colour."""
    index = BAR_ORDER.index(key) if key in BAR_ORDER else 0
    return STATUS_COLOURS[status].lighter(SHADES[index])


class MemoryBar(QWidget):
    """The parts side by side, scaled to max(peak, free memory); the free memory is the grey
    track and a dark tick, so a peak past the tick is what will not fit. Each part's tooltip
    names it, its size and what it is."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.parts: list[tuple[str, int]] = []
        self.free: int | None = None
        self.status = "unknown"
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(120)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(300, 16)

    def set_parts(self, parts: list[tuple[str, int]], free: int | None, status: str) -> None:
        self.parts = [(k, int(v)) for k, v in parts if v > 0]  # in BAR_ORDER
        self.free, self.status = free, status
        self.update()

    def _scale(self) -> float:
        total = sum(v for _, v in self.parts)
        return float(max(total, self.free or 0, 1))

    def segments(self) -> list[tuple[str, QRectF]]:
        """Each part's rectangle in widget coordinates."""
        width, height, scale = self.width() - 2, self.height() - 2, self._scale()
        x, out = 1.0, []
        for key, value in self.parts:
            w = width * value / scale
            out.append((key, QRectF(x, 1, w, height)))
            x += w
        return out

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt API)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        track = QRectF(1, 1, self.width() - 2, self.height() - 2)
        p.fillRect(track, FREE_COLOUR)
        for key, rect in self.segments():
            p.fillRect(rect, part_colour(self.status, key))
            p.setPen(QPen(QColor("white"), 1))
            p.drawLine(rect.topRight(), rect.bottomRight())
        if self.free:
            x = 1 + (self.width() - 2) * self.free / self._scale()
            p.setPen(QPen(QColor("#202124"), 2))
            p.drawLine(int(x), 0, int(x), self.height())
        p.setPen(QPen(QColor("#9aa0a6"), 1))
        p.drawRect(track.adjusted(0, 0, -1, -1))
        p.end()

    def part_at(self, x: float) -> str | None:
        return next((k for k, r in self.segments() if r.left() <= x < r.right()), None)

    def event(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            key = self.part_at(event.pos().x())
            if key is None:
                text = "Free memory: the dark tick is all that is free now." if self.free else ""
            else:
                value = dict(self.parts)[key]
                text = f"<b>{PART_LABELS.get(key, key)}: {format_bytes(value)}</b><br>"
                text += PART_HELP.get(key, "")
            if text:
                QToolTip.showText(event.globalPos(), f"<qt>{text}</qt>", self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)


__all__ = ["STATUS_COLOURS", "MemoryBar", "part_colour"]
