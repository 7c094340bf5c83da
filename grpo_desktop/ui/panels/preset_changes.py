"""What a preset (or the small-model starter) changed, said in the Hyperparameters panel, with Undo.

A preset replaces several settings at once; before issue 27 it did so silently. `changes` lists
the fields whose values differ between two configs, `change_lines` says each as
"Label: old → new" in the form's words (choice words, numbers as people write them), and
`ChangeNote` shows them under the presets with an Undo button (Ctrl+Z while the panel has focus
does the same). Undo puts back only the fields the preset changed and that nobody edited since;
an edit made after the preset stays.
Try it: the Hyperparameters panel's presets; tests/ui/panels/test_preset_undo.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from grpo_desktop.engine.config import SECTIONS, TrainConfig
from grpo_desktop.ui.common.words import label_of, value_text

Change = tuple[str, str, Any, Any]  # section, field, old value, new value
SHOWN_LINES = 8  # the rest are counted ("and 3 more"), all in the tooltip


def changes(before: TrainConfig, after: TrainConfig) -> list[Change]:
    """The fields whose values differ, in the config's order."""
    out = []
    for section, cls in SECTIONS.items():
        old, new = getattr(before, section), getattr(after, section)
        for f in dataclasses.fields(cls):
            a, b = getattr(old, f.name), getattr(new, f.name)
            if a != b or type(a) is not type(b):
                out.append((section, f.name, a, b))
    return out


def change_lines(items: list[Change]) -> list[str]:
    return [
        f"{label_of(s, n)}: {value_text(s, n, old)} → {value_text(s, n, new)}"
        for s, n, old, new in items
    ]


def undone(current: TrainConfig, items: list[Change]) -> TrainConfig:
    """`current` with each changed field back to its old value, unless it was edited since."""
    back: dict[str, dict[str, Any]] = {}
    for section, name, old, new in items:
        if getattr(getattr(current, section), name) == new:
            back.setdefault(section, {})[name] = old
    return current.replace(**back)


class ChangeNote(QFrame):
    """'DAPO preset: 5 settings changed' with the list and an Undo button; hidden until used."""

    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.items: list[Change] = []
        self.setObjectName("preset_changes")
        self.setStyleSheet(
            "#preset_changes { background: #e8f1fb; border-left: 3px solid #1f5fa8; }"
            " #preset_changes QLabel { color: #0d3c61; }"
        )
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.undo_button = QPushButton("Undo")
        self.undo_button.setToolTip("Put these settings back as they were (Ctrl+Z)")
        self.close_button = QPushButton("OK")
        self.close_button.setToolTip("Keep the changes and hide this note")
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)
        buttons.addWidget(self.undo_button)
        col = QVBoxLayout(self)
        col.setContentsMargins(8, 6, 6, 6)
        col.addWidget(self.text)
        col.addLayout(buttons)
        self.undo_button.clicked.connect(self.undo)
        self.close_button.clicked.connect(self.clear)
        self.shortcut = QShortcut(QKeySequence.StandardKey.Undo, parent or self)
        self.shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.shortcut.activated.connect(self.undo)
        self.hide()

    def show_changes(self, title: str, before: TrainConfig, after: TrainConfig) -> None:
        self.items = changes(before, after)
        lines = change_lines(self.items)
        if not lines:
            self.text.setText(f"{title}: the settings already were these; nothing changed.")
            self.undo_button.hide()
        else:
            head = f"{title} changed {len(lines)} setting{'s' if len(lines) > 1 else ''}:"
            shown = lines[:SHOWN_LINES]
            more = len(lines) - len(shown)
            self.text.setText(
                "\n".join([head, *(f"• {t}" for t in shown)])
                + (f"\n…and {more} more (hover to see them all)" if more else "")
            )
            self.undo_button.show()
        self.text.setToolTip("\n".join(lines))
        self.show()

    def undo(self) -> bool:
        """Put the changed settings back; False when there is nothing to undo."""
        if not self.items or self.isHidden():
            return False
        self.model.set_config(undone(self.model.config, self.items))
        self.clear()
        return True

    def clear(self) -> None:
        self.items = []
        self.hide()
