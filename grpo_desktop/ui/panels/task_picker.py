"""Choosing a reasoning-gym task and its settings: the picker dialog and the settings form.

`TaskPickerDialog` is a searchable list of every task (name and one-line description) with an
example problem and its answer for the selected one; `TaskOptionsForm` edits `data.task_options`
with a form built from the task's own config dataclass (ints, floats, true/false, choices, text;
lists as comma-separated text). Both read the catalogue (engine/data/tasks.py) off the GUI
thread: reasoning-gym is slow to import and is imported only when a task is picked or shown.
Without reasoning-gym they show how to install it. Used by panels/dataset_panel.py.
Try it: tests/ui/panels/test_task_picker.py.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import note_label, set_note, wrapped_label

EXAMPLE_CHARS = 1500  # an example problem longer than this is cut in the picker


def _catalogue() -> list[tuple[str, str]]:
    from grpo_desktop.engine.data.tasks import catalogue

    return catalogue()


def _info(name: str):
    from grpo_desktop.engine.data.tasks import task_info

    return task_info(name)


def list_text(values: Any) -> str:
    """A list option as the form shows it: "+, -, *, /"."""
    return ", ".join(str(v) for v in values) if isinstance(values, (list, tuple)) else str(values)


def parse_list(text: str, like: list | None = None) -> list:
    """Comma-separated text as a list: numbers where the default's items are numbers."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    numeric = bool(like) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in like
    )
    if not numeric:
        return items
    out: list = []
    for item in items:
        try:
            out.append(int(item))
        except ValueError:
            try:
                out.append(float(item))
            except ValueError:
                out.append(item)
    return out


class TaskPickerDialog(QDialog):
    """Pick a reasoning-gym task: search, see an example, OK. `chosen()` is the task's name."""

    def __init__(self, parent: QWidget | None = None, current: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Choose a reasoning-gym task")
        self.resize(760, 560)
        self.tasks = BackgroundTasks(self)
        self.current = current
        self.search = QLineEdit()
        self.search.setObjectName("task_search")
        self.search.setPlaceholderText("Search tasks: countdown, logic, sudoku, arithmetic…")
        self.search.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setObjectName("task_list")
        self.note = note_label("error")
        self.description = wrapped_label("Loading the tasks…")
        self.example = QPlainTextEdit()
        self.example.setReadOnly(True)
        self.example.setObjectName("task_example")
        self.example.setMaximumHeight(200)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Use this task")
        self.ok_button.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.note)
        layout.addWidget(self.description)
        layout.addWidget(self.example)
        layout.addWidget(self.buttons)
        self.search.textChanged.connect(self.apply_filter)
        self.list.currentItemChanged.connect(self._on_current_changed)
        self.list.itemDoubleClicked.connect(lambda _item: self.accept())
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.tasks.submit("catalogue", _catalogue, self._on_catalogue)

    def _on_catalogue(self, result: list | None, error: Exception | None) -> None:
        if result is None:
            self.description.setText("")
            set_note(self.note, str(error) if error else "No tasks found.")
            return
        for name, description in result:
            item = QListWidgetItem(f"{name} — {description}")
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setToolTip(description)
            self.list.addItem(item)
            if name == self.current:
                self.list.setCurrentItem(item)
        self.description.setText("Choose a task to see an example problem.")
        self.apply_filter(self.search.text())

    def names(self, visible_only: bool = True) -> list[str]:
        """The tasks listed (those the search leaves visible, by default)."""
        return [
            self.list.item(i).data(Qt.ItemDataRole.UserRole)
            for i in range(self.list.count())
            if not (visible_only and self.list.item(i).isHidden())
        ]

    def apply_filter(self, text: str) -> None:
        """Show the tasks whose name or description holds every word of `text`."""
        words = text.lower().split()
        for i in range(self.list.count()):
            item = self.list.item(i)
            haystack = item.text().lower()
            item.setHidden(not all(w in haystack for w in words))
        current = self.list.currentItem()
        if current is None or current.isHidden():
            first = next(
                (
                    self.list.item(i)
                    for i in range(self.list.count())
                    if not self.list.item(i).isHidden()
                ),
                None,
            )
            self.list.setCurrentItem(first)

    def select(self, name: str) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == name:
                self.list.setCurrentRow(i)
                return

    def chosen(self) -> str:
        item = self.list.currentItem()
        return "" if item is None else str(item.data(Qt.ItemDataRole.UserRole))

    def _on_current_changed(self, item: QListWidgetItem | None, _previous) -> None:
        self.ok_button.setEnabled(item is not None and not item.isHidden())
        if item is None:
            self.example.setPlainText("")
            return
        name = str(item.data(Qt.ItemDataRole.UserRole))
        self.description.setText(f"<b>{name}</b>: {item.toolTip()}")
        self.example.setPlainText("Generating an example…")
        self.tasks.submit("example", lambda: _info(name), self._on_example)

    def _on_example(self, info, error: Exception | None) -> None:
        if info is None:
            self.example.setPlainText(f"No example: {error}")
            return
        question = info.example_question
        if len(question) > EXAMPLE_CHARS:
            question = question[:EXAMPLE_CHARS] + " …"
        settings = ", ".join(f"{f.name} {list_text(f.default)}" for f in info.fields) or "none"
        self.example.setPlainText(
            f"Example problem:\n{question}\n\nIts answer: {info.example_answer}\n\n"
            f"Settings (defaults): {settings}"
        )


