"""The Export dialog's checkpoint list and the "Open folder" / "Copy path" buttons for a path.

`CheckpointList(run_dir)`: one row per whole checkpoint of the run, newest first and selected
("Step 40 (newest) · 19.2 MB · saved 14:02"), with Open folder and Copy path for the selected
one; a run with none says so. `PathButtons` is the pair of buttons alone, for the finished
export's folder. Opening uses `QDesktopServices.openUrl` (the system's file manager); copying puts
the path on the clipboard. Reads the run folder only (engine/runs/layout.py, torch-free).
Try it: File ▸ Export… after a run; tests/ui/export/test_export.py.
"""

from __future__ import annotations

import datetime
import json
import os

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QListWidget, QListWidgetItem, QPushButton, QWidget

from grpo_desktop.engine.runs.layout import STATE_FILE, intact_checkpoints
from grpo_desktop.engine.units import folder_bytes, size_text


def open_folder(path: str) -> bool:
    return QDesktopServices.openUrl(QUrl.fromLocalFile(path))


def copy_path(path: str) -> None:
    QGuiApplication.clipboard().setText(path)


class PathButtons(QWidget):
    """Open folder and Copy path for `path` (set with set_path; disabled while empty)."""

    def __init__(self, what: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.path = ""
        self.open_button = QPushButton("Open folder")
        self.copy_button = QPushButton("Copy path")
        self.open_button.setToolTip(f"Show the {what} in the file manager")
        self.copy_button.setToolTip(f"Copy the {what}'s full path to the clipboard")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.open_button)
        row.addWidget(self.copy_button)
        self.open_button.clicked.connect(lambda: open_folder(self.path))
        self.copy_button.clicked.connect(lambda: copy_path(self.path))
        self.set_path("")

    def set_path(self, path: str) -> None:
        self.path = path
        self.open_button.setEnabled(bool(path))
        self.copy_button.setEnabled(bool(path))


def _saved_at(folder: str) -> str:
    try:
        with open(os.path.join(folder, STATE_FILE), encoding="utf-8") as fh:
            when = float(json.load(fh).get("saved_at", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return ""
    if not when:
        return ""
    stamp = datetime.datetime.fromtimestamp(when)
    today = stamp.date() == datetime.date.today()
    return "saved " + stamp.strftime("%H:%M" if today else "%Y-%m-%d %H:%M")


class CheckpointList(QWidget):
    """The run's whole checkpoints, newest first; `selected_step` / `selected_path`."""

    selection_changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.list = QListWidget()
        self.list.setFixedHeight(76)  # three rows; more scroll
        self.buttons = PathButtons("checkpoint")
        col = QHBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.list, 1)
        side = QWidget()
        from PySide6.QtWidgets import QVBoxLayout

        stack = QVBoxLayout(side)
        stack.setContentsMargins(0, 0, 0, 0)
        stack.addWidget(self.buttons.open_button)
        stack.addWidget(self.buttons.copy_button)
        stack.addStretch(1)
        col.addWidget(side)
        self.list.currentItemChanged.connect(self._on_list_current_item_changed)

    def load(self, run_dir: str) -> None:
        self.list.clear()
        whole, _damaged = intact_checkpoints(run_dir) if os.path.isdir(run_dir) else ([], [])
        for i, (step, folder) in enumerate(reversed(whole)):
            parts = [f"Step {step}" + (" (newest)" if i == 0 else "")]
            parts.append(size_text(folder_bytes(folder)))
            saved = _saved_at(folder)
            if saved:
                parts.append(saved)
            item = QListWidgetItem(" · ".join(parts))
            item.setData(Qt.ItemDataRole.UserRole, (step, folder))
            item.setToolTip(folder)
            self.list.addItem(item)
        if whole:
            self.list.setCurrentRow(0)
        else:
            item = QListWidgetItem("No checkpoint yet: train until one is saved (Stop saves one)")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.list.addItem(item)
            self.buttons.set_path("")
        self.selection_changed.emit()

    @property
    def steps(self) -> list[int]:
        return [
            self.list.item(i).data(Qt.ItemDataRole.UserRole)[0]
            for i in range(self.list.count())
            if self.list.item(i).data(Qt.ItemDataRole.UserRole)
        ]

    def selected(self) -> tuple[int, str] | None:
        item = self.list.currentItem()
        data = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        return tuple(data) if data else None

    def _on_list_current_item_changed(self, *_args) -> None:
        chosen = self.selected()
        self.buttons.set_path(chosen[1] if chosen else "")
        self.selection_changed.emit()
