"""Building blocks of the live plots: colours, EMA smoothing with a cache, one step plot, and
what keeps a repaint cheap.

`StepPlot` wraps a pyqtgraph PlotItem whose x axis is the training step: one PlotDataItem per
series and optional bands (a filled outline between two hidden curves), read from a `RunHistory`
and redrawn with `setData` only when asked (the view's timer) and only where the data, smoothing,
visible window or width changed (`Curve`), decimated to the pixels (`plots.decimate`).
`Smoother` applies TensorBoard-style debiased exponential smoothing, computing only the points
added since the last redraw. For a cheap repaint `ClippedAxis` paints its grid with a clip
rectangle, `cache_static` keeps axes and titles as pixmaps (`uncached` for exports),
`follow_range` moves the x range in jumps, and `Curve._draw` drops antialiasing, dashes and wide
pens where a curve is too dense to show them (the figures: bench/README.md, gui_latency.py).

No Qt widgets here beyond pyqtgraph items; the layout is in view.py. Try it:
tests/ui/plots/test_plots_long.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QGraphicsScene

from grpo_desktop.ui.plots.decimate import MinMaxDecimator, ema

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
    """Debiased EMA per series, extended incrementally; NaN inputs stay NaN (gaps).

    `source` names what the values come from (the history's epoch): when it changes, or the
    series got shorter, that series is smoothed again from its start."""

    def __init__(self) -> None:
        self.weight = 0.0
        self._cache: dict[str, tuple[Hashable, int, float, int, np.ndarray]] = {}

    def set_weight(self, weight: float) -> None:
        if weight != self.weight:
            self.weight = weight
            self._cache.clear()

    def reset(self) -> None:
        self._cache.clear()

    def __call__(self, key: str, y: np.ndarray, source: Hashable = None) -> np.ndarray:
        w = self.weight
        if w <= 0 or len(y) == 0:
            return y
        cached = self._cache.get(key)
        if cached is None or cached[0] != source or cached[1] > len(y):
            cached = (source, 0, 0.0, 0, np.zeros(0))
        _, done, state, count, out = cached
        if len(y) > done:
            new, state, count = ema(y[done:], w, state, count)
            if len(y) > len(out):  # grow the buffer geometrically: appends stay O(new points)
                grown = np.empty(max(len(y), 2 * len(out), 64))
                grown[:done] = out[:done]
                out = grown
            out[done : len(y)] = new
        self._cache[key] = (source, len(y), state, count, out)
        return out[: len(y)]


def steps_version(history) -> Hashable:
    """What a per-step series' data depends on besides the epoch: the number of steps."""
    return history.num_steps


@dataclass
class Curve:
    """One PlotDataItem fed from the history: source → smoothing → decimation → setData, done
    again only when the key (source, data version, width, visible window) moved."""

    item: pg.PlotDataItem
    get: Callable  # history -> (x, y), x ascending
    smooth_key: str = ""  # "" = never smoothed
    version: Callable = steps_version  # history -> value that changes when the data does
    append_only: bool = True  # False: any data change redraws from scratch (held-out results)
    finite_only: bool = False  # drop NaN points (band edges: a fill cannot have gaps)
    decimator: MinMaxDecimator = field(default_factory=MinMaxDecimator)
    drawn: tuple[np.ndarray, np.ndarray] | None = None  # what setData last got
    style: Qt.PenStyle = Qt.PenStyle.SolidLine  # the pen asked for (drawn so when sparse)
    pen_width: float | None = None
    _thin: bool = False
    _source: tuple | None = None
    _key: tuple | None = None

    def clear(self) -> None:
        self.item.setData([], [])
        self.decimator.reset()
        self.drawn = self._source = self._key = None

    def update(self, history, smoother: Smoother, width: int, x_range=None) -> bool:
        """Redraw if anything it depends on changed; True when it did."""
        x, y = self.get(history)
        version = self.version(history)
        weight = smoother.weight if self.smooth_key else 0.0
        source = (history.epoch, weight) + (() if self.append_only else (version,))
        if source != self._source:
            self.decimator.reset()
            self._source = source
        window = None
        if x_range is not None and len(x):
            i0 = max(0, int(np.searchsorted(x, x_range[0])) - 1)  # one point beyond each edge
            i1 = min(len(x), int(np.searchsorted(x, x_range[1], side="right")) + 1)
            window = None if (i0, i1) == (0, len(x)) else (i0, i1)
        key = (source, version, width, window)
        if key == self._key:
            return False
        if self.smooth_key:
            y = smoother(self.smooth_key, y, history.epoch)
        xd, yd = self.decimator(x, y, width, window)
        if self.finite_only:
            keep = np.isfinite(yd)
            xd, yd = xd[keep], yd[keep]
        self.drawn, self._key = (xd, yd), key
        self._draw(xd, yd, width)
        return True

    def _draw(self, x: np.ndarray, y: np.ndarray, width: int) -> None:
        """setData, with antialiasing, the dash pattern and the pen's width only where they show.

        A sparse curve (at least 1 / ANTIALIAS_MAX_PER_PIXEL pixels per point) is drawn as
        designed. A denser one is drawn without antialiasing or dashes (invisible there), and,
        when it is a scribble (noisy data: its strokes climb more than SCRIBBLE_TRAVEL times the
        plot's width in total), with a 1 px pen: its one-pixel columns then fill the same band a
        wide pen fills. What each costs: bench/README.md (gui_latency.py)."""
        pen = self.item.opts["pen"]
        sparse = len(x) <= ANTIALIAS_MAX_PER_PIXEL * width
        if pen is not None and pen.style() != Qt.PenStyle.NoPen:
            if self.pen_width is None:
                self.style, self.pen_width = pen.style(), pen.widthF()
            travel = 0.0 if sparse else self._travel(y, width)
            self._thin = travel > SCRIBBLE_TRAVEL * (0.5 if self._thin else 1.0)  # hysteresis
            style = self.style if sparse else Qt.PenStyle.SolidLine
            px = 1.0 if self._thin else self.pen_width
            if pen.style() != style or pen.widthF() != px:
                pen = pg.mkPen(pen)
                pen.setStyle(style)
                pen.setWidthF(px)
                self.item.setPen(pen)
        self.item.setData(x, y, antialias=sparse, skipFiniteCheck=not np.isnan(y).any())

    def _travel(self, y: np.ndarray, width: int) -> float:
        """Vertical distance the curve covers, in pixels of its view, per pixel of width."""
        vb = self.item.getViewBox()
        if vb is None or len(y) < 2:
            return 0.0
        lo, hi = vb.viewRange()[1]
        if not hi > lo:
            return 0.0
        climb = float(np.nansum(np.abs(np.diff(y))))
        return climb / (hi - lo) * vb.height() / max(1, width)


@dataclass
class Series:
    key: str
    label: str
    get: Callable  # history -> (x, y)
    item: pg.PlotDataItem
    smooth: bool = True
    curve: Curve | None = None


@dataclass
class Band:
    key: str
    lower: Callable  # history -> (x, y)
    upper: Callable
    curves: tuple
    fill: QGraphicsPathItem
    smooth: bool = True
    edges: tuple[Curve, Curve] | None = None


@dataclass
class StepPlot:
    """One plot over steps: its item, its series and bands, what its hover readout says."""

    name: str
    plot: pg.PlotItem
    series: list[Series] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    fraction: bool = False
    cursor: pg.InfiniteLine | None = None
    title: str = ""

    def show_key(self) -> None:
        """Name the series after the title, each in its colour and line style: a legend box
        inside the plot would hide the data under it."""
        keys = []
        for s in self.series:
            p = s.item.opts["pen"]
            if s.item.opts.get("symbol"):
                mark = {"t": "▼", "s": "■"}.get(s.item.opts["symbol"], "●")
            else:
                mark = "╌╌" if p.style() == Qt.PenStyle.DashLine else "━━"
            keys.append(f"<span style='color:{p.color().name()}'>{mark}&nbsp;{s.label}</span>")
        key = "&nbsp;&nbsp;".join(keys)
        set_title(
            self.plot, f"{self.title}&nbsp;&nbsp;&nbsp;<span style='font-size:8pt'>{key}</span>"
        )

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
        version: Callable = steps_version,
        append_only: bool = True,
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
        s.curve = Curve(
            item,
            get,
            f"{self.name}/{key}" if smooth else "",
            version,
            append_only,
        )
        self.series.append(s)
        return s

    def add_band(self, key: str, lower: Callable, upper: Callable, color: str) -> Band:
        # The edges hold the data (no pen: never drawn); the fill's path is made from their
        # data in one go (`fill_path`). (A FillBetweenItem linked to pen-less curves got empty
        # paths from them: the band never showed.)
        curves = tuple(pg.PlotDataItem([], [], pen=None, connect="finite") for _ in range(2))
        for c in curves:
            _fast(c)
            self.plot.addItem(c)
        fill = QGraphicsPathItem()  # a plain Qt item: painting it calls no Python
        fill.setBrush(brush(color))
        fill.setPen(pg.mkPen(None))
        self.plot.addItem(fill, ignoreBounds=True)
        fill.setZValue(-10)
        b = Band(key, lower, upper, curves, fill)
        b.edges = tuple(
            Curve(c, get, f"{self.name}/{key}/{side}", finite_only=True)
            for c, get, side in ((curves[0], lower, "lo"), (curves[1], upper, "hi"))
        )
        b.edges[0].decimator = MinMaxDecimator("min")  # the band covers at least the data's
        b.edges[1].decimator = MinMaxDecimator("max")
        self.bands.append(b)
        return b

    def clear(self) -> None:
        for s in self.series:
            s.curve.clear()
        for b in self.bands:
            for edge in b.edges:
                edge.clear()
            b.fill.setPath(fill_path(None, None))

    def redraw(self, history, smoother: Smoother, width: int = 400, x_range=None) -> bool:
        """Push new data to the curves that need it; `x_range` is the visible (lo, hi) steps when
        zoomed in (None: the whole run). True when anything was redrawn."""
        changed = False
        for s in self.series:
            changed |= s.curve.update(history, smoother, width, x_range)
        for b in self.bands:
            moved = [edge.update(history, smoother, width, x_range) for edge in b.edges]
            if any(moved):
                b.fill.setPath(fill_path(b.edges[0].drawn, b.edges[1].drawn))
                changed = True
        return changed

    def data_range(self) -> tuple[float, float] | None:
        """(min, max) of the finite values drawn, bands included (decimation keeps every
        bucket's extremes, so this is the range of the visible data)."""
        lo, hi = np.inf, -np.inf
        curves = [s.curve for s in self.series] + [e for b in self.bands for e in b.edges]
        for curve in curves:
            if curve.drawn is not None and len(curve.drawn[1]):
                y = curve.drawn[1]
                lo, hi = (
                    min(lo, np.nanmin(y, initial=np.inf)),
                    max(hi, np.nanmax(y, initial=-np.inf)),
                )
        return (float(lo), float(hi)) if lo <= hi else None

    def readout(self, history, step: int) -> str:
        """'label value, label value' at `step`, for the hover line."""
        parts = []
        for s in self.series:
            x, y = s.get(history)
            hits = np.nonzero(x == step)[0]
            if len(hits) and np.isfinite(y[hits[-1]]):
                parts.append(f"{s.label} {format_value(float(y[hits[-1]]))}")
        return ", ".join(parts)


def set_title(plot: pg.PlotItem, html: str) -> None:
    """Set a plot's title without letting its width widen the plot's column. pyqtgraph makes a
    title's text width its minimum and preferred width (`LabelItem.updateMin`, run on every
    change of the text), so plots with long titles (a key of their series) would squeeze the
    others: the label's own hook is wrapped once to report no width."""
    label = plot.titleLabel
    if not getattr(label, "_narrow", False):
        measure = label.updateMin

        def update_min() -> None:
            measure()
            label.setMinimumWidth(0)
            for hint in (Qt.SizeHint.MinimumSize, Qt.SizeHint.PreferredSize):
                label._sizeHint[hint] = (0, label._sizeHint[hint][1])
            label.updateGeometry()

        label.updateMin = update_min
        label._narrow = True
    link = getattr(label, "help_link", "")  # the "?" that opens Help (plots/help_links.py)
    plot.setTitle(link + html, size="10pt")
    label.text = html  # what the title says, without the link


def fill_path(lower, upper) -> pg.QtGui.QPainterPath:
    """The closed outline between two drawn edges (x, y): along the lower one, back along the
    upper one."""
    if lower is None or upper is None or len(lower[0]) < 2 or len(upper[0]) < 2:
        return pg.QtGui.QPainterPath()
    x = np.concatenate([lower[0], upper[0][::-1]])
    y = np.concatenate([lower[1], upper[1][::-1]])
    path = pg.arrayToQPath(x, y, connect="all")
    path.closeSubpath()
    return path


def follow_range(lo: float, hi: float, current: tuple[float, float]) -> tuple[float, float] | None:
    """The x range that shows steps lo..hi while a run grows, or None to keep `current`.

    A new range leaves room on the right for the next steps (3 pads of 2 % of the run, or a
    quarter of it, up to 10 steps, early on), and `current` is kept while the run fits in it
    with at least half a pad to spare: every new range re-lays every axis and grid and moves
    every curve, a full repaint."""
    pad = max(0.5, (hi - lo) * 0.02)
    room = max(3 * pad, min(10.0, 0.25 * (hi - lo)))
    left, right = current
    if lo - 2 * pad <= left <= lo - pad / 2 and hi + pad / 2 <= right <= hi + room + pad:
        return None
    return lo - pad, hi + room


def sticky_range(lo: float, hi: float, current: tuple[float, float]) -> tuple[float, float] | None:
    """The y range for data in lo..hi, or None to keep `current`.

    A new range has round limits (multiples of a 1-2-5 step, about a quarter of the data's span,
    with 2 % of margin), and `current` is kept while it holds the data and the data fills more
    than half of it: the axis and its grid are then laid out again only when the data crosses a
    round number, not at every step. A constant series gets ±half its value (±1 at 0)."""
    if hi - lo <= 1e-9 * max(1.0, abs(hi)):  # pyqtgraph would show a meaningless ±0.5
        half = abs(hi) * 0.5 if hi else 1.0
        new = (hi - half, hi + half)
        return None if np.allclose(current, new, rtol=1e-9, atol=1e-12) else new
    left, right = current
    if left <= lo and hi <= right and hi - lo > 0.5 * (right - left):
        return None
    margin = 0.02 * (hi - lo)
    step = 10.0 ** math.floor(math.log10((hi - lo) / 4))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= (hi - lo) / 4 * (1 - 1e-9))
    return math.floor((lo - margin) / step) * step, math.ceil((hi + margin) / step) * step


