"""Small reusable widgets: a float spin box that shows numbers as people write them (1e-6, not
1e-06; 0.0002), a slider paired with a spin
box, a dismissable message bar, and a few helpers for wrapped labels, narrow combo boxes and
tooltips.

No knowledge of the config or the session here; panels compose these.
Try it: tests/ui/common/test_widgets.py.
"""

from __future__ import annotations

import html
import math

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.common.wheel_guard import guard_wheel
from grpo_desktop.ui.common.words import number_text

_STYLES = {
    "error": ("#fdecea", "#b3261e", "#611a15"),
    "warning": ("#fff4e5", "#b26a00", "#663c00"),
    "info": ("#e8f1fb", "#1f5fa8", "#0d3c61"),
}


def rich_tooltip(text: str, *extra: str) -> str:
    """Tooltip markup that wraps long help text instead of one screen-wide line; `extra` lines
    follow in grey."""
    tail = "".join(
        f"<br><span style='color:#666666'>{html.escape(e, quote=False)}</span>" for e in extra
    )
    return f"<qt>{html.escape(text, quote=False)}{tail}</qt>"


def wrapped_label(text: str = "", *, muted: bool = False) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if muted:
        label.setStyleSheet("color: palette(placeholder-text);")
    return label


def fit_combo(box: QComboBox, chars: int = 14) -> QComboBox:
    """A combo box as narrow as `chars` characters allows, whatever its longest choice: the
    settings docks are 380 pixels wide on a laptop, and one long choice gave them a horizontal
    scroll bar. The open list still shows every choice in full."""
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(chars)
    return box


def note_label(kind: str = "warning") -> QLabel:
    """A coloured inline note (hidden until it has text)."""
    bg, border, fg = _STYLES[kind]
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet(
        f"QLabel {{ background: {bg}; color: {fg}; border-left: 3px solid {border};"
        " padding: 4px 6px; }"
    )
    label.hide()
    return label


def set_note(label: QLabel, text: str) -> None:
    label.setText(text)
    label.setVisible(bool(text))


def _nice_step(value: float, direction: int) -> float:
    """The next value in the 1-2-5 sequence (1e-5, 2e-5, 5e-5, 1e-4, ...) up or down."""
    if value <= 0:
        return 1e-6 if direction > 0 else 0.0
    exp = math.floor(math.log10(value))
    mant = value / 10**exp
    ladder = [1.0, 2.0, 5.0, 10.0]
    if direction > 0:
        nxt = next((m for m in ladder if m > mant * (1 + 1e-9)), 10.0)
        return nxt * 10**exp
    prev = next((m for m in reversed([0.5, *ladder]) if m < mant * (1 - 1e-9)), 0.5)
    return prev * 10**exp


class FloatSpinBox(QDoubleSpinBox):
    """A spin box for floats of any magnitude: shows 1e-5, 0.2, 3 (`number_text`), accepts 5e-4, and
    with `log_steps` steps through 1-2-5 values instead of adding a fixed amount."""

    def __init__(self, parent: QWidget | None = None, *, log_steps: bool = False):
        super().__init__(parent)
        self.setDecimals(12)
        self.log_steps = log_steps
        self.setKeyboardTracking(False)

    def textFromValue(self, value: float) -> str:  # noqa: N802 (Qt API)
        return number_text(value)

    def valueFromText(self, text: str) -> float:  # noqa: N802 (Qt API)
        try:
            return float(text.strip().replace(",", "."))
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int) -> object:
        stripped = text.strip().replace(",", ".")
        if not stripped or stripped in ("-", ".", "e", "-."):
            return QValidator.State.Intermediate, text, pos
        try:
            value = float(stripped)
        except ValueError:
            if stripped[-1] in "eE+-":
                return QValidator.State.Intermediate, text, pos
            return QValidator.State.Invalid, text, pos
        if self.minimum() <= value <= self.maximum():
            return QValidator.State.Acceptable, text, pos
        return QValidator.State.Intermediate, text, pos

    def stepBy(self, steps: int) -> None:  # noqa: N802 (Qt API)
        if not self.log_steps:
            super().stepBy(steps)
            return
        value = self.value()
        for _ in range(abs(steps)):
            value = _nice_step(value, 1 if steps > 0 else -1)
        self.setValue(min(max(value, self.minimum()), self.maximum()))


