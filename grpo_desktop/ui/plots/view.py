"""Live training plots: reward (±std and each part), held-out accuracy, no-signal groups, the
advantage histogram and its heat map over steps, completion length, truncation, KL, loss,
entropy, learning rate and gradient norm.

One GraphicsLayoutWidget holds every plot; the step plots share (link) their x axis. Each series
is one PlotDataItem updated with `setData` by a 10 Hz timer only when the history changed, so a
burst of events costs one redraw; a new step reaches the plots a few at a time over the next
ticks (a short stall each instead of one long one), a new run all at once. Curves draw their
data decimated to the pixels (kit.py, decimate.py). Hovering shows the exact values at that
step and a cursor line on every plot, both gone once the mouse leaves the plots; clicking a point asks the session model to show that
step's rollouts; right-click a plot to save it as PNG or SVG. The smoothing slider applies a
debiased EMA; a dashed, labelled line marks each health alarm's step (markers.py). Another
session (opened, new or closed) starts from fresh axes: the whole run on x, y fitted to its data,
nothing of the previous session's zoom or ranges.

Reads only the session model's `RunHistory`; never touches the worker or other panels.
Try it: tests/ui/plots/test_plots_long.py; `python bench/gui_latency.py` times the redraw.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.help.topics import plot_anchor
from grpo_desktop.ui.plots.export import render_plot
from grpo_desktop.ui.plots.help_links import PlotHelpLinks
from grpo_desktop.ui.plots.hist import HeatStrip, LatestHistogram
from grpo_desktop.ui.plots.kit import (
    PALETTE,
    PART_COLORS,
    Smoother,
    StepPlot,
    cache_static,
    clipped_axes,
    follow_range,
    format_value,
    metric,
    metric_sum,
    set_title,
    sticky_range,
    uncached,
)
from grpo_desktop.ui.plots.markers import AlarmMarkers

REDRAW_MS = 100
PLOTS_PER_TICK = 4  # a new step reaches the 13 plots within 4 ticks of the redraw timer
HISTOGRAMS = "histograms"  # the latest step's histogram and the heat map, as one redraw item
MIN_PLOT_PX = 100  # decimate for at least this width (a plot not laid out yet is 0 wide)
PLOT_ROWS = 4
MIN_PLOT_HEIGHT = 150  # px per grid row, title and axis included: below it the grid scrolls
MIN_PLOT_WIDTH = 230
EMPTY_HINT = (
    "No run yet. Press Start (Ctrl+R) to train: every curve gains a point per step. Hover a plot "
    "for values; click a point to see that step's rollouts."
)
HOVER_HINT = "Hover a plot for values; click a point to see that step's rollouts."
TIPS = {
    "reward": "Mean reward of the step's answers, the band ± the mean spread inside groups, and "
    "each reward part (unweighted). Rising reward alone is not learning: compare with held-out "
    "accuracy.",
    "eval": "Accuracy on held-out problems with greedy answers: the side evaluation the reward "
    "cannot game. Reward up while this stays flat means reward hacking.",
    "zero": "Share of groups whose answers all scored the same. Their advantages are 0, so they "
    "teach nothing; near 1 the step was wasted.",
    "hist": "Advantages of the latest step's rollouts. Green answers are made more likely, red "
    "less likely; a single bar at 0 means no group had any spread.",
    "heat": "Advantage histograms of every step (darker = more rollouts). A band at 0 only means "
    "steps without signal.",
    "length": "Completion length in tokens: mean, with the min–max range. Growing length with flat "
    "accuracy is the length bias of the grpo loss.",
    "truncated": "Share of completions cut off at the length limit (orange): near 1, answers never "
    "finish. In red, the share your custom checker failed on (raised, hung or returned no "
    "number): those answers got no score from it.",
    "kl": "KL divergence from the starting model (only with β > 0).",
    "loss": "The GRPO loss. With one update per batch it hovers near 0 and says little; watch "
    "reward and accuracy instead.",
    "entropy": "How spread the model's next-token choices are. A fast drop means answers become "
    "identical (and groups lose their spread).",
    "lr": "The learning rate of each step (warm-up and schedule).",
    "grad_norm": "Size of each update before clipping. Spikes warn of instability.",
}


def _eval(index: int):
    def get(history):
        series = history.eval_series()
        return series[0], series[index]

    return get


def _evals_version(history) -> list:
    return history.evals  # a new list whenever a result is added or replaced


# Shares: 0 and 1 with room for a marker's radius, so points at 0 % or 100 % are not cut off.
FRACTION_RANGE = (-0.04, 1.06)
KL_OFF_NOTE = "β = 0: no KL penalty in this run,\nso there is nothing to plot here."


class PlotsView(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.smoother = Smoother()
        self._drawn_version = -1
        self.last_redraw_s = 0.0
        self._parts: set[str] = set()
        self.follow = True  # keep the x range on the whole run until the user zooms or pans
        self._auto_y: dict[str, bool] = {}  # plots whose y range follows the data (not zoomed)

        self.readout = QLabel(EMPTY_HINT)
        self.readout.setWordWrap(True)
        self.readout.setMinimumHeight(32)
        self.smoothing = QSlider(Qt.Orientation.Horizontal)
        self.smoothing.setRange(0, 99)
        self.smoothing.setFixedWidth(140)
        self.smoothing.setToolTip(
            "Smoothing: an exponential moving average of the curves (0 = raw values). Helps see "
            "the trend of noisy rewards."
        )
        self.smoothing_label = QLabel("Smoothing 0.00")
        top = QHBoxLayout()
        top.addWidget(self.readout, 1)
        top.addWidget(self.smoothing_label)
        top.addWidget(self.smoothing)
        self.fit_button = QPushButton("Show all steps")
        self.fit_button.setToolTip("Zoom back out to the whole run and follow new steps again")
        self.fit_button.setEnabled(False)
        top.addWidget(self.fit_button)
        self.csv_button = QPushButton("Export CSV…")
        self.csv_button.setToolTip(
            "Save every step's metrics and the held-out results as a CSV file. To save one plot as "
            "PNG or SVG, right-click it."
        )
        top.addWidget(self.csv_button)

        pg.setConfigOptions(antialias=True, background="w", foreground="#333333")
        self.canvas = pg.GraphicsLayoutWidget()
        self.canvas.ci.setSpacing(12)
        self.plots: dict[str, StepPlot] = {}
        self._build()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        # On a small screen the grid keeps readable plots and scrolls (the wheel over a plot
        # zooms it; over the scroll bar, or with the plots at their minimum, it scrolls).
        self.canvas.setMinimumSize(3 * MIN_PLOT_WIDTH, PLOT_ROWS * MIN_PLOT_HEIGHT)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.scroll.setWidget(self.canvas)
        layout.addWidget(self.scroll, 1)

        self.smoothing.valueChanged.connect(self._on_smoothing_value_changed)
        self.canvas.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        self.canvas.scene().sigMouseClicked.connect(self._on_scene_mouse_clicked)
        self.canvas.installEventFilter(self)  # the mouse leaving: no hover readout or cursor
        self.canvas.viewport().installEventFilter(self)
        self.fit_button.clicked.connect(self._on_fit_button_clicked)
        self.csv_button.clicked.connect(lambda: self.export_history_csv())
        for sp in self.plots.values():
            sp.plot.vb.sigRangeChangedManually.connect(
                partial(self._on_view_range_changed_manually, sp.name)
            )
        self._drawn_epoch = -1  # the history epoch drawn (a new run is drawn all at once)
        self._stale: list[str] = []  # plots still to redraw for the latest version, by name
        self._view_timer = QTimer(self, singleShot=True, interval=0)
        self._view_timer.timeout.connect(self._on_view_timer_timeout)
        for sp in self.plots.values():  # zoom, pan and resize re-decimate what is visible
            sp.plot.vb.sigXRangeChanged.connect(self._on_view_x_range_changed)
            sp.plot.vb.sigResized.connect(self._on_view_changed)
        self.timer = QTimer(self, interval=REDRAW_MS)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.timer.start()
        model.session_replaced.connect(self._on_model_session_replaced)

    @property
    def history(self):
        """The session's run history (another object once another session is opened)."""
        return self.model.history

    def _on_model_session_replaced(self) -> None:
        self.smoother.reset()
        self.follow = True
        self.fit_button.setEnabled(False)
        self._drawn_version = -1
        self._drawn_epoch = -1  # the new history is drawn whole, on fresh axes
        self._stale = []
        self.clear_hover()
        self._reset_axes()

    def _reset_axes(self) -> None:
        """Forget the previous session's ranges and zoom: y follows the data again on every
        plot (shares keep 0..1), the heat map auto-ranges, the histogram's limits are set by
        its next step, and x shows 0..10 until the new history is drawn (_fit_x_range then
        fits its steps)."""
        for name, sp in self.plots.items():
            if name in self._auto_y:
                self._auto_y[name] = not sp.fraction
            if sp.fraction:
                sp.plot.setYRange(*FRACTION_RANGE, padding=0)
            elif name == "heat":
                sp.plot.enableAutoRange(axis="y", enable=True)
            else:
                sp.plot.setYRange(0, 1, padding=0)
        self.latest_hist.clear()  # its sticky limits too: the new step sets them afresh
        self.heat.clear()
        self.plots["reward"].plot.setXRange(0, 10, padding=0)

    # ------------------------------------------------------------------ layout

    def _new_plot(self, name: str, title: str, row: int, col: int, tip: str = "") -> StepPlot:
        item = self.canvas.addPlot(row=row, col=col, axisItems=clipped_axes())
        set_title(item, title)
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setMenuEnabled(True)
        item.hideButtons()
        item.getAxis("left").setWidth(48)
        if tip:
            item.setToolTip(tip)
        sp = StepPlot(name, item, title=title)
        self._add_export_actions(item, title)
        self.plots[name] = sp
        return sp

    def _build(self) -> None:
        reward = self._new_plot("reward", "Reward", 0, 0, TIPS["reward"])
        reward.add_band(
            "std",
            metric_sum("reward", "reward_std", -1),
            metric_sum("reward", "reward_std", 1),
            "blue",
        )
        reward.add_series("reward", "reward", metric("reward"), "blue", width=2.5)
        reward.show_key()
        ev = self._new_plot("eval", "Held-out accuracy", 0, 1, TIPS["eval"])
        held_out = {"smooth": False, "version": _evals_version, "append_only": False}
        ev.add_series("accuracy", "accuracy", _eval(1), "red", symbol="o", **held_out)
        ev.add_series("format", "format", _eval(2), "grey", symbol="t", width=1.5, **held_out)
        ev.show_key()
        ev.fraction = True
        zero = self._new_plot("zero", "No-signal groups", 0, 2, TIPS["zero"])
        zero.add_series("zero", "no-spread groups", metric("frac_reward_zero_std"), "purple")
        zero.fraction = True

        self.hist_plot = self.canvas.addPlot(row=1, col=0, axisItems=clipped_axes())
        set_title(self.hist_plot, "Advantages, latest step")
        self.hist_plot.setToolTip(TIPS["hist"])
        self.hist_plot.showGrid(y=True, alpha=0.15)
        self.hist_plot.hideButtons()
        self.hist_plot.getAxis("left").setWidth(48)
        self.hist_plot.setLabel("bottom", "advantage")
        self.hist_bars = pg.BarGraphItem(x=[], height=[], width=0.1)
        self.hist_plot.addItem(self.hist_bars)
        self.hist_note = pg.TextItem("", color="#7f4c00", anchor=(0, 0))
        self.hist_plot.addItem(self.hist_note, ignoreBounds=True)
        self.latest_hist = LatestHistogram(self.hist_plot, self.hist_bars, self.hist_note)
        self._add_export_actions(self.hist_plot, "Advantages, latest step")
        heat = self._new_plot("heat", "Advantages by step", 1, 1, TIPS["heat"])
        self.heat_image = pg.ImageItem()
        self.heat_image.setColorMap(_heat_colormap())
        heat.plot.addItem(self.heat_image)
        self.heat = HeatStrip(self.heat_image)
        length = self._new_plot("length", "Length (tokens)", 1, 2, TIPS["length"])
        length.add_band(
            "range", metric("completions/min_length"), metric("completions/max_length"), "teal"
        )
        length.add_series("mean", "mean", metric("completions/mean_length"), "teal")

        simple = [
            ("truncated", "Truncated", "completions/clipped_ratio", "orange"),
            ("kl", "KL", "kl", "purple"),
            ("loss", "Loss", "loss", "grey"),
            ("entropy", "Entropy", "entropy", "green"),
            ("lr", "Learning rate", "learning_rate", "blue"),
            ("grad_norm", "Grad norm", "grad_norm", "red"),
        ]
        for i, (name, title, key, color) in enumerate(simple):
            sp = self._new_plot(name, title, 2 + i // 3, i % 3, TIPS[name])
            sp.add_series(name, title.lower(), metric(key), color)
            sp.fraction = name == "truncated"
        # Checker failures are shares of answers too: next to truncation, in red.
        errors = self.plots["truncated"]
        errors.add_series("checker_errors", "checker errors", metric("checker_error_rate"), "red")
        errors.show_key()
        master = self.plots["reward"].plot
        for name, sp in self.plots.items():
            if name != "reward":
                sp.plot.setXLink(master)
            if sp.fraction:
                sp.plot.setYRange(*FRACTION_RANGE, padding=0)
            if name != "heat":  # y follows the data with round limits (_fit_y_ranges)
                sp.plot.enableAutoRange(axis="y", enable=False)
                self._auto_y[name] = not sp.fraction
            sp.cursor = pg.InfiniteLine(angle=90, pen=pg.mkPen("#999999", width=1))
            sp.cursor.setVisible(False)
            sp.plot.addItem(sp.cursor, ignoreBounds=True)
        # With β = 0 the loss has no KL term and the engine logs none: say so in the empty plot.
        self.kl_note = pg.TextItem(KL_OFF_NOTE, color="#7f4c00", anchor=(0, 0))
        self.kl_note.setParentItem(self.plots["kl"].plot.vb)  # placed in pixels, not in data
        self.kl_note.setPos(6, 4)
        self.kl_note.setVisible(False)
        self.markers = AlarmMarkers(self.plots)  # a dashed line at each alert's step
        titled = {plot_anchor(n): sp.plot for n, sp in self.plots.items()}
        titled[plot_anchor("hist")] = self.hist_plot
        self.help_links = PlotHelpLinks(titled, self.canvas, self)  # a "?" in each title
        for plot in [sp.plot for sp in self.plots.values()] + [self.hist_plot]:
            cache_static(plot)
        for row in range(PLOT_ROWS):
            self.canvas.ci.layout.setRowStretchFactor(row, 1)
        for col in range(3):  # equal columns, whatever the titles' widths
            self.canvas.ci.layout.setColumnStretchFactor(col, 1)

    def _add_export_actions(self, item: pg.PlotItem, title: str) -> None:
        menu = item.vb.menu
        menu.addSeparator()
        menu.addAction("Save this plot as PNG…").triggered.connect(
            lambda: self.export_plot(item, title, "png")
        )
        menu.addAction("Save this plot as SVG…").triggered.connect(
            lambda: self.export_plot(item, title, "svg")
        )

    def help_anchor(self) -> str | None:
        """The Help entry of the plot under the mouse (F1 over a plot opens it)."""
        return self.help_links.hovered

    # ------------------------------------------------------------------ redraw

    def _ensure_parts(self) -> None:
        for fn in self.history.reward_functions():
            if fn not in self._parts:
                color = PART_COLORS[len(self._parts) % len(PART_COLORS)]
                self.plots["reward"].add_series(
                    f"part/{fn}",
                    fn,
                    metric(f"rewards/{fn}/mean"),
                    color,
                    width=1.5,
                    style=Qt.PenStyle.DashLine,
                )
                self._parts.add(fn)
                self.plots["reward"].show_key()

    def _on_timer_timeout(self) -> None:
        """A new step is drawn over a few ticks, PLOTS_PER_TICK plots at a time, so the event
        loop stalls for a fraction of a full repaint at once (a new run: all at once)."""
        if not self.isVisible():
            return
        if self.history.epoch != self._drawn_epoch:
            self.redraw()
        elif self.history.version != self._drawn_version and self._begin_redraw():
            # Plots still waiting for the previous version go first: none starves when steps
            # arrive faster than a round of ticks.
            rest = [name for name in [*self.plots, HISTOGRAMS] if name not in self._stale]
            self._stale = self._stale + rest
        batch, self._stale = self._stale[:PLOTS_PER_TICK], self._stale[PLOTS_PER_TICK:]
        if batch:
            self._redraw_some(batch)

    def redraw(self) -> None:
        """Push the history into every plot at once (the timer spreads this over ticks)."""
        t0 = time.perf_counter()
        self._stale = []
        if self._begin_redraw():
            self._redraw_some([*self.plots, HISTOGRAMS])
        self.last_redraw_s = time.perf_counter() - t0

    def _begin_redraw(self) -> bool:
        """What a new version of the history needs first; False when there is nothing to draw."""
        self._drawn_version, self._drawn_epoch = self.history.version, self.history.epoch
        if self.history.num_steps == 0 and not self.history.evals:
            self._clear()
            return False
        self._ensure_parts()
        self.markers.update(self.history.alerts)
        self._fit_x_range()
        config = (self.history.run or {}).get("config") or {}
        beta_off = config.get("algorithm", {}).get("beta", 1.0) == 0
        logged = "kl" in self.history.metric_names()
        self.kl_note.setVisible(beta_off and not logged)
        if self.readout.text() == EMPTY_HINT:
            self.readout.setText(HOVER_HINT)
        return True

    def _redraw_some(self, names: list[str]) -> None:
        plots = [self.plots[name] for name in names if name in self.plots]
        self._redraw_curves(plots)
        self._fit_y_ranges(plots)
        if HISTOGRAMS in names:
            self._redraw_histograms()

    def _redraw_curves(self, plots: list[StepPlot] | None = None) -> None:
        """Each curve decimated to its plot's width in device pixels and, when zoomed in, to
        the visible steps; curves whose input did not change are left alone."""
        x_range = None if self.follow else tuple(self.plots["reward"].plot.vb.viewRange()[0])
        ratio = self.canvas.devicePixelRatioF()
        for sp in self.plots.values() if plots is None else plots:
            width = max(MIN_PLOT_PX, int(sp.plot.vb.width() * ratio))
            sp.redraw(self.history, self.smoother, width, x_range)

    def _on_view_x_range_changed(self, *_args) -> None:
        if not self.follow:  # following the run, the curves do not depend on the x range
            self._view_timer.start()

    def _on_view_changed(self, *_args) -> None:
        self._view_timer.start()  # once per pass of the event loop, however many views moved

    def _on_view_timer_timeout(self) -> None:
        if self.history.num_steps and self.isVisible():
            self._redraw_curves()
            self._fit_y_ranges(list(self.plots.values()))

    def _clear(self) -> None:
        self.smoother.reset()
        for sp in self.plots.values():
            sp.clear()
        self.latest_hist.clear()
        self.heat.clear()
        self.markers.clear()
        self.kl_note.setVisible(False)
        # No run yet: steps 0..10 on the x axes, not pyqtgraph's -0.5..0.5 around nothing.
        self.plots["reward"].plot.setXRange(0, 10, padding=0)
        self._stale = []
        self.follow = True
        self.fit_button.setEnabled(False)
        self.readout.setText(EMPTY_HINT)

    def _redraw_histograms(self) -> None:
        self.latest_hist.update(self.history)
        ratio = self.canvas.devicePixelRatioF()
        self.heat.update(
            self.history, max(MIN_PLOT_PX, int(self.plots["heat"].plot.vb.width() * ratio))
        )

    def _fit_x_range(self) -> None:
        """The whole run (held-out steps included) unless the user zoomed."""
        steps, ev = self.history.steps, self.history.eval_series()[0]
        ends = [float(a[i]) for a in (steps, ev) if len(a) for i in (0, -1)]  # both ascending
        if self.follow and ends:
            lo, hi = min(ends), max(ends)
            master = self.plots["reward"].plot
            new = follow_range(lo, hi, tuple(master.vb.viewRange()[0]))
            if new is not None:
                master.setXRange(*new, padding=0)

    def _fit_y_ranges(self, plots: list[StepPlot]) -> None:
        """Fit y to the data shown (the visible steps when zoomed in on x), with round limits
        that change only now and then (`sticky_range`), unless the user moved this plot's y."""
        for sp in plots:
            span = sp.data_range() if self._auto_y.get(sp.name) else None
            if span is not None:
                new = sticky_range(*span, tuple(sp.plot.vb.viewRange()[1]))
                if new is not None:
                    sp.plot.setYRange(*new, padding=0)

    def _on_view_range_changed_manually(self, name: str, mask) -> None:
        self.follow = False
        self.fit_button.setEnabled(True)
        if mask is None or (len(mask) > 1 and mask[1]):
            self._auto_y[name] = False  # the user set this plot's y: keep it
        self._view_timer.start()

    def _on_fit_button_clicked(self) -> None:
        self.follow = True
        self.fit_button.setEnabled(False)
        for name, sp in self.plots.items():
            if name in self._auto_y:
                self._auto_y[name] = not sp.fraction
            if sp.fraction:
                sp.plot.setYRange(*FRACTION_RANGE, padding=0)
        self._fit_x_range()
        self._redraw_curves()  # the whole run again, not the window that was zoomed in on
        self._fit_y_ranges(list(self.plots.values()))

    def _on_smoothing_value_changed(self, value: int) -> None:
        weight = value / 100
        self.smoothing_label.setText(f"Smoothing {weight:.2f}")
        self.smoother.set_weight(weight)
        self._drawn_epoch = -1  # every curve again, all at once on the next tick

    # ------------------------------------------------------------------ hover and click

    def _plot_at(self, pos) -> StepPlot | None:
        for sp in self.plots.values():
            if sp.plot.sceneBoundingRect().contains(pos):
                return sp
        return None

    def _nearest_step(self, sp: StepPlot, pos) -> int | None:
        steps = self.history.steps
        if len(steps) == 0:
            return None
        x = sp.plot.vb.mapSceneToView(pos).x()
        i = int(np.clip(np.searchsorted(steps, x), 1, len(steps) - 1)) if len(steps) > 1 else 0
        if i and abs(steps[i - 1] - x) <= abs(steps[i] - x):
            i -= 1
        return int(steps[i])

    def clear_hover(self) -> None:
        """No cursor line and the hint again in the readout: the mouse is not over a step."""
        for sp in self.plots.values():
            sp.cursor.setVisible(False)
        empty = self.history.num_steps == 0 and not self.history.evals
        self.readout.setText(EMPTY_HINT if empty else HOVER_HINT)

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.Leave and obj in (self.canvas, self.canvas.viewport()):
            self.clear_hover()
        return super().eventFilter(obj, event)

    def _on_scene_mouse_moved(self, pos) -> None:
        sp = self._plot_at(pos)
        step = self._nearest_step(sp, pos) if sp is not None else None
        if step is None:
            self.clear_hover()  # between plots, or over one with no step
            return
        for other in self.plots.values():
            other.cursor.setVisible(True)
            other.cursor.setValue(step)
        text = sp.readout(self.history, step)
        title = sp.title
        if sp.name == "heat":
            text = "click to see this step's rollouts"
        self.readout.setText(f"<b>Step {step}</b> · {title}: {text or 'no value'}")

    def _on_scene_mouse_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or event.double():
            return
        sp = self._plot_at(event.scenePos())
        step = self._nearest_step(sp, event.scenePos()) if sp is not None else None
        if step is not None:
            self.model.focus_step(step)

    # ------------------------------------------------------------------ export

    def export_history_csv(self, path: str | None = None) -> str:
        """Save the history as CSV (asks for the file when `path` is None); '' when nothing was."""
        if not self.history.num_steps:
            self.readout.setText("There is no history to export yet: run at least one step.")
            return ""
        if path is None:
            path, _ = QFileDialog.getSaveFileName(
                self, "Export history", "history.csv", "CSV (*.csv)"
            )
            if not path:
                return ""
        self.history.write_csv(path)
        return path

    def export_plot(self, item: pg.PlotItem, title: str, kind: str, path: str | None = None) -> str:
        """Save one plot as PNG or SVG (asks for the file when `path` is None)."""
        if path is None:
            default = title.lower().split(" (")[0].replace(" ", "-").replace(",", "") + f".{kind}"
            path, _ = QFileDialog.getSaveFileName(
                self, f"Save plot as {kind.upper()}", default, f"{kind.upper()} (*.{kind})"
            )
            if not path:
                return ""
        cursors = [(sp.cursor, sp.cursor.isVisible()) for sp in self.plots.values()]
        for cursor, _ in cursors:
            cursor.setVisible(False)  # the hover line is not part of the picture
        try:
            with uncached(self.canvas.scene()), self.help_links.hidden():  # no "?" in a file
                render_plot(self.canvas.scene(), item, title, kind, path)
        finally:
            for cursor, visible in cursors:
                cursor.setVisible(visible)
        return path


def _heat_colormap() -> pg.ColorMap:
    return pg.ColorMap([0.0, 0.35, 1.0], [(255, 255, 255), (120, 160, 220), (15, 50, 120)])


__all__ = ["PALETTE", "PlotsView", "format_value"]
