"""Building blocks of the live plots: colours, EMA smoothing with a cache, and one step plot.

`StepPlot` wraps a pyqtgraph PlotItem whose x axis is the training step: it holds one
PlotDataItem per series and optional bands (a FillBetweenItem between two hidden curves), reads
its data from a `RunHistory` and redraws with `setData` only when asked (the view's timer).
`Smoother` applies TensorBoard-style debiased exponential smoothing, computing only the points
added since the last redraw.

No Qt widgets here beyond pyqtgraph items; the layout is in plots.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg

PALETTE = {
    "blue": "#1f6fd1",
    "green": "#2e9d52",
    "orange": "#e07b00",
    "purple": "#8e44ad",
    "red": "#c0392b",
    "teal": "#138d90",
    "grey": "#7f8c8d",
}
PART_COLORS = ["green", "orange", "purple", "teal", "red"]


def pen(color: str, width: float = 2.0, style=None) -> pg.QtGui.QPen:
    p = pg.mkPen(PALETTE.get(color, color), width=width)
    if style is not None:
        p.setStyle(style)
    return p


def brush(color: str, alpha: int = 50) -> pg.QtGui.QBrush:
    c = pg.mkColor(PALETTE.get(color, color))
    c.setAlpha(alpha)
    return pg.mkBrush(c)


class Smoother:
    """Debiased EMA per series, extended incrementally; NaN inputs stay NaN (gaps)."""

    def __init__(self) -> None:
        self.weight = 0.0
        self._cache: dict[str, tuple[int, float, float, list[float]]] = {}

    def set_weight(self, weight: float) -> None:
        if weight != self.weight:
            self.weight = weight
            self._cache.clear()

    def reset(self) -> None:
        self._cache.clear()

    def __call__(self, key: str, y: np.ndarray) -> np.ndarray:
        w = self.weight
        if w <= 0 or len(y) == 0:
            return y
        done, state, norm, out = self._cache.get(key, (0, 0.0, 0.0, []))
        if done > len(y):  # the history was truncated: start over
            done, state, norm, out = 0, 0.0, 0.0, []
        values = y[done:].tolist()
        for v in values:
            if math.isnan(v):
                out.append(math.nan)
                continue
            state = w * state + (1 - w) * v
            norm = w * norm + (1 - w)
            out.append(state / norm)
        self._cache[key] = (len(y), state, norm, out)
        return np.asarray(out, dtype=float)


@dataclass
class Series:
    key: str
    label: str
    get: Callable  # history -> (x, y)
    item: pg.PlotDataItem
    smooth: bool = True


@dataclass
class Band:
    key: str
    lower: Callable  # history -> (x, y)
    upper: Callable
    curves: tuple
    fill: pg.FillBetweenItem
    smooth: bool = True


@dataclass
class StepPlot:
    """One plot over steps: its item, its series and bands, what its hover readout says."""

    name: str
    plot: pg.PlotItem
    series: list[Series] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    fraction: bool = False
    cursor: pg.InfiniteLine | None = None

    def add_series(
        self,
        key: str,
        label: str,
        get: Callable,
        color: str,
        *,
        width: float = 2.0,
        symbol: str | None = None,
        smooth: bool = True,
        style=None,
    ) -> Series:
        item = self.plot.plot(
            [],
            [],
            pen=pen(color, width, style),
            name=label,
            connect="finite",
            symbol=symbol,
            symbolSize=6,
            symbolBrush=PALETTE.get(color, color),
            symbolPen=None,
        )
        _fast(item)
        s = Series(key, label, get, item, smooth)
        self.series.append(s)
        return s

    def add_band(self, key: str, lower: Callable, upper: Callable, color: str) -> Band:
        curves = tuple(pg.PlotDataItem([], [], pen=None, connect="finite") for _ in range(2))
        for c in curves:
            _fast(c)
        fill = pg.FillBetweenItem(curves[0], curves[1], brush=brush(color))
        for c in curves:
            self.plot.addItem(c)  # drawn with no pen: they only give the fill its edges and bounds
        self.plot.addItem(fill, ignoreBounds=True)
        fill.setZValue(-10)
        b = Band(key, lower, upper, curves, fill)
        self.bands.append(b)
        return b

    def redraw(self, history, smoother: Smoother) -> None:
        for s in self.series:
            x, y = s.get(history)
            if s.smooth:
                y = smoother(f"{self.name}/{s.key}", y)
            set_curve(s.item, x, y)
        for b in self.bands:
            for curve, getter, side in ((b.curves[0], b.lower, "lo"), (b.curves[1], b.upper, "hi")):
                x, y = getter(history)
                if b.smooth:
                    y = smoother(f"{self.name}/{b.key}/{side}", y)
                finite = np.isfinite(y)
                set_curve(curve, x[finite], y[finite])

    def readout(self, history, step: int) -> str:
        """'label value, label value' at `step`, for the hover line."""
        parts = []
        for s in self.series:
            x, y = s.get(history)
            hits = np.nonzero(x == step)[0]
            if len(hits) and np.isfinite(y[hits[-1]]):
                parts.append(f"{s.label} {format_value(float(y[hits[-1]]))}")
        return ", ".join(parts)


DOWNSAMPLE_FACTOR = 1.5  # samples per pixel (pyqtgraph's default 5 draws far more than shows)
ANTIALIAS_MAX_POINTS = 2000  # longer curves are drawn without antialiasing (5x faster to paint)


def _fast(item: pg.PlotDataItem) -> None:
    """Draw only what the pixels can show: peak downsampling, clipped to the view."""
    item.setDownsampling(auto=True, method="peak")
    item.opts["autoDownsampleFactor"] = DOWNSAMPLE_FACTOR
    item.setClipToView(True)


def set_curve(item: pg.PlotDataItem, x: np.ndarray, y: np.ndarray) -> None:
    item.setData(x, y, antialias=len(x) <= ANTIALIAS_MAX_POINTS)


def format_value(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 1e-3:
        return f"{v:.3g}"
    return f"{v:.3f}".rstrip("0").rstrip(".")


def metric(name: str, scale: float = 1.0) -> Callable:
    def get(history):
        y = history.metric(name)
        return history.steps, (y * scale if scale != 1.0 else y)

    return get


def metric_sum(a: str, b: str, sign: float) -> Callable:
    def get(history):
        return history.steps, history.metric(a) + sign * history.metric(b)

    return get
