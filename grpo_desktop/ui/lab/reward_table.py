"""The reward-design Lab's pieces that draw: the pipeline strip and the table of scored rollouts.

`PipelineStrip` shows prompt → G rollouts → verifiable reward → advantage with the current
numbers. `RolloutScoreTable` lists each rollout with its reward parts, total, advantage (drawn as
a bar from the baseline: green ↑ pushed up, red ↓ pushed down), length, per-token update size
and the format's share of the advantage (From format: all 0 when the format has no spread); it
only displays an engine.lab.rewards.LabResult and computes nothing.
Try it: tests/ui/lab/test_reward_lab.py.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QStyledItemDelegate,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

ADV_ROLE = Qt.ItemDataRole.UserRole + 7
RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
RIGHT_ALIGNED = {0, 3, 4, 5, 6, 7, 8, 9, 10}
UP, DOWN = QColor("#2e9d52"), QColor("#c0392b")
BOX_STYLE = (
    "QLabel { border: 1px solid palette(mid); border-radius: 5px; padding: 4px 8px;"
    " background: palette(base); }"
)


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "no score" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


class PipelineStrip(QWidget):
    """prompt → G rollouts → verifiable reward → advantage, one box per stage."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.boxes = [QLabel() for _ in range(4)]
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for i, box in enumerate(self.boxes):
            box.setStyleSheet(BOX_STYLE)
            box.setWordWrap(True)
            box.setTextFormat(Qt.TextFormat.RichText)
            layout.addWidget(box, 1)
            if i < 3:
                arrow = QLabel("→")
                arrow.setStyleSheet("font-size: 18px; color: palette(mid);")
                layout.addWidget(arrow)

    def show_result(self, prompt: str, result, G: int, groups: int) -> None:
        s = result.settings
        shown = prompt if len(prompt) <= 70 else prompt[:69] + "…"
        first = f"{groups} prompts, e.g. " if groups > 1 else ""
        self.boxes[0].setText(f"<b>Prompt</b><br>{first}{_html(shown)}")
        many = f"{groups} prompts × " if groups > 1 else ""
        self.boxes[1].setText(f"<b>Sample G = {G}</b><br>{many}{G} rollouts, each a full answer")
        credit = " per tag" if s.format_credit == "per_tag" else ""
        parts = [f"accuracy ×{s.accuracy_weight:g}", f"format{credit} ×{s.format_weight:g}"]
        if s.custom_checker.strip():
            parts.append(f"your checker ×{s.custom_weight:g}")
        self.boxes[2].setText(
            f"<b>Verifiable reward</b><br>{' + '.join(parts)} ({s.answer_checker} checker)"
        )
        formula = {
            "group": "(r − mean) / std of the group",
            "batch": "(r − group mean) / std of the step",
            "none": "r − mean (no scaling)",
        }[s.scale_rewards]
        self.boxes[3].setText(f"<b>Advantage</b><br>A = {formula}; the mean is the baseline")


