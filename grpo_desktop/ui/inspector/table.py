"""The rollout inspector's table model: one row per rollout, coloured by advantage, grouped by
prompt. The Prompt and Completion cells show one line (the view elides it to the column's width)
and the whole text in their tooltip.

Built on QStandardItemModel with two QSortFilterProxyModels (filters by step, advantage sign and
errors through a hidden key column and one regular expression, then free text), so painting,
sorting and filtering run in C++: the training thread holds the GIL most of the time, and a
Python `data()` called for every painted cell would stall the window.

Rows come in whole steps (`add_step`) and leave in whole steps (`remove_step`), mirroring the
session's bounded rollout store. `Qt.UserRole` holds sort keys, `ROW_ROLE` holds (step, index)
to find the full row in the store. A row that reads "no score" in any cell (its total, its
advantage or one of its reward parts: None or NaN) is what the "No score" filter shows.
Try it: tests/ui/common/test_widgets.py, tests/ui/inspector/test_rollouts_table.py.
"""

from __future__ import annotations

import html
import math
import re

from PySide6.QtCore import QRegularExpression, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor, QStandardItem, QStandardItemModel

from grpo_desktop.ui.inspector.detail import unknown_total_text

ROW_ROLE = Qt.ItemDataRole.UserRole + 1
SORT_ROLE = Qt.ItemDataRole.UserRole
# The texts first (they take the width left over: columns.py), then one column per reward
# function, then the numbers.
BASE_COLUMNS = ["Step", "Group", "Prompt", "Completion", "Answer"]
TAIL_COLUMNS = [
    "Reward",
    "Advantage",
    "Spread",
    "Length",
    "Cut off",
    "Checker error",
    "key",  # hidden: what the step / sign / no-score / error filters match
]
NUMERIC = {"Step", "Group", "Reward", "Advantage", "Spread", "Length"}
HEADER_TIPS = {
    "Step": "Training step",
    "Group": "Answers to the same prompt form a group; its mean reward is their baseline",
    "Reward": "Weighted total of the reward functions",
    "Advantage": "How much better than its group this answer scored: + made more likely, − less",
    "Spread": "Group spread: the spread (std) of the rewards in this answer's group; 0 means "
    "no signal (every answer scored the same, so the group teaches nothing)",
    "Length": "Completion length in tokens",
    "Cut off": "Truncated: the answer was cut off at the length limit",
    "Checker error": "What your checker raised for this answer (its total is then unknown)",
    "Prompt": "The problem",
    "Answer": "The reference answer",
    "Completion": "What the model wrote: its first line (hover for all of it, or select the row)",
}
GROUP_COLORS = ["#1f6fd1", "#e07b00", "#2e9d52", "#8e44ad", "#c0392b", "#138d90", "#7f8c8d"]
NO_SCORE = "no score"
CELL_CHARS = 300  # a cell's one line, before the view elides it to the column's width
TIP_CHARS = 4000  # a tooltip's text; the detail pane has the rest


def advantage_color(adv: float | None, scale: float) -> QColor | None:
    """Green for positive, red for negative advantages; stronger with |A| (None: no tint)."""
    if adv is None or not math.isfinite(adv) or abs(adv) < 1e-9:
        return None
    strength = min(1.0, abs(adv) / max(scale, 1e-9))
    color = QColor("#2e9d52") if adv > 0 else QColor("#c0392b")
    color.setAlpha(int(25 + 90 * strength))
    return color


def group_spreads(rows: list[dict]) -> dict[int, float | None]:
    """Population std of the total reward inside each group (None when no answer was scored)."""
    by_group: dict[int, list[float]] = {}
    for r in rows:
        if r.get("reward") is not None:
            by_group.setdefault(int(r.get("group", 0)), []).append(float(r["reward"]))
    spreads: dict[int, float | None] = {}
    for r in rows:
        g = int(r.get("group", 0))
        vals = by_group.get(g)
        if not vals:
            spreads[g] = None
            continue
        mean = sum(vals) / len(vals)
        spreads[g] = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    return spreads


def _scored(v) -> bool:
    """Whether a reward value scored: a number, not None and not NaN (or infinite)."""
    return isinstance(v, (int, float)) and math.isfinite(v)


def _number_text(v: float | None, digits: int = 3) -> str:
    if not _scored(v):
        return NO_SCORE
    return f"{v:+.{digits}f}" if digits == 2 else f"{v:.{digits}g}"