class ClippedAxis(pg.AxisItem):
    """An axis (and its grid lines) painted with a clip rectangle around it: Qt's raster engine
    draws lines far faster with a clip set than with none, and a full repaint of the view paints
    with none (the figures: bench/README.md, gui_latency.py). Same pixels."""

    def paint(self, p, opt, widget) -> None:
        p.save()
        op = Qt.ClipOperation.IntersectClip if p.hasClipping() else Qt.ClipOperation.ReplaceClip
        p.setClipRect(self.boundingRect().adjusted(-1, -1, 1, 1), op)
        try:
            super().paint(p, opt, widget)
        finally:
            p.restore()


def clipped_axes() -> dict[str, ClippedAxis]:
    return {"left": ClippedAxis("left"), "bottom": ClippedAxis("bottom")}


STATIC_CACHE = QGraphicsItem.CacheMode.DeviceCoordinateCache


def cache_static(plot: pg.PlotItem) -> None:
    """Keep what rarely changes (the axes with their grid, the title) as pixmaps, so a repaint
    blits them instead of replaying their text."""
    for name in ("left", "bottom"):
        plot.getAxis(name).setCacheMode(STATIC_CACHE)
    plot.titleLabel.item.setCacheMode(STATIC_CACHE)


@contextmanager
def uncached(scene: QGraphicsScene) -> Iterator[None]:
    """Every item drawn directly while exporting (an SVG gets vectors and text, not pixmaps)."""
    items = [it for it in scene.items() if it.cacheMode() != QGraphicsItem.CacheMode.NoCache]
    modes = [it.cacheMode() for it in items]
    for it in items:
        it.setCacheMode(QGraphicsItem.CacheMode.NoCache)
    try:
        yield
    finally:
        for it, mode in zip(items, modes):
            it.setCacheMode(mode)


ANTIALIAS_MAX_PER_PIXEL = 0.5  # denser curves: no antialiasing, no dashes (see Curve._draw)
SCRIBBLE_TRAVEL = 4.0  # a dense curve climbing more than this per pixel of width: 1 px pen


def _fast(item: pg.PlotDataItem) -> None:
    """The curve gets data already decimated to the pixels: no pyqtgraph downsampling or
    clipping on top (they would redo work over the data at every range change)."""
    item.setDownsampling(ds=1, auto=False)
    item.setClipToView(False)


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
