"""The two histogram plots: the latest step's advantage histogram as coloured bars, and the heat
map of every step's histogram averaged down to about one column per pixel.

Both redraw only when their data changed. The bars' axes keep round limits (`sticky_limit`) so
they, and their grid, are laid out again only when the data outgrows them or shrinks well
inside them, not at every step. The heat map's columns are kept incrementally
(`decimate.MeanDecimator`): the mean of the shares over the steps of one pixel is the share
of all their rollouts, so a long run reads as the density it is.

Reads a `RunHistory`; pyqtgraph items only, laid out by view.py.
Try it: tests/ui/plots/test_plot_decimate.py.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg

from grpo_desktop.ui.plots.decimate import MeanDecimator
from grpo_desktop.ui.plots.kit import brush


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k that is at least `value` (> 0)."""
    exponent = math.floor(math.log10(value))
    for mantissa in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if mantissa * 10.0**exponent >= value * (1 - 1e-12):
            return mantissa * 10.0**exponent
    return 10.0 ** (exponent + 1)


def sticky_limit(current: float | None, needed: float) -> float:
    """An axis limit that grows at once to a round number but is kept while the data needs
    more than half of it: the axis (and its grid) is then laid out again only now and then."""
    if current is not None and 0.5 * current < needed <= current:
        return current
    return nice_ceiling(needed)


BAR_UP, BAR_DOWN, BAR_ZERO = brush("green", 200), brush("red", 200), brush("grey", 200)


class LatestHistogram:
    """The latest step's advantage histogram: green bars made more likely, red less, grey 0, on
    axis ranges that change only when the data outgrows them or shrinks well inside them."""

    def __init__(self, plot: pg.PlotItem, bars: pg.BarGraphItem, note: pg.TextItem) -> None:
        self.plot, self.bars, self.note = plot, bars, note
        self.clear()

    def clear(self) -> None:
        self.bars.setOpts(x=[], height=[])
        self.note.setText("")
        self._drawn = None
        self._half: float | None = None
        self._top: float | None = None

    def update(self, history) -> bool:
        latest = history.latest_histogram()
        if latest is None or latest is self._drawn:
            return False
        self._drawn = latest
        edges, counts = np.asarray(latest[0], dtype=float), np.asarray(latest[1], dtype=float)
        centers = (edges[:-1] + edges[1:]) / 2
        colors = [BAR_UP if c > 1e-9 else BAR_DOWN if c < -1e-9 else BAR_ZERO for c in centers]
        if float(edges[-1]) < 1e-3:  # every advantage is 0: one bar, on a readable scale
            centers, counts, colors = np.array([0.0]), np.array([counts.sum()]), [BAR_ZERO]
            edges = np.array([-1.0, 1.0])
            width = 0.1
            self.note.setText("all 0: no group had any spread")
        else:
            width = float(edges[1] - edges[0]) * 0.9
            self.note.setText("")
        self.bars.setOpts(x=centers, height=counts, width=width, brushes=colors, pen=None)
        half = sticky_limit(self._half, max(-float(edges[0]), float(edges[-1])))
        top = sticky_limit(self._top, max(float(counts.max()), 1.0))
        if (half, top) != (self._half, self._top):
            self.plot.setRange(xRange=(-half, half), yRange=(0, top), padding=0.05)
            self._half, self._top = half, top
        self.note.setPos(-half, top)
        return True


class HeatStrip:
    """The advantage heat map: an ImageItem with one column per step (its histogram's shares),
    averaged down to about one column per pixel and redrawn only when a row was added."""

    def __init__(self, image: pg.ImageItem) -> None:
        self.image = image
        self.decimator = MeanDecimator()
        self._source: tuple | None = None
        self._key: tuple | None = None

    def clear(self) -> None:
        self.image.clear()
        self.decimator.reset()
        self._source = self._key = None

    def update(self, history, width: int) -> bool:
        heat = history.advantage_heatmap()
        if heat is None:
            return False
        steps, half, grid = heat
        source = (history.epoch, half, grid.shape[1])  # a wider range re-bins every row
        key = (source, len(grid), width)
        if key == self._key:
            return False
        if source != self._source:
            self.decimator.reset()
        self._source, self._key = source, key
        shown = self.decimator(grid, width)
        self.image.setImage(shown, autoLevels=False, levels=(0, max(float(shown.max()), 1e-9)))
        x0 = float(steps[0]) - 0.5
        span = float(steps[-1] - steps[0]) + 1.0
        self.image.setRect(pg.QtCore.QRectF(x0, -half, span, 2 * half))
        return True
