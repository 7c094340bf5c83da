"""The Try tab's decode settings: greedy or sampled, temperature, top-p, samples, max new tokens.

Two rows, so the tab stays narrow: greedy / sampled and the token limit (plus whatever the view
adds at its end: the gold answer), then the sampling knobs, on only when sampling. `values()`
is the plain dict engine/variants/try_model.py's `TrySettings` is made from in the job's thread.
Try it: tests/ui/try_it/test_try.py.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QButtonGroup,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.common.widgets import rich_tooltip
from grpo_desktop.ui.try_it import tips


class DecodeSettings(QWidget):
    def __init__(self, max_tokens: int, parent: QWidget | None = None):
        super().__init__(parent)
        self.greedy_button = QRadioButton("Greedy")
        self.greedy_button.setToolTip(rich_tooltip(tips.GREEDY))
        self.sampled_button = QRadioButton("Sampled")
        self.sampled_button.setToolTip(rich_tooltip(tips.SAMPLED))
        self.mode_group = QButtonGroup(self)
        self.mode_group.addButton(self.greedy_button)
        self.mode_group.addButton(self.sampled_button)
        self.greedy_button.setChecked(True)
        self.temperature = _spin(QDoubleSpinBox(), 0.05, 2.0, 1.0, tips.TEMPERATURE)
        self.temperature.setSingleStep(0.1)
        self.top_p = _spin(QDoubleSpinBox(), 0.05, 1.0, 1.0, tips.TOP_P)
        self.top_p.setSingleStep(0.05)
        self.samples = _spin(QSpinBox(), 1, 16, 4, tips.SAMPLES)
        self.max_tokens = _spin(QSpinBox(), 1, 4096, max_tokens, tips.MAX_TOKENS)
        self.first_row = QHBoxLayout()
        self.first_row.addWidget(self.greedy_button)
        self.first_row.addWidget(self.sampled_button)
        knobs = QHBoxLayout()
        for row, label, box in (
            (self.first_row, "Max new tokens", self.max_tokens),
            (knobs, "Temperature", self.temperature),
            (knobs, "Top-p", self.top_p),
            (knobs, "Samples", self.samples),
        ):
            caption = QLabel(label)
            caption.setToolTip(box.toolTip())
            caption.setBuddy(box)
            if row.count():
                row.addSpacing(12)
            row.addWidget(caption)
            row.addWidget(box)
        self.first_row.addStretch(1)
        knobs.addStretch(1)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addLayout(self.first_row)
        col.addLayout(knobs)
        self.mode_group.buttonToggled.connect(self._on_mode_group_button_toggled)
        self._on_mode_group_button_toggled()

    def set_defaults(self, max_tokens: int, temperature: float) -> None:
        """The run's own: its max completion length and sampling temperature."""
        self.max_tokens.setValue(max_tokens)
        self.temperature.setValue(max(self.temperature.minimum(), temperature))

    def values(self) -> dict:
        greedy = self.greedy_button.isChecked()
        return {
            "greedy": greedy,
            "temperature": self.temperature.value(),
            "top_p": self.top_p.value(),
            "samples": 1 if greedy else self.samples.value(),
            "max_new_tokens": self.max_tokens.value(),
        }

    def _on_mode_group_button_toggled(self, *_args) -> None:
        sampled = self.sampled_button.isChecked()
        for box in (self.temperature, self.top_p, self.samples):
            box.setEnabled(sampled)


def _spin(box, low, high, value, tip: str):
    box.setRange(low, high)
    box.setValue(value)
    box.setToolTip(rich_tooltip(tip))
    return box
