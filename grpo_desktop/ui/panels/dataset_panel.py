"""The Dataset panel: where the problems come from, which columns hold the problem and the answer,
and a preview of the first prompts exactly as the model will see them (chat template applied).

Sources: the built-in arithmetic problems, a file, a folder saved with `datasets`, a hub id, a
reasoning-gym task (picked in panels/task_picker.py, with a form for the task's own settings). The
column boxes are filled from the real columns. The preview, the row counts and the held-out split
are computed off the GUI thread (panels/dataset_jobs.py), only while the panel is visible, and
refreshed shortly after the settings stop changing.
Try it: tests/ui/panels/test_panels.py.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.common.form import ConfigForm, messages_for, tooltip_for
from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import fit_combo, note_label, set_note, wrapped_label
from grpo_desktop.ui.panels.dataset_jobs import apply_template, read_rows
from grpo_desktop.ui.panels.task_picker import TaskOptionsForm, TaskPickerDialog

SOURCES = (
    ("arithmetic", "Built-in arithmetic problems"),
    ("file", "A file (JSONL, JSON, CSV, Parquet)"),
    ("disk", "A folder saved with datasets"),
    ("hub", "A Hugging Face hub dataset"),
    ("task", "A reasoning-gym task (generated problems)"),
)
GENERATED = ("arithmetic", "task")  # sources with no path and no columns to choose
PREVIEW_ROWS = 8


class DatasetPanel(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.tasks = BackgroundTasks(self)
        self.preview: dict | None = None
        self._stale = True
        self.active = True  # the window turns this off while the panel's dock tab is hidden

        self.source_box = QComboBox()
        self.source_box.setObjectName("data.source")
        for value, label in SOURCES:
            self.source_box.addItem(label, value)
        self.source_box.setToolTip(tooltip_for("data", "source"))
        fit_combo(self.source_box)  # its longest choice would widen the dock past the screen
        self.path_edit = QLineEdit()
        self.path_edit.setObjectName("data.path")
        self.path_edit.setToolTip(tooltip_for("data", "path"))
        self.browse_button = QPushButton("Browse…")
        self.path_note = note_label("error")
        path_row = QHBoxLayout()
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(self.browse_button)
        self.path_widget = QWidget()
        path_col = QVBoxLayout(self.path_widget)
        path_col.setContentsMargins(0, 0, 0, 0)
        path_col.addLayout(path_row)
        path_col.addWidget(self.path_note)
        self.prompt_box = self._column_box("prompt_column")
        self.answer_box = self._column_box("answer_column")
        self.columns_note = note_label("error")

        source = QGroupBox("Source")
        form = QFormLayout(source)
        form.addRow("Data source", self.source_box)
        form.addRow("Path or id", self.path_widget)
        self.source_form = form
        self.split_form = ConfigForm(model, [("data", "subset"), ("data", "split")])
        self.arith_form = ConfigForm(
            model, [("data", "arithmetic_difficulty"), ("data", "arithmetic_size")]
        )
        form.addRow(self.split_form)
        form.addRow(self.arith_form)
        self.task_edit = QLineEdit()
        self.task_edit.setObjectName("data.task")
        self.task_edit.setToolTip(tooltip_for("data", "task"))
        self.task_button = QPushButton("Choose…")
        self.task_button.setToolTip(
            "Pick a task from reasoning-gym's list, with an example of each"
        )
        self.task_note = note_label("error")
        task_row = QHBoxLayout()
        task_row.addWidget(self.task_edit, 1)
        task_row.addWidget(self.task_button)
        self.task_widget = QWidget()
        task_col = QVBoxLayout(self.task_widget)
        task_col.setContentsMargins(0, 0, 0, 0)
        task_col.addLayout(task_row)
        task_col.addWidget(self.task_note)
        form.addRow("Task", self.task_widget)
        self.task_options = TaskOptionsForm()
        self.task_options.setToolTip(tooltip_for("data", "task_options"))
        form.addRow("Task settings", self.task_options)
        self.task_form = ConfigForm(model, [("data", "task_size"), ("data", "task_seed")])
        form.addRow(self.task_form)
        self.columns_widget = QWidget()
        cform = QFormLayout(self.columns_widget)
        cform.setContentsMargins(0, 0, 0, 0)
        cform.addRow("Prompt column", self.prompt_box)
        cform.addRow("Answer column", self.answer_box)
        cform.addRow(self.columns_note)
        form.addRow(self.columns_widget)

        self.prompt_form = ConfigForm(
            model,
            [
                ("data", "system_prompt"),
                ("data", "example_problem"),
                ("data", "example_answer"),
                ("data", "answer_prefix"),
                ("data", "eval_size"),
                ("data", "max_prompt_length"),
            ],
        )
        prompt_group = QGroupBox("Prompt and held-out split")
        QVBoxLayout(prompt_group).addWidget(self.prompt_form)

        self.counts_label = wrapped_label("")
        self.status_note = note_label("warning")
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Prompt as the model sees it", "Answer"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(
            1, QHeaderView.ResizeMode.ResizeToContents
        )
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(True)
        self.table.setMinimumHeight(220)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        preview_group = QGroupBox("Preview: the first problems")
        pcol = QVBoxLayout(preview_group)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop waiting for this preview (a newer one replaces it)")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel_preview)
        counts_row = QHBoxLayout()
        counts_row.addWidget(self.counts_label, 1)
        counts_row.addWidget(self.cancel_button, 0, Qt.AlignmentFlag.AlignTop)
        pcol.addLayout(counts_row)
        pcol.addWidget(self.status_note)
        pcol.addWidget(self.table)

        layout = QVBoxLayout(self)
        layout.addWidget(source)
        layout.addWidget(prompt_group)
        layout.addWidget(preview_group, 1)

        self._timer = QTimer(self, singleShot=True, interval=400)
        self._timer.timeout.connect(self.refresh_preview)
        self.source_box.activated.connect(self._on_source_box_activated)
        self.path_edit.editingFinished.connect(self._on_path_edit_finished)
        self.browse_button.clicked.connect(self._on_browse_clicked)
        self.task_edit.editingFinished.connect(self._on_task_edit_finished)
        self.task_button.clicked.connect(self.choose_task)
        self.task_options.edited.connect(self._on_task_options_edited)
        model.config_changed.connect(self._on_model_config_changed)
        model.config_replaced.connect(self._load)
        self._load()

    def _column_box(self, name: str) -> QComboBox:
        box = QComboBox()
        box.setEditable(True)
        box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        box.setObjectName(f"data.{name}")
        box.setToolTip(tooltip_for("data", name))
        box.lineEdit().editingFinished.connect(lambda: self._set_column(name, box))
        box.activated.connect(lambda _i: self._set_column(name, box))
        return box

    def _set_column(self, name: str, box: QComboBox) -> None:
        self.model.set_value("data", name, box.currentText().strip())

    # -- model -> widgets

    def _load(self) -> None:
        source = self.model.value("data", "source")
        self.source_box.setCurrentIndex(max(0, self.source_box.findData(source)))
        self.path_edit.setText(self.model.value("data", "path"))
        for box, name in ((self.prompt_box, "prompt_column"), (self.answer_box, "answer_column")):
            value = self.model.value("data", name)
            if box.currentText() != value:
                box.setEditText(value)
        builtin = source in GENERATED
        self.source_form.setRowVisible(self.path_widget, not builtin)
        self.browse_button.setVisible(source in ("file", "disk"))
        self.split_form.setVisible(not builtin)
        self.columns_widget.setVisible(not builtin)
        self.arith_form.setVisible(source == "arithmetic")
        task = source == "task"
        for row in (self.task_widget, self.task_options, self.task_form):
            self.source_form.setRowVisible(row, task)
        self.task_edit.setText(self.model.value("data", "task"))
        if task:  # the task's settings form (loads reasoning-gym: only when a task is shown)
            self.task_options.show_task(
                self.model.value("data", "task"), self.model.value("data", "task_options")
            )
        else:
            self.task_options.keep(self.model.value("data", "task_options"))
        problems = self.model.problems()
        set_note(self.task_note, "\n".join(messages_for(problems, "data", "task")))
        set_note(self.path_note, "\n".join(messages_for(problems, "data", "path")))
        set_note(self.columns_note, "\n".join(messages_for(problems, "data", "prompt_column")))
        self._schedule()

    def _on_model_config_changed(self, section: str, name: str) -> None:
        if section == "data" or (section, name) == ("model", "name_or_path"):
            self._load()

    # -- widgets -> model

    def _on_source_box_activated(self, index: int) -> None:
        self.model.set_value("data", "source", self.source_box.itemData(index))

    def _on_path_edit_finished(self) -> None:
        self.model.set_value("data", "path", self.path_edit.text().strip())

    def _on_task_edit_finished(self) -> None:
        self.model.set_value("data", "task", self.task_edit.text().strip())

    def _on_task_options_edited(self, options: dict) -> None:
        self.model.set_value("data", "task_options", dict(options))

    def choose_task(self) -> None:
        """The task picker: a chosen task replaces the task (and its settings go back to the
        task's defaults)."""
        dialog = TaskPickerDialog(self, self.model.value("data", "task"))
        if dialog.exec() == TaskPickerDialog.DialogCode.Accepted and dialog.chosen():
            name = dialog.chosen()
            if name != self.model.value("data", "task"):
                self.model.set_value("data", "task_options", {})
            self.model.set_value("data", "task", name)
        dialog.deleteLater()

    def _on_browse_clicked(self) -> None:
        if self.model.value("data", "source") == "disk":
            path = QFileDialog.getExistingDirectory(self, "Choose a folder saved with datasets")
        else:
            path, _ = QFileDialog.getOpenFileName(
                self, "Choose a data file", "", "Data (*.jsonl *.json *.csv *.parquet)"
            )
        if path:
            self.path_edit.setText(path)
            self.model.set_value("data", "path", path)

    # -- preview

    def _schedule(self) -> None:
        self._stale = True
        if self.active and self.isVisible():
            self._timer.start()

    def set_active(self, active: bool) -> None:
        """Whether the panel is on screen (its dock tab selected): only then is it refreshed."""
        self.active = active
        if active and self._stale:
            self._timer.start()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self._stale and self.active:
            self._timer.start()

    def refresh_preview(self) -> None:
        """Read the first rows in the background, then apply the chat template (newest wins)."""
        self._stale = False
        cfg = self.model.config
        if cfg.data.source not in GENERATED and not cfg.data.path.strip():
            self._on_rows_read(None, None)
            return
        data, seed = dataclasses.replace(cfg.data), cfg.run.seed
        self.counts_label.setText("Reading the dataset…")
        self.tasks.cancel("template")  # a newer preview replaces the older one's template step
        self.tasks.submit(
            "rows",
            lambda: {**read_rows(data, seed, PREVIEW_ROWS), "of": (data, seed)},
            self._on_rows_read,
        )
        self.cancel_button.setVisible(True)

    def start_blocker(self) -> str:
        """Why training cannot start on the data the preview shows now ('' when it can, or when
        the preview is not of the current settings)."""
        cfg = self.model.config
        if self.preview is None or self.preview.get("of") != (cfg.data, cfg.run.seed):
            return ""
        return self.preview.get("blocker") or ""

    def cancel_preview(self) -> None:
        """Stop waiting for the preview in progress (its result, if it comes, is dropped)."""
        reading = self.tasks.cancel("rows")
        templating = self.tasks.cancel("template")
        self.cancel_button.setVisible(False)
        if reading:
            self.counts_label.setText("Preview cancelled. Change the source to try again.")
        elif templating:
            self.table.setHorizontalHeaderLabels(["Prompt (chat template cancelled)", "Answer"])

    def _on_rows_read(self, result: dict | None, error: Exception | None) -> None:
        self.preview = result
        self.cancel_button.setVisible(result is not None)  # the template step follows
        self.table.setRowCount(0)
        if result is None:
            self.counts_label.setText(
                "" if error else "Choose a file, a folder or a hub id to see its first problems."
            )
            set_note(self.status_note, str(error) if error is not None else "")
            return
        for box in (self.prompt_box, self.answer_box):
            text = box.currentText()
            box.blockSignals(True)
            box.clear()
            box.addItems(result["columns"])
            box.setEditText(text)
            box.blockSignals(False)
        if result.get("train") is not None:
            where = "" if self.model.value("data", "source") == "arithmetic" else result.get("desc")
            self.counts_label.setText(
                f"<b>{result['train']:,}</b> problems for training, <b>{result['eval']:,}</b> held "
                "out to measure accuracy."
                + (f"<br><span style='color:#666'>{where}</span>" if where else "")
            )
        else:
            self.counts_label.setText("")
        set_note(self.status_note, "\n".join(result["notes"]))
        self.table.setRowCount(len(result["problems"]))
        for i, (problem, answer) in enumerate(zip(result["problems"], result["answers"])):
            self.table.setItem(i, 0, QTableWidgetItem(problem or ""))
            self.table.setItem(i, 1, QTableWidgetItem(answer))
        self.table.resizeRowsToContents()
        cfg = self.model.config
        args = (
            result["problems"],
            cfg.data.system_prompt,
            cfg.model.name_or_path,
            cfg.model.trust_remote_code,
            self.model.remote_code_permission(),  # None unless the user trusted the code
            (cfg.data.example_problem, cfg.data.example_answer),  # the worked example, if any
            cfg.data.answer_prefix,  # written for the model at the end of each prompt
        )
        self.table.setHorizontalHeaderLabels(["Prompt (applying the chat template…)", "Answer"])
        self.tasks.submit("template", lambda: apply_template(*args), self._on_template_applied)

    def _on_template_applied(self, result: dict | None, error: Exception | None) -> None:
        self.cancel_button.setVisible(False)
        self.table.setHorizontalHeaderLabels(["Prompt as the model sees it", "Answer"])
        if result is None or self.preview is None:
            return
        for i, prompt in enumerate(result["prompts"][: self.table.rowCount()]):
            if prompt:
                self.table.setItem(i, 0, QTableWidgetItem(prompt))
        self.table.resizeRowsToContents()
        notes = (
            [*self.preview["notes"], result["note"]] if result["note"] else self.preview["notes"]
        )
        set_note(self.status_note, "\n".join(notes))

    def fields(self) -> list[tuple[str, str]]:
        return [
            ("data", "source"),
            ("data", "path"),
            ("data", "prompt_column"),
            ("data", "answer_column"),
            *self.split_form.editors,
            *self.arith_form.editors,
            ("data", "task"),
            ("data", "task_options"),
            *self.task_form.editors,
            *self.prompt_form.editors,
        ]