def _one_line(text: str, limit: int = 160) -> str:
    flat = text.replace("\n", " ⏎ ")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def first_line(text: str, limit: int = CELL_CHARS) -> str:
    """The first line of `text` that is not blank, with " …" when more follows."""
    stripped = text.strip()
    line = next((part.strip() for part in stripped.splitlines() if part.strip()), "")
    more = len(line) < len(stripped)
    if len(line) > limit:
        line, more = line[:limit], True
    return line + (" …" if more else "")


def full_text_tip(text: str) -> str:
    """A tooltip with the whole text, wrapped to the screen (rich text) with its line breaks."""
    cut = text[:TIP_CHARS]
    note = (
        f"\n[… {len(text) - TIP_CHARS:,} more characters: select the row to read them]"
        if len(text) > TIP_CHARS
        else ""
    )
    return f"<p style='white-space:pre-wrap'>{html.escape(cut + note)}</p>"


class RolloutTableModel(QStandardItemModel):
    """The source model: see the module docstring."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.functions: list[str] = []
        self.blocks: list[tuple[int, int]] = []  # (step, number of rows), in model order
        self._errors: dict[int, int] = {}  # step -> rows with a checker error
        self._set_columns([])

    def _set_columns(self, functions: list[str]) -> None:
        self.functions = list(functions)
        headers = BASE_COLUMNS + list(functions) + TAIL_COLUMNS
        self.setColumnCount(len(headers))
        self.setHorizontalHeaderLabels(headers)
        for col, name in enumerate(headers):
            tip = HEADER_TIPS.get(name) or f"The {name} reward function's own score (unweighted)"
            self.setHeaderData(col, Qt.Orientation.Horizontal, tip, Qt.ItemDataRole.ToolTipRole)

    def column(self, name: str) -> int:
        headers = [self.headerData(c, Qt.Orientation.Horizontal) for c in range(self.columnCount())]
        return headers.index(name)

    @property
    def key_column(self) -> int:
        return self.columnCount() - 1

    def reset(self) -> None:
        self.removeRows(0, self.rowCount())
        self.blocks.clear()
        self._errors.clear()
        self._set_columns([])

    @property
    def has_errors(self) -> bool:
        """Whether any row held has a checker error (the view shows that column only then)."""
        return any(self._errors.values())

    def has_step(self, step: int) -> bool:
        return any(s == step for s, _ in self.blocks)

    def add_step(self, step: int, rows: list[dict]) -> None:
        functions = list(dict.fromkeys(k for r in rows for k in (r.get("rewards") or {})))
        if not self.blocks and functions != self.functions:
            self._set_columns(functions)
        spreads = group_spreads(rows)
        scale = max((abs(r.get("advantage") or 0.0) for r in rows), default=1.0)
        position = sum(n for s, n in self.blocks if s < step)
        index = sum(1 for s, _ in self.blocks if s < step)
        for i, row in enumerate(rows):
            self.insertRow(position + i, self._items(step, i, row, spreads, scale))
        self.blocks.insert(index, (step, len(rows)))
        self._errors[step] = sum(1 for r in rows if r.get("error"))

    def remove_step(self, step: int) -> None:
        start = 0
        for i, (s, n) in enumerate(self.blocks):
            if s == step:
                self.removeRows(start, n)
                del self.blocks[i]
                self._errors.pop(step, None)
                return
            start += n

    def _items(self, step: int, index: int, row: dict, spreads: dict, scale: float) -> list:
        group = int(row.get("group", 0))
        adv, reward = row.get("advantage"), row.get("reward")
        error = row.get("error") or ""
        spread = spreads.get(group)
        rewards = row.get("rewards") or {}
        prompt, completion = str(row.get("prompt", "")), str(row.get("completion", ""))
        # "no score" (None or NaN): never shown, sorted or filtered as a 0
        unscored = not _scored(reward) or (adv is not None and not _scored(adv))
        if unscored:
            sign, adv = "n", None
        else:
            sign = "0" if adv is None or adv == 0 else ("+" if adv > 0 else "-")
        if spread is None:
            spread_text = NO_SCORE
        else:
            spread_text = "0 · no signal" if spread < 1e-9 else f"{spread:.3g}"
        cells: dict[str, tuple[str, object]] = {
            "Step": (str(step), step),
            "Group": (str(group), group),
            "Prompt": (_one_line(prompt, CELL_CHARS), prompt),
            "Completion": (first_line(completion), completion),
            "Answer": (str(row.get("answer", "")), str(row.get("answer", ""))),
        }
        for fn in self.functions:
            v = rewards.get(fn)
            cells[fn] = (_number_text(v), v if _scored(v) else -math.inf)
        cells.update(
            {
                "Reward": (_number_text(reward), -math.inf if unscored else reward),
                "Advantage": _advantage_cell(sign, adv),
                "Spread": (spread_text, -1.0 if spread is None else spread),
                "Length": (str(row.get("length", "")), int(row.get("length") or 0)),
                "Cut off": (
                    "yes" if row.get("truncated") else "",
                    int(bool(row.get("truncated"))),
                ),
                "Checker error": (_one_line(error, 120), error),
            }
        )
        # The "No score" filter shows exactly the rows that read "no score" somewhere.
        no_score = "n" if any(text == NO_SCORE for text, _ in cells.values()) else "k"
        cells["key"] = (f"s{step};r{index};{sign};{no_score};e{int(bool(error))}", "")
        tint = advantage_color(adv, scale)
        items = {}
        for name, (text, key) in cells.items():
            item = QStandardItem(text)
            item.setEditable(False)
            item.setData(key, SORT_ROLE)
            item.setData((step, index), ROW_ROLE)
            if tint is not None:
                item.setBackground(QBrush(tint))
            if name in NUMERIC or name in self.functions:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            items[name] = item
        items["Group"].setData(
            QColor(GROUP_COLORS[group % len(GROUP_COLORS)]), Qt.ItemDataRole.DecorationRole
        )
        items["Completion"].setToolTip(full_text_tip(completion))
        items["Prompt"].setToolTip(full_text_tip(prompt))
        if spread is not None and spread < 1e-9:
            items["Spread"].setForeground(QBrush(QColor("#8e44ad")))
        if unscored:
            grey = QBrush(QColor("#777777"))
            items["Advantage"].setForeground(grey)
            items["Reward"].setForeground(grey)
            tip = unknown_total_text(row).replace(" (see the error below)", "")
            items["Advantage"].setToolTip(tip + (f"\n{error[:200]}" if error else ""))
        if error:
            items["Checker error"].setForeground(QBrush(QColor("#b3261e")))
            items["Checker error"].setToolTip(error)
        return list(items.values())


def _advantage_cell(sign: str, adv: float | None) -> tuple[str, float]:
    """Text and sort key of the Advantage column: unscored rows read "no score" and sort below
    every number (never among the zeros)."""
    if sign == "n":
        return NO_SCORE, -math.inf
    if sign == "0":
        return "0", 0.0
    return f"{adv:+.3g}" if abs(adv) < 1e-3 else f"{adv:+.3f}", adv


def filter_pattern(
    step: int | None, sign: str, errors_only: bool, keep: tuple[int, int] | None = None
) -> str:
    """The key-column regex for a step (None: any), a sign ('+', '-', '0', '' for any, or 'n':
    every row that reads "no score" somewhere) and whether only rows with a checker error pass.
    `keep` (step, index) lets that one row pass the step filter too (the selected rollout, kept
    when a newer step replaces the one shown).

    A key reads "s{step};r{index};{sign};{n or k};e{0 or 1}": n when a cell reads "no score"."""
    parts = ["^"]
    if step is not None and keep is not None and keep[0] != step:
        parts.append(f"(?=s{step};|s{keep[0]};r{keep[1]};)")
    elif step is not None:
        parts.append(f"(?=s{step};)")
    if sign:
        parts.append(f"(?=.*;{re.escape(sign)};)")
    if errors_only:
        parts.append("(?=.*;e1$)")
    return "".join(parts)


class RolloutFilters:
    """The two proxies over a RolloutTableModel: key filter, then text search and sorting."""

    def __init__(self, source: RolloutTableModel, parent=None):
        self.source = source
        self.keys = QSortFilterProxyModel(parent)
        self.keys.setSourceModel(source)
        self.keys.setFilterKeyColumn(source.key_column)
        self.text = QSortFilterProxyModel(parent)
        self.text.setSourceModel(self.keys)
        self.text.setFilterKeyColumn(-1)
        self.text.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.text.setSortRole(SORT_ROLE)
        source.columnsInserted.connect(self._update_key_column)
        source.columnsRemoved.connect(self._update_key_column)
        self.pattern = ""

    def _update_key_column(self, *_args) -> None:
        self.keys.setFilterKeyColumn(self.source.key_column)

    def set_filter(
        self, step: int | None, sign: str, errors_only: bool, keep: tuple[int, int] | None = None
    ) -> None:
        pattern = filter_pattern(step, sign, errors_only, keep)
        if pattern != self.pattern:
            self.pattern = pattern
            self.keys.setFilterRegularExpression(QRegularExpression(pattern))

    def set_text(self, text: str) -> None:
        self.text.setFilterFixedString(text)

    @property
    def view_model(self) -> QSortFilterProxyModel:
        return self.text
