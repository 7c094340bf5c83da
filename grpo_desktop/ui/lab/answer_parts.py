"""What the answer lab shows of one GRPO step: the scored group, the update, the plots.

`GroupTable` lists the answers sampled in the group (how often, reward, advantage, pushed up /
down / no signal, in words and colour), `UpdateTable` every answer's logit change and its
probability before → after, `ProbabilityPlots` each answer's probability over the steps and the
KL to the start. They only draw a `LabStep` (engine/lab/answers.py) or the lab's history; the
controls and the stepping live in answer_lab.py. Try it: tests/ui/lab/test_lab.py.
"""

from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.lab.answers import ANSWERS, RIGHT, LabStep
from grpo_desktop.ui.plots.kit import PALETTE

ANSWER_COLORS = (PALETTE["green"], PALETTE["red"], PALETTE["orange"], PALETTE["purple"])
ANSWER_LABELS = ("408 (right)", "398", "418", "398 or 408 (hedge)")
UP, DOWN, FLAT = QColor("#e3f4e8"), QColor("#fbe4e1"), QColor("#eeeeee")
UP_TEXT, DOWN_TEXT, FLAT_TEXT = QColor("#1b6b36"), QColor("#9b2c20"), QColor("#555555")


def signed(x: float, digits: int = 3) -> str:
    """+1.732 / −0.577 (a real minus sign); "0" for what rounds to zero (no "−0.000")."""
    if abs(x) < 0.5 * 10**-digits:
        return "0"
    text = f"{x:+.{digits}f}"
    return text.replace("-", "−")


def num(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:.0f}"


def percent(p: float) -> str:
    return f"{100 * p:.1f} %"


def mean_formula(step: LabStep) -> str:
    G = len(step.rewards)
    total = sum(step.rewards)
    if G <= 8:
        terms = " + ".join(num(r) for r in step.rewards)
        return f"mean = ({terms}) ÷ {G} = {num(step.mean)}"
    return f"mean = {num(total)} ÷ {G} = {num(step.mean)}"


def std_formula(step: LabStep) -> str:
    G = len(step.rewards)
    squares = sum((r - step.mean) ** 2 for r in step.rewards)
    return f"std = √({num(squares, 4)} ÷ {G}) = {step.std:.3f}"


ROW_HEIGHT = 24


def _setup(table: QTableWidget, headers: list[str], tips: list[str], stretch: int) -> None:
    """A read-only table: header tooltips, no row numbers, no selection, fixed row height,
    columns that fit their text except `stretch`, which takes the room left."""
    table.setHorizontalHeaderLabels(headers)
    for i, tip in enumerate(tips):
        table.horizontalHeaderItem(i).setToolTip(tip)
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
    table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    height = header.sizeHint().height() + len(ANSWERS) * ROW_HEIGHT + 2 * table.frameWidth()
    table.setFixedHeight(height)


def _item(text: str, tip: str = "", align=Qt.AlignmentFlag.AlignCenter) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setTextAlignment(align | Qt.AlignmentFlag.AlignVCenter)
    if tip:
        item.setToolTip(tip)
    return item


def _answer_item(k: int) -> QTableWidgetItem:
    item = _item(ANSWER_LABELS[k], align=Qt.AlignmentFlag.AlignLeft)
    item.setForeground(QBrush(QColor(ANSWER_COLORS[k])))
    font = item.font()
    font.setBold(True)
    item.setFont(font)
    return item


class GroupTable(QTableWidget):
    """One row per answer that the group holds: times sampled, reward, advantage, verdict."""

    HEADERS = ["Answer", "Sampled", "Reward", "Advantage", "What this step does to it"]
    TIPS = [
        "An answer the model wrote (the lab's model writes one of four whole answers).",
        "How many of the group's G answers were this one.",
        "The checker's score: 1 right, 0 wrong. The sloppy checker also pays the hedge.",
        "(reward − group mean) ÷ group std: how much better than its group this answer did.",
        "Positive advantage: made more likely. Negative: less likely. 0: no change.",
    ]

    def __init__(self, parent: QWidget | None = None):
        super().__init__(0, len(self.HEADERS), parent)
        _setup(self, self.HEADERS, self.TIPS, stretch=4)

    def show_step(self, step: LabStep | None) -> None:
        self.setRowCount(0)
        if step is None:
            return
        for k in range(len(ANSWERS)):
            n = step.times_sampled[k]
            if not n:
                continue
            i = step.group.index(k)
            reward, adv = step.rewards[i], step.advantages[i]
            row = self.rowCount()
            self.insertRow(row)
            self.setItem(row, 0, _answer_item(k))
            self.setItem(row, 1, _item(f"× {n}"))
            self.setItem(row, 2, _item(num(reward)))
            if step.has_signal:
                tip = f"({num(reward)} − {num(step.mean)}) ÷ {step.std:.3f} = {signed(adv)}"
            else:
                tip = "Every answer in the group scored the same: std 0, advantage 0."
            self.setItem(row, 3, _item(signed(adv), tip))
            if adv > 0:
                verdict, bg, fg = "pushed up: made more likely", UP, UP_TEXT
            elif adv < 0:
                verdict, bg, fg = "pushed down: made less likely", DOWN, DOWN_TEXT
            else:
                verdict, bg, fg = "no signal: unchanged", FLAT, FLAT_TEXT
            cell = _item(verdict, align=Qt.AlignmentFlag.AlignLeft)
            cell.setBackground(QBrush(bg))
            cell.setForeground(QBrush(fg))
            self.setItem(row, 4, cell)
            self.item(row, 3).setBackground(QBrush(bg))