class AdvantageBar(QStyledItemDelegate):
    """Paints an advantage as a bar growing left (red) or right (green) from the cell's centre."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.scale = 1.0

    def paint(self, painter: QPainter, option, index) -> None:
        super().paint(painter, option, index)
        adv = index.data(ADV_ROLE)
        if adv is None or abs(adv) < 1e-12:
            return
        r = QRectF(option.rect).adjusted(4, 5, -4, -5)
        half = r.width() * 0.24  # the bar fills the left half; the text sits at the right
        width = half * min(1.0, abs(adv) / max(self.scale, 1e-9))
        mid = r.left() + half
        bar = (
            QRectF(mid, r.top(), width, r.height())
            if adv > 0
            else QRectF(mid - width, r.top(), width, r.height())
        )
        color = QColor(UP if adv > 0 else DOWN)
        color.setAlpha(170)
        painter.save()
        painter.fillRect(bar, color)
        painter.setPen(QColor("#888"))
        painter.drawLine(int(mid), int(r.top()), int(mid), int(r.bottom()))
        painter.restore()


COLUMNS = ["#", "Rollout", "Final answer", "Accuracy", "Format", "Checker", "Reward",
           "Advantage", "Tokens", "Per token", "From format"]  # fmt: skip
TIPS = {
    "#": "Its position in the group (the built-in group: the first G attempts form it)",
    "Final answer": "What the accuracy checker read as the final answer",
    "Accuracy": "1 if the final answer is right (raw score, before its weight)",
    "Format": "1 for <think>…</think> then <answer>…</answer> (raw score); with per-tag format "
    "credit a quarter for each tag in its place",
    "Checker": "Your checker's raw score",
    "Reward": "Weighted sum of the parts: what the rollout earns",
    "Advantage": "Reward against the group mean (the baseline): ↑ made more likely, ↓ less",
    "Tokens": "Completion length in tokens",
    "From format": "The part of the advantage the format reward makes: weight × (format − the "
    "group's mean format), divided like the advantage. 0 for every rollout when the format "
    "scores are all the same (all-or-nothing credit and no rollout with all the tags)",
    "Per token": "The update on each of its tokens: the loss's weight on each of this rollout's tokens, relative to "
    "1/(number of rollouts): A/L with length normalisation (GRPO), A/L_max without (Dr. GRPO)",
}


class RolloutScoreTable(QTableWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(COLUMNS)
        for i, name in enumerate(COLUMNS):
            if name in TIPS:
                self.horizontalHeaderItem(i).setToolTip(TIPS[name])
        self.bar = AdvantageBar(self)
        self.setItemDelegateForColumn(COLUMNS.index("Advantage"), self.bar)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(24)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setWordWrap(False)
        self.setTextElideMode(Qt.TextElideMode.ElideLeft)  # a completion's end is where it differs
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        widths = [30, 200, 106, 64, 52, 60, 56, 126, 56, 70, 90]
        for i, w in enumerate(widths):
            self.setColumnWidth(i, w)

    def column(self, name: str) -> int:
        return COLUMNS.index(name)

    def show_rows(self, rows: list, show_custom: bool) -> None:
        """Fill the table with ScoredRollouts (keeps the selected row). Items are made once per
        row and their text updated afterwards: making 640 items took most of a recompute."""
        current = self.currentRow()
        self.setColumnHidden(self.column("Checker"), not show_custom)
        scored = [abs(r.advantage) for r in rows if r.advantage is not None]
        self.bar.scale = max(scored, default=1.0) or 1.0
        self.setUpdatesEnabled(False)
        try:
            if self.rowCount() != len(rows):
                self.setRowCount(len(rows))
            for k, row in enumerate(rows):
                self._fill_row(k, row)
        finally:
            self.setUpdatesEnabled(True)
        if rows:
            self.selectRow(min(max(current, 0), len(rows) - 1))

    def _fill_row(self, k: int, row) -> None:
        ro, adv, per_token = row.rollout, row.advantage, row.per_token
        arrow = "" if adv is None or abs(adv) < 1e-12 else ("↑ " if adv > 0 else "↓ ")
        cells = [
            str(row.index + 1),
            ro.label or _tail(ro.completion),
            row.extracted or _short_reason(row.reason),
            _fmt(row.parts.get("accuracy"), "g"),
            _fmt(row.parts.get("format"), "g"),
            _fmt(row.parts.get("custom"), "g") if "custom" in row.parts else "",
            _fmt(row.reward),
            "no score" if adv is None else ("0" if adv == 0 else f"{arrow}{adv:+.3f}"),
            str(ro.length) + (" (cut)" if ro.truncated else ""),
            "—" if per_token is None else f"{per_token:+.4f}",
            _share(row.format_advantage),
        ]
        tips = {1: ro.completion, 2: row.reason or "", 5: row.error or ""}
        for col, text in enumerate(cells):
            item = self.item(k, col)
            if item is None:
                item = QTableWidgetItem()
                if col in RIGHT_ALIGNED:
                    item.setTextAlignment(RIGHT)
                self.setItem(k, col, item)
            if item.text() != text:
                item.setText(text)
            if col in tips and item.toolTip() != tips[col]:
                item.setToolTip(tips[col])
        error_item = self.item(k, 5)
        error_item.setForeground(DOWN if row.error else self.palette().text())
        adv_item = self.item(k, 7)
        adv_item.setData(ADV_ROLE, adv)
        if adv is not None and abs(adv) > 1e-12:
            adv_item.setForeground(UP if adv > 0 else DOWN)
        else:
            adv_item.setForeground(self.palette().text())


def _share(value: float | None) -> str:
    """The From format cell: the format's part of the advantage ("0" when it adds nothing)."""
    if value is None:
        return "—"
    return "0" if abs(value) < 5e-4 else f"{value:+.3f}"


def _short_reason(reason: str | None) -> str:
    """The Final answer cell when none was read: "hedge: 381, 391", "none" (the tooltip and the
    detail pane have the checker's whole reason)."""
    if not reason:
        return "—"
    if reason.startswith("several answers: "):
        return "hedge: " + reason.removeprefix("several answers: ")
    return "none" if reason == "no final answer found" else reason


def _tail(text: str, limit: int = 300) -> str:
    """A completion on one line (its end: the cell elides on the left, where answers agree)."""
    flat = text.replace("\n", " ⏎ ")
    return flat if len(flat) <= limit else "…" + flat[-(limit - 1) :]


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