class SliderSpin(QWidget):
    """A slider over a typical range plus a spin box that accepts the full range."""

    value_edited = Signal(float)

    def __init__(self, minimum: float, maximum: float, slider_max: float, parent=None):
        super().__init__(parent)
        self._scale = 100  # slider ticks per unit
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(int(minimum * self._scale), int(slider_max * self._scale))
        self.slider.setPageStep(10)
        self.spin = FloatSpinBox()
        self.spin.setRange(minimum, maximum)
        self.spin.setSingleStep(0.05)
        self.spin.setMinimumWidth(80)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.spin)
        guard_wheel(self.slider)
        guard_wheel(self.spin)
        self.slider.valueChanged.connect(self._on_slider_value_changed)
        self.spin.valueChanged.connect(self._on_spin_value_changed)

    def value(self) -> float:
        return self.spin.value()

    def set_value(self, value: float) -> None:
        for w in (self.slider, self.spin):
            w.blockSignals(True)
        self.spin.setValue(value)
        self.slider.setValue(int(round(value * self._scale)))
        for w in (self.slider, self.spin):
            w.blockSignals(False)

    def _on_slider_value_changed(self, ticks: int) -> None:
        value = ticks / self._scale
        self.spin.blockSignals(True)
        self.spin.setValue(value)
        self.spin.blockSignals(False)
        self.value_edited.emit(value)

    def _on_spin_value_changed(self, value: float) -> None:
        self.slider.blockSignals(True)
        self.slider.setValue(int(round(value * self._scale)))
        self.slider.blockSignals(False)
        self.value_edited.emit(value)


class MessageBar(QFrame):
    """A dismissable strip at the top of the window for errors and warnings, with optional
    details (e.g. a traceback) behind a button instead of in the message itself. The main
    window's one-line version is common/message_area.WindowMessage, a subclass."""

    details_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.kind = ""
        self._details = ""
        self.text = self._make_label()
        self.details_button = QPushButton("Details…")
        self.details_button.setToolTip("Show the technical details (for bug reports)")
        self.close_button = QPushButton("Dismiss")
        self._lay_out()
        self.details_button.clicked.connect(lambda: self.details_requested.emit(self._details))
        self.close_button.clicked.connect(self.clear)
        self.hide()

    def _make_label(self) -> QLabel:
        label = QLabel()
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return label

    def _lay_out(self) -> None:
        row = QHBoxLayout()
        row.setContentsMargins(10, 6, 6, 6)
        row.addWidget(self.text, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.details_button)
        buttons.addWidget(self.close_button)
        buttons.addStretch(1)
        row.addLayout(buttons)
        self.setLayout(row)

    def _shown(self, text: str) -> str:
        """What the label shows for the message `text`."""
        return text

    def show_message(self, kind: str, text: str, details: str = "") -> None:
        bg, border, fg = _STYLES[kind]
        self.kind, self._details = kind, details
        name = type(self).__name__
        self.setStyleSheet(
            f"{name} {{ background: {bg}; border: 1px solid {border}; border-radius: 4px; }}"
            f" {name} QLabel {{ color: {fg}; }}"
        )
        self.text.setText(self._shown(text))
        self.details_button.setVisible(bool(details))
        self.show()

    def message(self) -> str:
        return self.text.text() if self.kind else ""

    def clear(self) -> None:
        self.kind, self._details = "", ""
        self.text.setText("")
        self.hide()


def show_error_details(parent: QWidget, details: str) -> None:
    """The technical details behind a MessageBar's error (its Details button), in a dialog."""
    box = QMessageBox(
        QMessageBox.Icon.Information, "Details", "Technical details of the error:", parent=parent
    )
    box.setDetailedText(details)
    box.exec()