class UpdateTable(QTableWidget):
    """Every answer: its push from the advantages, β's pull, the logit change, before → after."""

    HEADERS = ["Answer", "Push: lr × Σ advantages ÷ G", "β pull", "Logit change", "Before", "After"]
    TIPS = [
        "All four answers the model can write.",
        "How far the group's advantages move this answer's logit (its score before softmax).",
        "−lr × β × ∂KL/∂logit: the KL penalty pulling the answer back toward the starting model.",
        "The total move of this answer's logit this step.",
        "The answer's probability before this step.",
        "Its probability after: softmax of the new logits.",
    ]
    BETA_COLUMN = 2

    def __init__(self, parent: QWidget | None = None):
        super().__init__(len(ANSWERS), len(self.HEADERS), parent)
        _setup(self, self.HEADERS, self.TIPS, stretch=1)
        for k in range(len(ANSWERS)):
            self.setItem(k, 0, _answer_item(k))

    def show_start(self, probs: tuple[float, ...]) -> None:
        """Only the current probabilities (before any step of this view)."""
        self.setColumnHidden(self.BETA_COLUMN, True)
        for k, p in enumerate(probs):
            for col in (1, 2, 3, 5):
                self.setItem(k, col, _item(""))
            self.setItem(k, 4, _item(percent(p)))

    def show_step(self, step: LabStep) -> None:
        self.setColumnHidden(self.BETA_COLUMN, step.beta == 0)
        G = len(step.group)
        for k in range(len(ANSWERS)):
            total = step.advantage_sums[k]
            push = step.lr * step.pg_gradient[k]
            if step.times_sampled[k] and step.has_signal:
                shown = signed(total)
                if total < 0:
                    shown = f"({shown})"
                text = f"{num(step.lr)} × {shown} ÷ {G} = {signed(push)}"
            else:
                text = "0 (not sampled)" if not step.times_sampled[k] else "0 (no signal)"
            self.setItem(k, 1, _item(text, align=Qt.AlignmentFlag.AlignLeft))
            pull = -step.lr * step.beta * step.kl_grad[k]
            self.setItem(k, 2, _item(signed(pull)))
            change = step.logit_changes[k]
            self.setItem(k, 3, _item(signed(change)))
            self.setItem(k, 4, _item(percent(step.probs_before[k])))
            before, after = step.probs_before[k], step.probs_after[k]
            arrow = "▲" if after > before + 5e-7 else "▼" if after < before - 5e-7 else ""
            cell = _item(f"{percent(after)} {arrow}".strip())
            color = UP_TEXT if arrow == "▲" else DOWN_TEXT if arrow == "▼" else FLAT_TEXT
            cell.setForeground(QBrush(color))
            font = cell.font()
            font.setBold(True)
            cell.setFont(font)
            self.setItem(k, 5, cell)


class ProbabilityPlots(QWidget):
    """Each answer's probability (%) over the steps, and the KL to the starting model."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.probs_plot = pg.PlotWidget(background="w")
        item = self.probs_plot.getPlotItem()
        item.setTitle("Probability of each answer", color="#333333", size="10pt")
        item.setLabel("left", "probability", units="%")
        item.setLabel("bottom", "step")
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setYRange(0, 100, padding=0.02)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        self.curves = [
            item.plot(
                [],
                [],
                pen=pg.mkPen(ANSWER_COLORS[k], width=2.5 if k in (RIGHT, 3) else 2),
            )
            for k in range(len(ANSWERS))
        ]
        self.kl_plot = pg.PlotWidget(background="w")
        kl_item = self.kl_plot.getPlotItem()
        kl_item.setTitle("KL to the starting model (nats)", color="#333333", size="10pt")
        kl_item.setLabel("bottom", "step")
        kl_item.showGrid(x=True, y=True, alpha=0.15)
        kl_item.setMouseEnabled(x=False, y=False)
        kl_item.hideButtons()
        self.kl_curve = kl_item.plot([], [], pen=pg.mkPen(PALETTE["blue"], width=2))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.legend = QLabel(
            "&nbsp;&nbsp;&nbsp;".join(
                f"<span style='color:{c}'>&#9632;</span>&nbsp;{html.escape(t)}"
                for c, t in zip(ANSWER_COLORS, ANSWER_LABELS)
            )
        )
        self.legend.setToolTip("The colour of each answer, in the tables and the plot.")
        layout.addWidget(self.legend)
        layout.addWidget(self.probs_plot, 3)
        layout.addWidget(self.kl_plot, 2)

    def show_history(self, probs: list[tuple[float, ...]], kl: list[float]) -> None:
        steps = list(range(len(probs)))
        dots = len(probs) <= 30  # each step a dot while they are few (and the start is visible)
        for k, curve in enumerate(self.curves):
            color = ANSWER_COLORS[k]
            curve.setData(
                steps,
                [100 * p[k] for p in probs],
                symbol="o" if dots else None,
                symbolSize=5,
                symbolPen=None,
                symbolBrush=color,
            )
        self.kl_curve.setData(steps, kl)
        right = max(10, len(probs) - 1)
        self.probs_plot.getPlotItem().setXRange(0, right, padding=0.02)
        self.kl_plot.getPlotItem().setXRange(0, right, padding=0.02)
        self.kl_plot.getPlotItem().setYRange(0, max(0.05, max(kl) * 1.1), padding=0)
