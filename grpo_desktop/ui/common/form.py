"""Config forms generated from the field metadata: one editor per field, tooltips from the help
text, inline validation messages under the field they concern.

`ConfigForm(model, [("algorithm", "beta"), ...])` builds rows in a QFormLayout: a check box for a
bool, a combo box for choices, a spin box for numbers (1-2-5 steps for learning-rate-like fields),
a line edit for text and for optional numbers (empty = not set). Edits go to the session model;
the form reloads when the model's config changes elsewhere. Fields marked `advanced` hide with
`set_advanced_visible(False)`; `set_field_enabled` greys out a field that has no effect now
(the LoRA fields while LoRA is off), saying why in its tooltip.

Custom editors (the model picker, the checker editor) live in their panels, not here.
Try it: the Hyperparameters panel; tests/ui/panels/test_panels.py.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, get_type_hints

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QDoubleValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.config import SECTIONS
from grpo_desktop.ui.common.wheel_guard import guard_wheel
from grpo_desktop.ui.common.widgets import (
    FloatSpinBox,
    fit_combo,
    note_label,
    rich_tooltip,
    set_note,
)
from grpo_desktop.ui.common.words import choice_word, number_text

INT_MAX = 2**31 - 1
MULTILINE = {("data", "system_prompt"), ("data", "example_problem"), ("data", "example_answer")}

# validate() messages that name no field tag, mapped to the field they concern.
CROSS_FIELD = (
    ("quantization needs LoRA", "quantization", "mode"),
    ("Choose a model", "model", "name_or_path"),
    ("needs a path or dataset id", "data", "path"),
    ("Name the prompt column", "data", "prompt_column"),
    ("All reward weights are 0", "rewards", "accuracy_weight"),
    ("reasoning tag and the answer tag", "rewards", "answer_tag"),
    ("Dr. GRPO removes", "algorithm", "scale_rewards"),
    ("Clip ε high is below", "algorithm", "epsilon_high"),
    ("Group size G", "algorithm", "num_generations"),
)


def field_meta(section: str, name: str) -> tuple[dataclasses.Field, Any]:
    cls = SECTIONS[section]
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f, get_type_hints(cls)[name]


def messages_for(problems: list[str], section: str, name: str) -> list[str]:
    """The validation messages about one field."""
    tag = f"({section}.{name})"
    out = [p for p in problems if tag in p]
    out += [
        p for p in problems for key, s, n in CROSS_FIELD if key in p and (s, n) == (section, name)
    ]
    return out


def tooltip_for(section: str, name: str) -> str:
    f, _ = field_meta(section, name)
    meta = f.metadata
    text = meta.get("help", "")
    limits = []
    if "min" in meta and "max" in meta:
        limits.append(f"Range {number_text(meta['min'])} to {number_text(meta['max'])}.")
    default = f.default
    if isinstance(default, bool):
        limits.append(f"Default {'on' if default else 'off'}.")
    elif isinstance(default, (int, float)):
        limits.append(f"Default {number_text(default)}.")
    elif isinstance(default, str) and "choices" in meta:
        limits.append(f"Default {choice_word(default)}.")
    return rich_tooltip(text, " ".join([*limits, f"In a settings file: {section}.{name}"]))


def plain_message(text: str) -> str:
    """A validation message as shown under its own field: without the settings-file name in
    brackets ('Answer tag (rewards.answer_tag) must…' → 'Answer tag must…'), and its numbers as
    people write them (1e-06 → 1e-6, 2.0 → 2)."""
    text = re.sub(r" \([a-z_]+\.[a-z_]+\)", "", text)
    text = re.sub(r"\d(?:\.\d+)?e[+-]\d+", lambda m: number_text(float(m[0])), text)
    return re.sub(r"\b(\d+)\.0\b(?!\.\d)", r"\1", text)  # 2.0 → 2


class FieldEditor:
    """One field's editor widget, reading and writing the session model."""

    def __init__(self, model, section: str, name: str):
        self.model, self.section, self.name = model, section, name
        f, kind = field_meta(section, name)
        self.meta = f.metadata
        self.kind = kind
        self.widget = self._build()
        self.widget.setToolTip(tooltip_for(section, name))
        self.widget.setObjectName(f"{section}.{name}")
        self.load()

    # -- construction

    def _build(self) -> QWidget:
        meta, kind = self.meta, self.kind
        if kind is bool:
            w = QCheckBox()
            w.toggled.connect(lambda v: self._write(bool(v)))
        elif "choices" in meta:
            w = fit_combo(QComboBox())
            for value in meta["choices"]:
                w.addItem(choice_word(value), value)
            w.currentIndexChanged.connect(lambda i: self._write(w.itemData(i)) if i >= 0 else None)
        elif kind is int:
            w = QSpinBox()
            w.setRange(int(meta.get("min", 0)), int(min(meta.get("max", INT_MAX), INT_MAX)))
            w.setKeyboardTracking(False)
            w.setGroupSeparatorShown(True)
            w.valueChanged.connect(lambda v: self._write(int(v)))
        elif kind is float:
            default = dataclasses.fields(SECTIONS[self.section])
            default = next(f.default for f in default if f.name == self.name)
            low, high = meta.get("min", -1e12), meta.get("max", 1e12)
            log = 0 < default < 1e-3 or (low > 0 and high / low >= 1e4)
            w = FloatSpinBox(log_steps=log)
            w.setRange(low, high)
            w.setSingleStep(_linear_step(default))
            w.valueChanged.connect(lambda v: self._write(float(v)))
        elif "float" in str(kind):  # optional number: empty means "not set"
            w = QLineEdit()
            w.setValidator(QDoubleValidator(meta.get("min", -1e12), meta.get("max", 1e12), 8))
            w.setPlaceholderText("not set")
            w.editingFinished.connect(lambda: self._write(_optional_float(w.text())))
        elif (self.section, self.name) in MULTILINE:
            w = QPlainTextEdit()
            w.setTabChangesFocus(True)
            w.setFixedHeight(64)
            self._text_timer = QTimer(w, singleShot=True, interval=400)
            self._text_timer.timeout.connect(lambda: self._write(w.toPlainText()))
            w.textChanged.connect(self._text_timer.start)
        else:
            w = QLineEdit()
            w.editingFinished.connect(lambda: self._write(w.text()))
        return guard_wheel(w) if isinstance(w, (QComboBox, QSpinBox, FloatSpinBox)) else w

    # -- model <-> widget

    def _write(self, value: Any) -> None:
        if not self._loading:
            self.model.set_value(self.section, self.name, value)

    _loading = False

    def load(self) -> None:
        """Show the model's current value without writing it back."""
        value = self.model.value(self.section, self.name)
        w = self.widget
        self._loading = True
        w.blockSignals(True)
        try:
            if isinstance(w, QCheckBox):
                w.setChecked(bool(value))
            elif isinstance(w, QComboBox):
                w.setCurrentIndex(max(0, w.findData(value)))
            elif isinstance(w, (QSpinBox, FloatSpinBox)):
                w.setValue(value)
            elif isinstance(w, QPlainTextEdit):
                if w.toPlainText() != value:
                    w.setPlainText(value)
            elif isinstance(w, QLineEdit):
                w.setText(
                    ""
                    if value is None
                    else (number_text(value) if isinstance(value, float) else str(value))
                )
        finally:
            w.blockSignals(False)
            self._loading = False


