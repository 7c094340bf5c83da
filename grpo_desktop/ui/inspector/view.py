"""The rollout inspector: every completion of the run, filterable, with a detail pane.

Filters: which step (the latest, every step kept in memory, or one chosen step, which is read
back from the run's events.jsonl when it is not in memory any more), the sign of the advantage,
only rows with a checker error, and free text. Rows are coloured by advantage (green pushed up,
red pushed down) and keep their group order, so a group's spread is visible at a glance.
Clicking a plot point asks the session model to focus a step; the inspector follows. "Open in
Lab" (a button for the selected row's group, and the table's context menu for its group or its
whole step) asks the session model to show those rollouts in the Lab's reward-design tab.

Memory stays bounded: the table mirrors the session's rollout store (the newest rows) and says so.

While a run goes on, "Latest step" moves to each new step; a rollout the user selected stays
listed (and selected, its detail open) above the new step's rows until another row is selected.
The columns always fit the table's width (columns.py); the Checker error column shows only when
some row has one. On a narrow window (under WIDE_PX) the detail pane sits under the table, so
the table has the whole width.
Try it: the Rollouts tab during a run; tests/ui/test_window.py,
tests/ui/inspector/test_rollouts_table.py.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableView,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.inspector.columns import fit_columns, refit_after_drag
from grpo_desktop.ui.inspector.detail import rollout_html
from grpo_desktop.ui.inspector.table import ROW_ROLE, RolloutFilters, RolloutTableModel

LATEST, ALL, ONE = "latest", "all", "one"
FILL_SLICE_S = 0.04  # after opening a session, add older steps' rows this long per tick
WIDE_PX = 1400  # narrower, the detail pane goes under the table (the table keeps the width)
SIGNS = (
    ("", "Any advantage"),
    ("+", "Pushed up (A > 0)"),
    ("-", "Pushed down (A < 0)"),
    ("0", "No signal (A = 0)"),
    ("n", "No score (could not be scored)"),
)
EMPTY_DETAIL = (
    "<p style='color:#666'>Select a rollout to read it in full. Each step, every prompt gets a "
    "group of answers; an answer's <b>advantage</b> is how much better it scored than its group's "
    "average. Green rows are made more likely, red rows less likely, and a group whose answers all "
    "scored the same teaches nothing.</p>"
)


class InspectorView(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.table_model = RolloutTableModel(self)
        self.filters = RolloutFilters(self.table_model, self)
        self._paged_step: int | None = None
        self._kept: tuple[int, int] | None = None  # (step, index): the selected older rollout
        self._fitting = False
        self._pending: list[int] = []  # steps in memory still to add after a reload, oldest first
        self._fill_timer = QTimer(self, interval=0)
        self._fill_timer.timeout.connect(self._on_fill_timer_timeout)

        self.mode_box = QComboBox()
        self.mode_box.addItem("Latest step", LATEST)
        self.mode_box.addItem("All steps kept in memory", ALL)
        self.mode_box.addItem("One step:", ONE)
        self.step_spin = QSpinBox()
        self.step_spin.setRange(0, 10_000_000)
        self.step_spin.setEnabled(False)
        self.step_spin.setKeyboardTracking(False)
        self.sign_box = QComboBox()
        for value, label in SIGNS:
            self.sign_box.addItem(label, value)
        self.errors_box = QCheckBox("Checker errors only")
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search prompts and completions…")
        self.search.setClearButtonEnabled(True)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Show"))
        for w in (self.mode_box, self.step_spin, self.sign_box, self.errors_box):
            bar.addWidget(w)
        bar.addWidget(self.search, 1)
        self.lab_button = QPushButton("Open in Lab")
        self.lab_button.setToolTip(
            "Re-score the selected rollout's group in the reward-design Lab: change the weights, "
            "checker and advantage settings and see every reward and advantage recomputed "
            "(right-click a row for its whole step)"
        )
        self.lab_button.setEnabled(False)

        self.table = QTableView()
        self.table.setModel(self.filters.view_model)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setWordWrap(False)
        self.table.horizontalHeader().setStretchLastSection(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.viewport().installEventFilter(self)
        self.table.horizontalHeader().sectionResized.connect(self._on_header_section_resized)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._on_table_context_menu)
        self.detail = QTextBrowser()
        self.detail.setOpenLinks(False)
        self.detail.setHtml(EMPTY_DETAIL)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.table)
        splitter.addWidget(self.detail)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([640, 320])
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        self.limit_label = QLabel()
        self.limit_label.setWordWrap(True)
        self.limit_label.setStyleSheet("color: palette(placeholder-text);")

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        foot = QHBoxLayout()
        foot.addWidget(self.limit_label, 1)
        foot.addWidget(self.lab_button)  # under the table: the filter bar has no room to spare
        layout.addLayout(foot)

        self.mode_box.currentIndexChanged.connect(self._on_filters_changed)
        self.step_spin.valueChanged.connect(self._on_filters_changed)
        self.sign_box.currentIndexChanged.connect(self._on_filters_changed)
        self.errors_box.toggled.connect(self._on_filters_changed)
        self.search.textChanged.connect(self.filters.set_text)
        self.lab_button.clicked.connect(self._on_lab_button_clicked)
        self.table.selectionModel().currentRowChanged.connect(self._on_table_current_changed)
        model.run_started.connect(self._on_model_run_started)
        model.session_replaced.connect(self._on_model_session_replaced)
        model.rollouts_added.connect(self._on_model_rollouts_added)
        model.step_focused.connect(self.show_step)
        self._configure_columns()
        self._apply_filters()
        self._update_limit_label()

    # ------------------------------------------------------------------ data

    @property
    def store(self):
        """The session's rollouts (another object once another session is opened)."""
        return self.model.history.rollouts

    def _on_model_run_started(self, _event) -> None:
        self._reload()  # a new run starts empty; a resumed one keeps the steps before it

    def _on_model_session_replaced(self) -> None:
        self._reload()
        self._apply_filters()

    def _reload(self) -> None:
        """Rebuild the table from the rollouts the store holds in memory: the newest step at
        once, older ones in slices from a timer (20,000 rows take seconds to build)."""
        self.table_model.reset()
        self._paged_step = None
        self._kept = None
        self.detail.setHtml(EMPTY_DETAIL)
        items = self.store.memory_items()
        self._pending = [step for step, _ in items[:-1]]
        if items:
            self.table_model.add_step(*items[-1])
        self._configure_columns()
        self._update_limit_label()
        if self._pending:
            self._fill_timer.start()

    @property
    def filling(self) -> bool:
        """Whether older steps are still being added to the table after a reload."""
        return bool(self._pending)

    def _on_fill_timer_timeout(self) -> None:
        t0 = time.perf_counter()
        while self._pending and time.perf_counter() - t0 < FILL_SLICE_S:
            self._add_pending(self._pending[-1])  # newest first
        if not self._pending:
            self._fill_timer.stop()

    def _add_pending(self, step: int) -> None:
        self._pending.remove(step)
        rows = self.store.get(step) if self.store.in_memory(step) else None
        if rows and not self.table_model.has_step(step):
            self.table_model.add_step(step, rows)
            self._show_error_column()

    def _on_model_rollouts_added(self, step: int, dropped: list) -> None:
        for old in dropped:
            self.table_model.remove_step(old)
        if self._paged_step == step:
            self.table_model.remove_step(step)
            self._paged_step = None
        fresh = not self.table_model.blocks
        self.table_model.add_step(step, self.store.get(step) or [])
        if fresh:
            self._configure_columns()
        else:
            self._show_error_column()
        if self.mode() == LATEST:
            self._keep_selected(step)
            self._apply_filters()
        self._update_limit_label()

    def _keep_selected(self, latest: int) -> None:
        """Remember the selected rollout when it is of an older step than `latest`, so the
        Latest step filter keeps it listed (and selected) rather than dropping it."""
        current = self.table.currentIndex()
        if self._kept is None and current.isValid() and self.table.selectionModel().hasSelection():
            step, index = current.data(ROW_ROLE)
            if step != latest:
                self._kept = (step, index)

    def _configure_columns(self) -> None:
        # Every column shown but the key. Qt keeps a hidden flag by position, and the columns
        # move when the reward functions change: hiding only the key's new position left the
        # old one hidden (the Completion column went missing that way).
        key = self.table_model.key_column
        for col in range(self.table_model.columnCount()):
            self.table.setColumnHidden(col, col == key)
        self._show_error_column(refit=False)
        self.fit_columns()

    def _show_error_column(self, refit: bool = True) -> None:
        """The Checker error column only when a row has one (it is empty otherwise)."""
        col = self.table_model.column("Checker error")
        hidden = not self.table_model.has_errors
        if self.table.isColumnHidden(col) != hidden:
            self.table.setColumnHidden(col, hidden)
            if refit:
                self.fit_columns()

    def column_names(self) -> list[str]:
        tm = self.table_model
        return [tm.headerData(c, Qt.Orientation.Horizontal) for c in range(tm.columnCount())]

    def fit_columns(self) -> None:
        """Every column inside the table's width (columns.py)."""
        self._fitting = True
        try:
            fit_columns(self.table, self.column_names(), self.table_model.functions)
        finally:
            self._fitting = False

    def _on_header_section_resized(self, col: int, _old: int, _new: int) -> None:
        if self._fitting or not QApplication.mouseButtons() & Qt.MouseButton.LeftButton:
            return  # ours, or Qt's own: only a drag of the user's is answered
        self._fitting = True
        try:
            refit_after_drag(self.table, self.column_names(), col)
        finally:
            self._fitting = False

    def eventFilter(self, obj, event) -> bool:
        if obj is self.table.viewport() and event.type() == QEvent.Type.Resize:
            self.fit_columns()
        return super().eventFilter(obj, event)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        wide = self.width() >= WIDE_PX
        orientation = Qt.Orientation.Horizontal if wide else Qt.Orientation.Vertical
        if self.splitter.orientation() != orientation:
            self.splitter.setOrientation(orientation)  # keeps the two panes' proportions

    def _update_limit_label(self) -> None:
        s = self.store
        kept = s.steps_in_memory
        if not kept:
            self.limit_label.setText(
                "No rollouts yet. Start a run: every answer the model writes appears here with "
                "its reward and advantage."
            )
            return
        text = (
            f"{s.rows_in_memory:,} rollouts of steps {kept[0]:,}–{kept[-1]:,} are kept in memory "
            f"(limit {s.max_rows:,})."
        )
        if s.forgotten:
            where = (
                "they are read back from the run folder when you pick one of their steps."
                if s.events_path
                else "they are not kept."
            )
            text += f" Older steps ({s.forgotten:,} rollouts) left memory; {where}"
        if self._kept is not None and self.mode() == LATEST:
            text += (
                f" The rollout you selected (step {self._kept[0]:,}) stays listed until you "
                "select another."
            )
        self.limit_label.setText(text)

    # ------------------------------------------------------------------ filters

    def mode(self) -> str:
        return self.mode_box.currentData()

    def show_step(self, step: int) -> None:
        """Show one step's rollouts (from memory or the run folder) and select the first."""
        self.mode_box.blockSignals(True)
        self.step_spin.blockSignals(True)
        self.mode_box.setCurrentIndex(self.mode_box.findData(ONE))
        self.step_spin.setValue(step)
        self.mode_box.blockSignals(False)
        self.step_spin.blockSignals(False)
        self._on_filters_changed()
        if self.filters.view_model.rowCount():
            self.table.selectRow(0)

    def _on_filters_changed(self, *_args) -> None:
        self._kept = None
        if self.mode() == ONE:
            self._page_in(self.step_spin.value())
        elif self._paged_step is not None:
            self.table_model.remove_step(self._paged_step)
            self._paged_step = None
        self.step_spin.setEnabled(self.mode() == ONE)
        self._apply_filters()

    def _page_in(self, step: int) -> None:
        if step in self._pending:  # kept in memory, not added yet after a reload
            self._add_pending(step)
        if self.table_model.has_step(step):
            return
        if self._paged_step is not None:
            self.table_model.remove_step(self._paged_step)
            self._paged_step = None
        rows = self.store.get(step)
        if rows:
            self.table_model.add_step(step, rows)
            self._paged_step = step

    def _apply_filters(self) -> None:
        mode = self.mode()
        step = None
        if mode == LATEST:
            kept = self.store.steps_in_memory
            step = kept[-1] if kept else -1
        elif mode == ONE:
            step = self.step_spin.value()
        keep = self._kept if mode == LATEST else None
        self.filters.set_filter(
            step, self.sign_box.currentData(), self.errors_box.isChecked(), keep
        )

    # ------------------------------------------------------------------ detail

    def _row_at(self, index) -> tuple[int, int] | None:
        """(step, group) of the table row at a view index, None when there is none."""
        if not index.isValid():
            return None
        step, i = index.data(ROW_ROLE)
        rows = self.store.get(step) or []
        return (step, int(rows[i].get("group", 0))) if i < len(rows) else None

    def _on_lab_button_clicked(self) -> None:
        found = self._row_at(self.table.currentIndex())
        if found is not None:
            self.model.open_in_lab(*found)

    def _on_table_context_menu(self, pos) -> None:
        found = self._row_at(self.table.indexAt(pos))
        if found is None:
            return
        step, group = found
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.addAction(
            f"Open group {group} in the Lab", lambda: self.model.open_in_lab(step, group)
        )
        menu.addAction(f"Open all of step {step} in the Lab", lambda: self.model.open_in_lab(step))
        menu.popup(self.table.viewport().mapToGlobal(pos))

    def _on_table_current_changed(self, current, _previous) -> None:
        if self._kept is not None and (
            not current.isValid() or tuple(current.data(ROW_ROLE)) != self._kept
        ):
            self._kept = None  # another row chosen: the older one leaves the Latest step
            self._apply_filters()
            self._update_limit_label()
        self.lab_button.setEnabled(current.isValid())
        if not current.isValid():
            self.detail.setHtml(EMPTY_DETAIL)
            return
        step, index = current.data(ROW_ROLE)
        rows = self.store.get(step) or []
        if index >= len(rows):
            return
        row = rows[index]
        group = [r for r in rows if r.get("group") == row.get("group")]
        r = self.model.config.rewards
        self.detail.setHtml(rollout_html(step, row, group, r.think_tag, r.answer_tag))

    def visible_rows(self) -> int:
        return self.filters.view_model.rowCount()
