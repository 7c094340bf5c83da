"""Which groups teach: the chance that a group of G answers carries any signal, as a chart.

A group teaches only when it holds at least one success and one failure; for a problem the model
solves with probability p that chance is 1 − p^G − (1 − p)^G. The chart draws it against p for
the chosen G (slider or spin box, 2…16) over faint curves for G = 2, 4, 8, 16; a line you drag
(or the p box) picks a problem's p; the table beside it lists every G for a hard (3 %) and an
easy (70 %) problem and for your p. Math: engine/lab/answers.py.
Try it: Learn ▸ GRPO Lab, the signal tab; tests/ui/lab/test_lab.py.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSlider,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.lab.answers import G_RANGE, signal_probability
from grpo_desktop.ui.common.widgets import wrapped_label
from grpo_desktop.ui.plots.kit import PALETTE

LESSON_PS = (0.03, 0.70)
GUIDE_GS = (2, 4, 8, 16)
POINTS = 201
HIGHLIGHT = QColor("#e8f1fb")

HELP = (
    "A group teaches only when it holds at least one success and one failure: if every answer "
    "scores the same, every advantage is 0 and the step does nothing. For a problem the model "
    "solves with probability p, a group of G answers has both with chance 1 − p<sup>G</sup> − "
    "(1 − p)<sup>G</sup>. "
    "Problems the model nearly always or nearly never solves waste their steps; bigger groups "
    "find the rare success more often, at the price of more answers generated per step."
)


def _curve(G: int) -> tuple[list[float], list[float]]:
    ps = [i / (POINTS - 1) for i in range(POINTS)]
    return [100 * p for p in ps], [100 * signal_probability(p, G) for p in ps]


class SignalChartView(QWidget):
    """P(signal) against p for a chosen G, a draggable p, and the table for every G."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.g_slider = QSlider(Qt.Orientation.Horizontal)
        self.g_slider.setRange(*G_RANGE)
        self.g_slider.setValue(4)
        self.g_slider.setToolTip("Group size G: how many answers are sampled per problem.")
        self.g_spin = QSpinBox(minimum=G_RANGE[0], maximum=G_RANGE[1], value=4)
        self.g_spin.setToolTip(self.g_slider.toolTip())
        self.p_spin = QDoubleSpinBox(minimum=0.0, maximum=100.0, singleStep=1.0, value=10.0)
        self.p_spin.setDecimals(1)
        self.p_spin.setSuffix(" %")
        self.p_spin.setToolTip(
            "p: how often the model solves the problem on one attempt. Drag the line on the chart "
            "or type a value."
        )
        self.readout = QLabel()
        self.readout.setWordWrap(True)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.legend.setToolTip("What the lines on the chart are.")
        self.readout.setToolTip("The chance that one group of G answers to this problem teaches.")

        self.plot = pg.PlotWidget(background="w")
        item = self.plot.getPlotItem()
        item.setTitle("Chance that a group carries signal", color="#333333", size="10pt")
        item.setLabel("left", "P(signal)", units="%")
        item.setLabel("bottom", "p: how often the model solves the problem", units="%")
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setXRange(0, 100, padding=0.01)
        item.setYRange(0, 100, padding=0.02)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        faint = pg.mkPen(PALETTE["grey"], width=1, style=Qt.PenStyle.DashLine)
        self.guides = [item.plot(*_curve(G), pen=faint) for G in GUIDE_GS]
        self.curve = item.plot([], [], pen=pg.mkPen(PALETTE["blue"], width=3))
        self.p_line = pg.InfiniteLine(
            pos=self.p_spin.value(),
            angle=90,
            movable=True,
            bounds=(0, 100),
            pen=pg.mkPen(PALETTE["orange"], width=2),
            hoverPen=pg.mkPen(PALETTE["red"], width=3),
        )
        self.p_line.setToolTip("Drag to choose the problem's p.")
        item.addItem(self.p_line)
        self.dot = pg.ScatterPlotItem(size=10, brush=pg.mkBrush(PALETTE["orange"]), pen=None)
        item.addItem(self.dot)

        self.table = QTableWidget(G_RANGE[1] - G_RANGE[0] + 1, 4)
        self.table.setHorizontalHeaderLabels(["G", "hard: p = 3 %", "easy: p = 70 %", "your p"])
        tips = [
            "Group size.",
            "The lesson's hard problem: solved 3 % of the time.",
            "The lesson's easy problem: solved 70 % of the time.",
            "The p chosen on the chart.",
        ]
        for i, tip in enumerate(tips):
            self.table.horizontalHeaderItem(i).setToolTip(tip)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setToolTip("Click a row to chart that group size.")
        for row, G in enumerate(range(G_RANGE[0], G_RANGE[1] + 1)):
            self.table.setItem(row, 0, self._cell(str(G)))
            for col, p in enumerate(LESSON_PS, start=1):
                self.table.setItem(row, col, self._cell(f"{100 * signal_probability(p, G):.1f} %"))
        self.table.resizeColumnsToContents()
        width = self.table.verticalHeader().width() + 2 * self.table.frameWidth() + 4
        width += sum(self.table.columnWidth(c) for c in range(4)) + 18  # room for a scroll bar
        self.table.setFixedWidth(width)

        controls = QHBoxLayout()
        for text, widget in (
            ("Group size G", self.g_slider),
            ("", self.g_spin),
            ("p", self.p_spin),
        ):
            if text:
                label = QLabel(text)
                label.setToolTip(widget.toolTip())
                controls.addWidget(label)
            controls.addWidget(widget, 2 if widget is self.g_slider else 0)
        left = QVBoxLayout()
        left.addLayout(controls)
        left.addWidget(self.readout)
        left.addWidget(self.legend)
        left.addWidget(self.plot, 1)
        body = QHBoxLayout()
        body.addLayout(left, 1)
        body.addWidget(self.table)
        layout = QVBoxLayout(self)
        layout.addLayout(body, 1)
        layout.addWidget(wrapped_label(HELP, muted=True))

        self.g_slider.valueChanged.connect(self.g_spin.setValue)
        self.g_spin.valueChanged.connect(self.g_slider.setValue)
        self.g_spin.valueChanged.connect(self._redraw)
        self.p_spin.valueChanged.connect(self._on_p_spin_value_changed)
        self.p_line.sigPositionChanged.connect(self._on_p_line_moved)
        self.table.cellClicked.connect(self._on_table_cell_clicked)
        self._redraw()

    @staticmethod
    def _cell(text: str) -> QTableWidgetItem:
        item = QTableWidgetItem(text)
        item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
        return item

    @property
    def G(self) -> int:  # noqa: N802 (GRPO's name for it)
        return self.g_spin.value()

    @property
    def p(self) -> float:
        return self.p_spin.value() / 100

    def set_group_size(self, G: int) -> None:  # noqa: N803
        self.g_spin.setValue(G)

    def set_p(self, p: float) -> None:
        self.p_spin.setValue(100 * p)

    def _on_p_spin_value_changed(self, value: float) -> None:
        if abs(self.p_line.value() - value) > 1e-9:
            self.p_line.setValue(value)
        self._redraw()

    def _on_p_line_moved(self, line) -> None:
        value = round(line.value(), 1)
        if abs(self.p_spin.value() - value) > 1e-9:
            self.p_spin.setValue(value)

    def _on_table_cell_clicked(self, row: int, _col: int) -> None:
        self.g_spin.setValue(G_RANGE[0] + row)

    def _redraw(self, *_args) -> None:
        G, p = self.G, self.p
        self.curve.setData(*_curve(G))
        self.legend.setText(
            f"<span style='color:{PALETTE['blue']}'><b>━━</b></span>&nbsp;G = {G} (chosen)"
            f"&nbsp;&nbsp;&nbsp;<span style='color:{PALETTE['grey']}'>┄┄</span>&nbsp;G = 2, 4, 8, "
            "16 (the higher the curve, the bigger G)&nbsp;&nbsp;&nbsp;"
            f"<span style='color:{PALETTE['orange']}'>●</span>&nbsp;your p (drag the line)"
        )
        chance = signal_probability(p, G)
        self.dot.setData([100 * p], [100 * chance])
        self.readout.setText(
            f"A group of {G} on a problem solved {100 * p:.1f} % of the time carries signal "
            f"{100 * chance:.1f} % of the time: about {self._one_in(chance)}."
        )
        bold = QFont(self.table.font())
        bold.setBold(True)
        for row, g in enumerate(range(G_RANGE[0], G_RANGE[1] + 1)):
            self.table.setItem(row, 3, self._cell(f"{100 * signal_probability(p, g):.1f} %"))
            chosen = g == G
            for col in range(4):
                cell = self.table.item(row, col)
                cell.setBackground(QBrush(HIGHLIGHT) if chosen else QBrush())
                cell.setFont(bold if chosen else self.table.font())
        self.table.scrollToItem(self.table.item(G - G_RANGE[0], 0))

    @staticmethod
    def _one_in(chance: float) -> str:
        if chance <= 0:
            return "never: every step on it is wasted"
        if chance >= 0.995:
            return "nearly every step teaches"
        steps = 1 / chance
        return f"one step in {steps:.0f} teaches" if steps >= 1.5 else "most steps teach"
