"""The plots on a long run (5,000 steps): curves are decimated to the pixels yet keep every
extreme, hover still reads the exact values, zooming in shows the raw points, "Show all steps"
and smoothing redraw, nothing is redrawn when nothing changed, a step reaches every plot within
a few timer ticks, an SVG export stays vector; and bench/gui_latency.py runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QObject, QPointF, Signal
from PySide6.QtWidgets import QGraphicsItem

from grpo_desktop.engine.events import EvalResult, RunStarted, StepMetrics
from grpo_desktop.session.history import RunHistory
from grpo_desktop.ui.plots.decimate import ema
from grpo_desktop.ui.plots.kit import format_value
from grpo_desktop.ui.plots.view import PlotsView
from tests.support.paths import ROOT

N = 5_000
NO_CACHE = QGraphicsItem.CacheMode.NoCache


class Model(QObject):
    """What PlotsView reads of the session model."""

    session_replaced = Signal()
    step_focused = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.history = RunHistory()

    def focus_step(self, step: int) -> None:
        self.step_focused.emit(step)


def step(s: int, rng: np.random.Generator) -> StepMetrics:
    metrics = {
        "reward": float(rng.normal(0.5, 0.2)) + (3.0 if s == 1_234 else 0.0),  # one spike
        "reward_std": 0.1,
        "rewards/accuracy/mean": float(rng.random()),
        "kl": float(abs(rng.normal(0.01, 0.005))),
        "loss": float(rng.normal(0, 0.01)),
        "learning_rate": 1e-3,
        "completions/mean_length": 50.0 + s / 100,
        "completions/min_length": 40.0,
        "completions/max_length": 60.0 + s / 100,
    }
    hist = {"edges": [-1.0, 0.0, 1.0], "counts": [int(rng.integers(0, 5)), 3]}
    return StepMetrics(s, N, metrics, hist)


@pytest.fixture
def view(qtbot):
    model = Model()
    v = PlotsView(model)
    qtbot.addWidget(v)
    v.resize(1000, 700)
    v.show()
    v.timer.stop()  # the test redraws by hand
    rng = np.random.default_rng(0)
    model.history.append(RunStarted("t", {}, 0, N, "cpu", "m"))
    for s in range(1, N + 1):
        model.history.append(step(s, rng))
        if s % 500 == 0:
            model.history.append(EvalResult(s, s / N, 1.0, 8))
    qtbot.waitExposed(v)
    v.redraw()
    return v


def drawn(v: PlotsView, plot: str = "reward", series: int = 0):
    return v.plots[plot].series[series].item.getOriginalDataset()


def test_curves_are_decimated_but_keep_every_extreme(view):
    history = view.history
    x, y = drawn(view)
    width = view.plots["reward"].plot.vb.width()
    assert len(x) <= 4 * width + 4  # at most 2 buckets per pixel, 2 points each, plus the ends
    reward = history.metric("reward")
    assert y.max() == reward.max() and y.min() == reward.min()  # the spike at step 1234 too
    assert (x[0], y[0]) == (1, reward[0]) and (x[-1], y[-1]) == (N, reward[-1])
    ex, ey = drawn(view, "eval")
    assert list(ex) == [500 * i for i in range(1, 11)]  # few points: drawn as they are


def test_hover_reads_the_exact_value_of_a_step(view):
    plot = view.plots["reward"].plot
    value = float(view.history.metric("reward")[1_233])
    view._on_scene_mouse_moved(plot.vb.mapViewToScene(QPointF(1_234.2, value)))
    assert "Step 1234" in view.readout.text() and format_value(value) in view.readout.text()


def test_zooming_in_shows_the_raw_points_and_show_all_steps_goes_back(view, qtbot):
    plot = view.plots["reward"].plot
    plot.vb.setXRange(1_000, 1_100, padding=0)
    plot.vb.sigRangeChangedManually.emit([True, False])  # a wheel over the x axis reports so
    qtbot.waitUntil(lambda: len(drawn(view)[0]) < 200, timeout=3_000)
    x, y = drawn(view)
    assert list(x) == list(range(999, 1_102))  # one point beyond each edge
    assert np.array_equal(y, view.history.metric("reward")[998:1_101])
    assert drawn(view, "kl")[0][0] == 999  # the linked plots follow
    lo, hi = plot.vb.viewRange()[1]  # y fits the visible steps (the spike at 1234 is not there)
    assert lo <= y.min() and y.max() <= hi < view.history.metric("reward").max()
    view.fit_button.click()
    assert drawn(view)[0][-1] == N and len(drawn(view)[0]) < 1_000


def test_smoothing_redraws_the_decimated_ema(view):
    view.smoothing.setValue(90)
    view.redraw()
    smoothed, _, _ = ema(view.history.metric("reward"), 0.9)
    x, y = drawn(view)
    assert y[-1] == pytest.approx(smoothed[-1]) and y.max() == pytest.approx(smoothed.max())


def test_nothing_is_redrawn_when_nothing_changed_and_one_step_redraws_the_curves(view):
    curve = view.plots["reward"].series[0].curve
    width = curve._key[2]  # what the view decimated for
    assert not curve.update(view.history, view.smoother, width)  # same data, width, window
    before = drawn(view)[0]
    view.redraw()
    assert drawn(view)[0] is before
    view.history.append(StepMetrics(N + 1, N + 1, {"reward": 0.5}, {}))
    view.redraw()
    assert drawn(view)[0][-1] == N + 1


def test_svg_export_is_the_same_with_the_axes_cached_as_pixmaps(view, tmp_path):
    def export(name: str) -> str:
        path = view.export_plot(view.plots["reward"].plot, "Reward", "svg", str(tmp_path / name))
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    cached = [it for it in view.canvas.scene().items() if it.cacheMode() != NO_CACHE]
    assert cached  # the axes and titles are cached as pixmaps on screen
    with_cache = export("cached.svg")
    for it in cached:
        it.setCacheMode(NO_CACHE)
    without = export("plain.svg")
    assert with_cache.count("<text") == without.count("<text") > 5  # tick labels stay text
    assert with_cache.count("<image") == without.count("<image")  # no axis became a picture


def test_the_timer_spreads_a_step_over_a_few_ticks_and_no_plot_starves(view):
    rng = np.random.default_rng(1)
    last = lambda name: drawn(view, name)[0][-1]  # noqa: E731
    view.history.append(step(N + 1, rng))
    view._on_timer_timeout()  # one tick: the first 4 of the 13 plots
    assert last("reward") == N + 1 and last("grad_norm") == N
    for s in range(N + 2, N + 10):  # then a step at every tick, faster than a round of ticks
        view.history.append(step(s, rng))
        view._on_timer_timeout()
    # 12 plots and the histograms, 4 a tick: each is at most 4 ticks behind (held-out accuracy
    # and the heat map have no per-step curve).
    assert all(last(name) >= N + 9 - 4 for name in view.plots if name not in ("eval", "heat"))


def test_the_gui_latency_bench_runs_and_the_event_loop_paints_every_redraw(tmp_path):
    out = tmp_path / "gui.json"
    bench = Path(ROOT) / "bench" / "gui_latency.py"
    args = ["--skip-training", "--history", "300", "--redraws", "2", "--json", str(out)]
    subprocess.run(
        [sys.executable, str(bench), *args], check=True, timeout=120, capture_output=True
    )
    r = json.loads(out.read_text())["redraw"]
    assert r["history_steps"] == 300 and r["median"]["n"] == 2
    assert r["event_loop"]["without_paint"] == 0  # each timed redraw was followed by a paint


def test_titles_name_the_series_and_the_kl_plot_says_why_it_is_empty(qtbot):
    model = Model()
    v = PlotsView(model)
    qtbot.addWidget(v)
    v.show()
    v.timer.stop()
    rng = np.random.default_rng(0)
    assert not v.kl_note.isVisible()
    model.history.append(RunStarted("a", {"algorithm": {"beta": 0.0}}, 0, 3, "cpu", "m"))
    for s in (1, 2, 3):
        m = step(s, rng)
        del m.metrics["kl"]  # the engine logs no KL when beta is 0
        model.history.append(m)
    v.redraw()
    assert v.kl_note.isVisible() and "β = 0" in v.kl_note.toPlainText()
    title = v.plots["reward"].plot.titleLabel.text  # the reward part got its key in the title
    assert title.startswith("Reward") and "reward</span>" in title and "accuracy</span>" in title
    assert v.plots["reward"].plot.legend is None  # no legend box over the data
    v.resize(940, 620)
    qtbot.waitExposed(v)
    qtbot.wait(50)
    widths = {round(sp.plot.geometry().width()) for sp in v.plots.values()}
    assert max(widths) - min(widths) <= 2, widths  # long titles do not squeeze other columns
    model.history.append(RunStarted("b", {"algorithm": {"beta": 0.04}}, 0, 3, "cpu", "m"))
    model.history.append(step(1, rng))
    v.redraw()
    assert not v.kl_note.isVisible()