def _linear_step(default: float) -> float:
    if default >= 10:
        return 1.0
    if default >= 1:
        return 0.1
    return 0.01


def _optional_float(text: str) -> float | None:
    text = text.strip().replace(",", ".")
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


class ConfigForm(QWidget):
    """A form over some config fields; see the module docstring."""

    def __init__(self, model, fields: list[tuple[str, str]], parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.editors: dict[tuple[str, str], FieldEditor] = {}
        self._notes: dict[tuple[str, str], QLabel] = {}
        self._rows: dict[tuple[str, str], QWidget] = {}
        self._labels: dict[tuple[str, str], QLabel] = {}
        self.layout_ = QFormLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.layout_.setLabelAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        # a long label puts its field on the next line rather than widening the dock
        self.layout_.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        for section, name in fields:
            self.add_field(section, name)
        model.config_changed.connect(self._on_model_config_changed)
        model.config_replaced.connect(self._on_model_config_replaced)
        self.refresh_messages()

    def add_field(self, section: str, name: str) -> FieldEditor:
        editor = FieldEditor(self.model, section, name)
        note = note_label("error")
        cell = QWidget()
        box = QVBoxLayout(cell)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(2)
        box.addWidget(editor.widget)
        box.addWidget(note)
        label = QLabel(editor.meta.get("label", name))
        label.setToolTip(editor.widget.toolTip())
        label.setBuddy(editor.widget)
        self.layout_.addRow(label, cell)
        key = (section, name)
        self.editors[key], self._notes[key], self._rows[key] = editor, note, cell
        self._labels[key] = label
        return editor

    def set_field_enabled(self, section: str, name: str, enabled: bool, why: str = "") -> None:
        """Grey out a field that has no effect now (its label too); `why` leads its tooltip
        while it is off, so the user learns what turns it on."""
        key = (section, name)
        editor, label = self.editors[key], self._labels[key]
        editor.widget.setEnabled(enabled)
        label.setEnabled(enabled)
        tip = tooltip_for(section, name)
        if not enabled and why:
            tip = rich_tooltip(why) + "<br><br>" + tip
        editor.widget.setToolTip(tip)
        label.setToolTip(tip)

    def set_advanced_visible(self, visible: bool) -> None:
        for key, editor in self.editors.items():
            if editor.meta.get("advanced"):
                self.layout_.setRowVisible(self._rows[key], visible)

    def visible_fields(self) -> list[tuple[str, str]]:
        return [k for k in self.editors if self.layout_.isRowVisible(self._rows[k])]

    def refresh_messages(self) -> None:
        problems = self.model.problems()
        for (section, name), note in self._notes.items():
            set_note(
                note, "\n".join(plain_message(m) for m in messages_for(problems, section, name))
            )

    def message(self, section: str, name: str) -> str:
        note = self._notes[(section, name)]
        return note.text() if not note.isHidden() else ""

    def _on_model_config_changed(self, section: str, name: str) -> None:
        editor = self.editors.get((section, name))
        if editor is not None:
            editor.load()
        self.refresh_messages()

    def _on_model_config_replaced(self) -> None:
        for editor in self.editors.values():
            editor.load()
        self.refresh_messages()
