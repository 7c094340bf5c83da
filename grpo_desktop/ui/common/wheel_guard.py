"""The mouse wheel changes a number field, a choice box or a slider only when it has the focus
(click or Tab into it first); over an unfocused one the wheel scrolls the panel it sits in, so
scrolling down the settings never edits a weight on the way.

`guard_wheel(widget)` sets Qt.StrongFocus (so the wheel alone never gives focus) and installs
one shared event filter; `guard_wheel_in(root)` does it for every such widget under `root`.
It does not change what the wheel does in a focused field or outside the guarded widgets.
Try it: scroll the settings panels with the pointer over a spin box;
tests/scenarios/test_ui_laptop.py.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)


def _scroll_area_of(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return parent
        parent = parent.parentWidget()
    return None


class _WheelGuard(QObject):
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt API)
        if event.type() != QEvent.Type.Wheel or not isinstance(obj, QWidget) or obj.hasFocus():
            return False
        area = _scroll_area_of(obj)
        if area is not None:  # the panel scrolls instead
            bar = area.verticalScrollBar()
            if event.angleDelta().x() and not event.angleDelta().y():
                bar = area.horizontalScrollBar()
            QApplication.sendEvent(bar, event)
        return True


_guard: _WheelGuard | None = None


def guard_wheel(widget: QWidget) -> QWidget:
    """`widget` takes the wheel only when focused; returns it."""
    global _guard
    if isinstance(widget, QScrollBar):
        return widget  # a scroll bar's wheel is scrolling itself
    if _guard is None:
        _guard = _WheelGuard()
    widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    widget.removeEventFilter(_guard)  # once, however often a panel is guarded
    widget.installEventFilter(_guard)
    return widget


def guard_wheel_in(root: QWidget) -> int:
    """Guard every spin box, choice box and slider under `root`; returns how many."""
    widgets = [w for w in root.findChildren(QWidget) if isinstance(w, GUARDED)]
    for w in widgets:
        guard_wheel(w)
    return len(widgets)
