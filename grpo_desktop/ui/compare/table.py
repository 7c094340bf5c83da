"""The Compare tab's table: one row per problem, filtered by category.

`CompareTable` is a QStandardItemModel (painting and sorting in C++) with the columns #, Problem,
Gold, side A's answer, side B's answer and Category; an answer cell reads "✓ 1540" or "✗ 1111"
("✗ no answer" when none was found) on a green or red tint. `CategoryFilter` (a
QSortFilterProxyModel on the hidden category column) shows all rows or one category. `ROW_ROLE`
on the # cell holds the row's index in the comparison, so a click finds the full row.
Try it: tests/ui/compare/test_compare.py.
"""

from __future__ import annotations

from PySide6.QtCore import QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor, QStandardItem, QStandardItemModel

from grpo_desktop.engine.variants.compare_table import (
    BOTH_RIGHT,
    BROKEN,
    CATEGORY_HELP,
    FIXED,
    CompareRow,
)

ROW_ROLE = Qt.ItemDataRole.UserRole + 1
SORT_ROLE = Qt.ItemDataRole.UserRole
NUMBER, PROBLEM, GOLD, ANSWER_A, ANSWER_B, CATEGORY = range(6)
RIGHT, WRONG = QColor(46, 157, 82, 60), QColor(192, 57, 43, 55)
CATEGORY_COLORS = {FIXED: "#1e7a3c", BROKEN: "#a5281b", BOTH_RIGHT: "#555555"}
SHOWN_CHARS = 120  # of a problem in its cell (the tooltip and the detail show all of it)


def answer_text(answer: str | None, correct: bool) -> str:
    return f"{'✓' if correct else '✗'} {answer if answer is not None else 'no answer'}"


class CompareTable(QStandardItemModel):
    def __init__(self, parent=None):
        super().__init__(0, 6, parent)
        self.rows: list[CompareRow] = []
        self.set_labels("", "")

    def set_labels(self, label_a: str, label_b: str) -> None:
        """Name the answer columns after the sides ('' before any comparison)."""
        head_a = f"A: {label_a}" if label_a else "A (before)"
        head_b = f"B: {label_b}" if label_b else "B (after)"
        headers = ("#", "Problem", "Gold", head_a, head_b, "Category")
        tips = (
            "The problem's place in the list",
            "The problem both sides answered",
            "The reference answer",
            f"What side A ({label_a or 'before'}) answered: ✓ right, ✗ wrong (double-click: all)",
            f"What side B ({label_b or 'after'}) answered: ✓ right, ✗ wrong (double-click: all)",
            "fixed: A ✗ → B ✓; broken: A ✓ → B ✗; both right; both wrong",
        )
        for column, (text, tip) in enumerate(zip(headers, tips)):
            item = QStandardItem(text)
            item.setToolTip(tip)
            self.setHorizontalHeaderItem(column, item)

    def set_rows(self, rows: list[CompareRow]) -> None:
        self.removeRows(0, self.rowCount())
        self.rows = list(rows)
        for i, row in enumerate(self.rows):
            self.appendRow(_items(i, row))


def _items(i: int, row: CompareRow) -> list[QStandardItem]:
    number = QStandardItem(str(i + 1))
    number.setData(i, SORT_ROLE)
    number.setData(i, ROW_ROLE)
    flat = " ".join(row.problem.split())
    problem = QStandardItem(flat if len(flat) <= SHOWN_CHARS else flat[: SHOWN_CHARS - 1] + "…")
    problem.setToolTip(row.problem)
    gold = QStandardItem(row.gold)
    cells = [number, problem, gold]
    for answer, correct in ((row.answer_a, row.correct_a), (row.answer_b, row.correct_b)):
        cell = QStandardItem(answer_text(answer, correct))
        cell.setBackground(QBrush(RIGHT if correct else WRONG))
        cell.setData(int(correct), SORT_ROLE)
        cells.append(cell)
    kind = QStandardItem(row.category)
    kind.setToolTip(CATEGORY_HELP[row.category])
    if row.category in CATEGORY_COLORS:
        kind.setForeground(QBrush(QColor(CATEGORY_COLORS[row.category])))
    cells.append(kind)
    for cell in cells:
        cell.setEditable(False)
        if cell.data(SORT_ROLE) is None:
            cell.setData(cell.text(), SORT_ROLE)
    return cells


class CategoryFilter(QSortFilterProxyModel):
    """Rows of one category ('' for all): no category's name is part of another's."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.category = ""
        self.setFilterKeyColumn(CATEGORY)
        self.setSortRole(SORT_ROLE)

    def set_category(self, category: str) -> None:
        self.category = category
        self.setFilterFixedString(category)
