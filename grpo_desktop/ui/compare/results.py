"""What a comparison found, in the Compare tab: the summary line, the filters and the table.

`CompareResults.show_comparison(c)` fills the summary (each side's accuracy with its 95 %
interval, fixed and broken counts, McNemar's p), the filter buttons All / Fixed / Broken / Both
wrong / Both right with their counts, and the table (table.py); a double-click (or Enter) on a
row shows both full answers (detail.py); Export CSV… saves every row through a file dialog.
Messages (saved, cannot save) go to the tab's message bar. Runs nothing itself.
Try it: tests/ui/compare/test_compare.py.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.variants.compare_table import (
    BOTH_RIGHT,
    BOTH_WRONG,
    BROKEN,
    FIXED,
    write_csv,
)
from grpo_desktop.ui.common.widgets import rich_tooltip
from grpo_desktop.ui.compare import tips
from grpo_desktop.ui.compare.detail import AnswerDetail
from grpo_desktop.ui.compare.table import (
    ANSWER_A,
    ANSWER_B,
    CATEGORY,
    GOLD,
    NUMBER,
    PROBLEM,
    ROW_ROLE,
    CategoryFilter,
    CompareTable,
)

FILTERS = (("", "All"), (FIXED, "Fixed"), (BROKEN, "Broken"), (BOTH_WRONG, "Both wrong"))
FILTERS += ((BOTH_RIGHT, "Both right"),)
WAITING = "Choose two models and press Run."


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


class CompareResults(QWidget):
    def __init__(self, message_bar, parent: QWidget | None = None):
        super().__init__(parent)
        self.message_bar = message_bar
        self.comparison = None  # engine.variants.compare.Comparison shown
        self.last_dir = os.path.expanduser("~")
        self.summary = QLabel(WAITING)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.summary.setToolTip(rich_tooltip(tips.INTERVAL, tips.MCNEMAR))
        self.filters = QButtonGroup(self)
        self.filter_buttons: dict[str, QPushButton] = {}
        for key, label in FILTERS:
            button = QPushButton(label)
            button.setCheckable(True)
            button.setToolTip(rich_tooltip(tips.CATEGORIES[key or "all"]))
            self.filters.addButton(button)
            self.filter_buttons[key] = button
        self.filter_buttons[""].setChecked(True)
        self.export_button = QPushButton("Export CSV…")
        self.export_button.setToolTip(rich_tooltip(tips.EXPORT))
        self.export_button.setEnabled(False)
        self.table_model = CompareTable(self)
        self.proxy = CategoryFilter(self)
        self.proxy.setSourceModel(self.table_model)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setToolTip(rich_tooltip(tips.TABLE))
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(NUMBER, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setWordWrap(False)
        self.table.verticalHeader().hide()
        rows = self.table.verticalHeader()  # one line of text a row, not the style's tall default
        rows.setDefaultSectionSize(self.table.fontMetrics().height() + 8)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(PROBLEM, QHeaderView.ResizeMode.Stretch)
        for column in (NUMBER, GOLD, ANSWER_A, ANSWER_B, CATEGORY):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.detail: AnswerDetail | None = None

        bar = QHBoxLayout()
        for key, _ in FILTERS:
            bar.addWidget(self.filter_buttons[key])
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.summary)
        col.addLayout(bar)
        col.addWidget(self.table, 1)
        self.export_button.clicked.connect(lambda: self.export_csv())
        self.filters.buttonClicked.connect(self._on_filters_button_clicked)
        self.table.activated.connect(self._on_table_activated)

    def show_comparison(self, comparison) -> None:
        """Fill the summary, the filter counts and the table."""
        self.comparison = comparison
        self.table_model.set_labels(comparison.a.label, comparison.b.label)
        self.table_model.set_rows(comparison.rows)
        s = comparison.summary
        counts = {"": s.n, **s.counts}
        for key, label in FILTERS:
            self.filter_buttons[key].setText(f"{label} ({counts[key]})")
        took = duration(comparison.seconds)
        source = comparison.source
        where = "held-out" if source == "held-out" else os.path.basename(source)
        p = s.mcnemar_p
        p_text = "p < 0.001" if p < 0.001 else f"p = {p:.2g}"
        text = f"{s.text()} · McNemar {p_text} · {where} problems, {took}"
        if comparison.cancelled:
            text = f"Cancelled: {s.n} of {comparison.asked} problems compared. " + text
        if not comparison.rows:
            text = f"Cancelled before any problem was answered by both sides ({took})."
        self.summary.setText(text)
        self.export_button.setEnabled(bool(comparison.rows))

    def show_running(self, label_a: str, label_b: str, n: int, where: str) -> None:
        """While a comparison runs and none is shown yet: what it compares."""
        if self.comparison is None:
            self.summary.setText(f"Comparing {label_a} with {label_b} on {n} {where}…")

    def clear(self) -> None:
        self.comparison = None
        self.table_model.set_rows([])
        self.summary.setText(WAITING)
        for key, label in FILTERS:
            self.filter_buttons[key].setText(label)
        self.export_button.setEnabled(False)
        if self.detail is not None:
            self.detail.close()

    def set_filter(self, category: str) -> None:
        """Show only `category`'s rows ('' for all)."""
        self.filter_buttons[category].setChecked(True)
        self.proxy.set_category(category)

    def _on_filters_button_clicked(self, button) -> None:
        key = next(k for k, b in self.filter_buttons.items() if b is button)
        self.proxy.set_category(key)

    def shown_rows(self) -> list:
        """The comparison rows the table shows now, top to bottom."""
        rows = self.table_model.rows
        return [
            rows[self.proxy.index(r, NUMBER).data(ROW_ROLE)] for r in range(self.proxy.rowCount())
        ]

    def _on_table_activated(self, index) -> None:
        i = self.proxy.index(index.row(), NUMBER).data(ROW_ROLE)
        if self.detail is None:
            self.detail = AnswerDetail(self)
        c = self.comparison
        self.detail.show_row(i + 1, self.table_model.rows[i], c.a.label, c.b.label)

    def export_csv(self, path: str | None = None) -> str:
        """Save the whole table as CSV (asks where when `path` is None); '' when nothing was."""
        c = self.comparison
        if c is None or not c.rows:
            return ""
        if path is None:
            default = os.path.join(self.last_dir, f"compare-{c.a.key}-vs-{c.b.key}.csv")
            path, _ = QFileDialog.getSaveFileName(
                self, "Export the comparison as CSV", default, "CSV (*.csv)"
            )
            if not path:
                return ""
        try:
            write_csv(path, c.rows)
        except OSError as exc:
            self.message_bar.show_message(
                "error", f"Cannot save {path}: {exc.strerror or exc}. Choose another folder."
            )
            return ""
        self.last_dir = os.path.dirname(path)
        self.message_bar.show_message("info", f"Saved {len(c.rows)} problems to {path}.")
        return path