class TaskOptionsForm(QWidget):
    """Edits a task's own settings (data.task_options): one editor per field of its config,
    showing the task's default until changed. `options()` is the dict of the settings set."""

    edited = Signal(dict)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("data.task_options")
        self.tasks = BackgroundTasks(self)
        self.task = ""
        self._options: dict = {}
        self._fields: list = []
        self.editors: dict[str, QWidget] = {}
        self.form = QFormLayout()
        self.form.setContentsMargins(0, 0, 0, 0)
        self.note = note_label("error")
        self.reset_button = QPushButton("Task defaults")
        self.reset_button.setToolTip("Forget the changed settings: use the task's own defaults")
        self.reset_button.clicked.connect(lambda: self._emit({}))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.form)
        layout.addWidget(self.note)
        layout.addWidget(self.reset_button, 0, Qt.AlignmentFlag.AlignLeft)

    def options(self) -> dict:
        return dict(self._options)

    def set_options(self, options: dict) -> None:
        """Show `options` and report them as edited (what a user's edit does)."""
        self._emit(dict(options))

    def keep(self, options: dict) -> None:
        """Hold `options` without loading the task's fields (the task source is not shown)."""
        self._options = dict(options)

    def show_task(self, task: str, options: dict) -> None:
        """Show `task`'s settings with `options` set (its fields load in the background)."""
        self._options = dict(options)
        if task == self.task and self._fields:
            self._fill()
            return
        self.task = task
        self._fields = []
        self._clear()
        if not task.strip():
            set_note(self.note, "")
            return
        set_note(self.note, "")
        self.tasks.submit("fields", lambda: _info(task), self._on_info)

    def _clear(self) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)
        self.editors = {}

    def _on_info(self, info, error: Exception | None) -> None:
        if info is None:
            set_note(self.note, str(error) if error else "")
            return
        self._fields = [f for f in info.fields if f.kind != "other"]
        fixed = [f.name for f in info.fields if f.kind == "other"]
        set_note(
            self.note,
            f"Kept at the task's defaults (not editable here): {', '.join(fixed)}."
            if fixed
            else "",
        )
        self._clear()
        for f in self._fields:
            editor = self._editor(f)
            editor.setObjectName(f"task_option.{f.name}")
            editor.setToolTip(f"{f.name} (default {list_text(f.default)})")
            self.editors[f.name] = editor
            self.form.addRow(f.name.replace("_", " "), editor)
        self._fill()

    def _editor(self, f) -> QWidget:
        if f.kind == "bool":
            box = QCheckBox()
            box.toggled.connect(lambda on, n=f.name: self._set(n, bool(on)))
            return box
        if f.kind == "int":
            spin = QSpinBox()
            spin.setRange(-(10**9), 10**9)
            spin.editingFinished.connect(lambda n=f.name, s=spin: self._set(n, s.value()))
            return spin
        if f.kind == "float":
            spin = QDoubleSpinBox()
            spin.setRange(-1e9, 1e9)
            spin.setDecimals(4)
            spin.editingFinished.connect(lambda n=f.name, s=spin: self._set(n, s.value()))
            return spin
        if f.choices:
            combo = QComboBox()
            combo.addItems(list(f.choices))
            combo.activated.connect(lambda _i, n=f.name, c=combo: self._set(n, c.currentText()))
            return combo
        edit = QLineEdit()
        if f.kind == "list":
            edit.setPlaceholderText("comma-separated, e.g. " + list_text(f.default))
            edit.editingFinished.connect(
                lambda n=f.name, e=edit, d=f.default: self._set(n, parse_list(e.text(), d))
            )
        else:
            edit.editingFinished.connect(
                lambda n=f.name, e=edit, d=f.default: self._set(n, e.text() or d)
            )
        return edit

    def _fill(self) -> None:
        for f in self._fields:
            editor = self.editors.get(f.name)
            value = self._options.get(f.name, f.default)
            if editor is None:
                continue
            editor.blockSignals(True)
            if isinstance(editor, QCheckBox):
                editor.setChecked(bool(value))
            elif isinstance(editor, (QSpinBox, QDoubleSpinBox)):
                editor.setValue(value if isinstance(value, (int, float)) else 0)
            elif isinstance(editor, QComboBox):
                editor.setCurrentText(str(value))
            elif isinstance(editor, QLineEdit):
                editor.setText(list_text(value) if value is not None else "")
            editor.blockSignals(False)

    def _set(self, name: str, value: Any) -> None:
        default = next((f.default for f in self._fields if f.name == name), None)
        options = dict(self._options)
        if value == default and type(value) is type(default):
            options.pop(name, None)
        else:
            options[name] = value
        if options != self._options:
            self._emit(options)

    def _emit(self, options: dict) -> None:
        self._options = dict(options)
        self._fill()
        self.edited.emit(dict(options))
