"""Fit the main window to the screen it opens on: the first launch (and Reset layout) sizes it to
the preferred size when the screen's available area allows, else to that area minus a margin,
centred; a layout restored from QSettings that does not fit (another, smaller screen) is
pulled back inside the available area.

`fit_rect` is plain geometry (tested on its own); `fit_window` applies it to a real window on
its screen. It does not choose dock sizes: `dock_width_for` gives the settings column's width for
a screen width. Try it: tests/scenarios/test_ui_laptop.py.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

PREFERRED_SIZE = (1400, 900)
MARGIN_PX = 0
# Before the first show the window manager's frame is unknown: leave room for a title bar and
# borders so the framed window still fits (Xvfb without a window manager draws none).
FRAME_ALLOWANCE = (8, 36)
MIN_SIZE = (800, 560)


def fit_rect(preferred: tuple[int, int], available: QRect, margin: int = MARGIN_PX) -> QRect:
    """The window rectangle: `preferred` clamped to `available` less `margin` on each side,
    centred in `available` (never smaller than MIN_SIZE unless the screen is)."""
    room_w = max(1, available.width() - 2 * margin)
    room_h = max(1, available.height() - 2 * margin)
    w = min(preferred[0], room_w)
    h = min(preferred[1], room_h)
    w = max(w, min(MIN_SIZE[0], room_w))
    h = max(h, min(MIN_SIZE[1], room_h))
    x = available.x() + (available.width() - w) // 2
    y = available.y() + (available.height() - h) // 2
    return QRect(x, y, w, h)


def contained(rect: QRect, available: QRect) -> QRect:
    """`rect` moved (and if needed shrunk) to lie inside `available`."""
    w = min(rect.width(), available.width())
    h = min(rect.height(), available.height())
    x = min(max(rect.x(), available.x()), available.x() + available.width() - w)
    y = min(max(rect.y(), available.y()), available.y() + available.height() - h)
    return QRect(x, y, w, h)


def available_geometry(window: QWidget) -> QRect | None:
    """The available area of the screen the window is on (or the primary screen)."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry() if screen is not None else None


def fit_window(window: QWidget, preferred: tuple[int, int] = PREFERRED_SIZE) -> QRect | None:
    """Size and place `window` for a first launch on its screen; returns the rectangle."""
    area = available_geometry(window)
    if area is None or area.isEmpty():
        window.resize(*preferred)
        return None
    rect = fit_rect(preferred, area)
    if rect.size() != QSize(*preferred):  # clamped: the frame must fit too
        fw, fh = FRAME_ALLOWANCE
        rect = QRect(rect.x(), rect.y(), rect.width() - fw, rect.height() - fh)
    window.resize(rect.size())
    window.move(rect.topLeft())
    return rect


def keep_on_screen(window: QWidget) -> None:
    """After restoreGeometry: pull a window that sticks out of its screen back inside."""
    area = available_geometry(window)
    if area is None or area.isEmpty():
        return
    frame = window.frameGeometry()
    inside = contained(frame, area)
    if inside != frame:
        extra_w = frame.width() - window.width()
        extra_h = frame.height() - window.height()
        window.resize(inside.width() - extra_w, inside.height() - extra_h)
        window.move(inside.topLeft())


def dock_width_for(screen_width: int) -> int:
    """Width of the settings column: 430 px on a wide screen, less on a small laptop."""
    if screen_width >= 1600:
        return 430
    return max(360, min(430, int(screen_width * 0.3)))
