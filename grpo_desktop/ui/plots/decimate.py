"""What the live plots draw of a long series: peak-preserving min/max decimation to one or two
buckets per pixel, kept incrementally as steps arrive, and a vectorised debiased EMA.

`MinMaxDecimator` splits a series into buckets of k points (k a power of two, so that a bucket
never changes once complete and a coarser level is made by merging pairs) and keeps, per bucket,
where its minimum and its maximum are; both are drawn, in the order they occur, at the bucket's
centre, so every spike stays visible. The first and last points of the window are always drawn,
and a window of at most `RAW_PER_PIXEL` points per pixel is drawn as it is. Bands use the "min"
and "max" modes, so the filled area covers at least what the full band covers. `MeanDecimator`
averages rows of the heat map the same way. `ema(values, weight, state, count)` is TensorBoard's
debiased exponential smoothing, NaN-aware, in numpy.

Pure numpy; no Qt. Try it: tests/ui/plots/test_plot_decimate.py, or
    python -c "import numpy as np; from grpo_desktop.ui.plots.decimate import MinMaxDecimator; y = np.random.randn(10_000); print(len(MinMaxDecimator()(np.arange(10_000.), y, 300)[0]))"
"""

from __future__ import annotations

import math

import numpy as np

RAW_PER_PIXEL = 2.0  # up to this many points per pixel are drawn without decimation
MODES = ("minmax", "min", "max")


def bucket_size(points: int, width: int) -> int:
    """The power-of-two bucket size that leaves between `width` and 2·`width` buckets for
    `points` points, so that neighbouring buckets are never more than a pixel apart (1 when the
    points fit without decimation)."""
    width = max(1, int(width))
    if points <= RAW_PER_PIXEL * width:
        return 1
    return 1 << int(math.floor(math.log2(points / width)))


def _reduce(y: np.ndarray, start: int, count: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the minimum and maximum of `count` buckets of `k` points from `start`; an
    all-NaN bucket gives its first index (whose value is NaN: a gap) for both."""
    block = y[start : start + count * k].reshape(count, k)  # (count, k)
    nan = np.isnan(block)
    base = start + k * np.arange(count)  # (count,)
    lo = np.where(nan, np.inf, block).argmin(axis=1) + base
    hi = np.where(nan, -np.inf, block).argmax(axis=1) + base
    return lo, hi


def _merge(y: np.ndarray, idx: np.ndarray, pick_max: bool) -> np.ndarray:
    """Merge buckets pairwise (an even count): keep the index of the smaller (larger) value."""
    a, b = idx[0::2], idx[1::2]
    ya, yb = y[a], y[b]
    with np.errstate(invalid="ignore"):
        take_b = (yb > ya if pick_max else yb < ya) | (np.isnan(ya) & ~np.isnan(yb))
    return np.where(take_b, b, a)


class MinMaxDecimator:
    """Peak-preserving decimation of one series; see the module docstring.

    The caller owns invalidation: call `reset()` when points already seen may have changed
    (another history, a truncated run, another smoothing weight). Appending points is fine."""

    def __init__(self, mode: str = "minmax") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.reset()

    def reset(self) -> None:
        self.k = 0  # bucket size of the cached level (0: nothing cached)
        self.done = 0  # points folded into the complete cached buckets
        self._lo = np.zeros(0, dtype=np.intp)  # per bucket: index of its minimum
        self._hi = np.zeros(0, dtype=np.intp)  # per bucket: index of its maximum

    def __call__(
        self, x: np.ndarray, y: np.ndarray, width: int, window: tuple[int, int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) to draw for the points `window` = (first, end) of `x`, `y` (all by default)
        in a plot `width` pixels wide."""
        n = len(y)
        i0, i1 = window if window is not None else (0, n)
        i0, i1 = max(0, i0), min(n, i1)
        if i1 <= i0:
            return x[:0], y[:0]
        k = bucket_size(i1 - i0, width)
        if k == 1:
            return x[i0:i1], y[i0:i1]
        if i0 == 0 and i1 == n:
            lo, hi, tail = self._full(y, k)
            first = 0
        else:  # a zoomed window: from the raw points, bucket edges aligned on multiples of k
            first = (i0 // k) * k
            count = (i1 - first) // k
            lo, hi = _reduce(y, first, count, k)
            tail = first + count * k
        centre = first + k * np.arange(len(lo)) + (k - 1) // 2
        if tail < i1:  # the incomplete last bucket
            t_lo, t_hi = _reduce(y, tail, 1, i1 - tail)
            lo, hi = np.concatenate([lo, t_lo]), np.concatenate([hi, t_hi])
            centre = np.concatenate([centre, [(tail + i1 - 1) // 2]])
        # Each bucket is drawn at its centre: a vertical stroke from its first extreme to its
        # second, as the full curve's zigzag would fill that pixel column.
        if self.mode == "min":
            xi, yi = centre, lo
        elif self.mode == "max":
            xi, yi = centre, hi
        else:
            xi = np.repeat(centre, 2)
            yi = np.column_stack([np.minimum(lo, hi), np.maximum(lo, hi)]).ravel()
        xi = np.concatenate([[i0], xi, [i1 - 1]])  # the window's ends are always drawn
        yi = np.concatenate([[i0], yi, [i1 - 1]])
        return x[xi], y[yi]

    def _full(self, y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, int]:
        """The cached level at bucket size k, extended to the complete buckets of `y`."""
        n = len(y)
        if n < self.done or (self.k and k < self.k):
            self.reset()  # fewer points than cached (the caller forgot to reset) or finer level
        if not self.k:
            self.k = k
        while self.k < k:  # a coarser level: merge pairs of buckets
            even = len(self._lo) - len(self._lo) % 2
            self._lo = _merge(y, self._lo[:even], pick_max=False)
            self._hi = _merge(y, self._hi[:even], pick_max=True)
            self.k *= 2
            self.done = len(self._lo) * self.k
        count = (n - self.done) // k
        if count:
            lo, hi = _reduce(y, self.done, count, k)
            self._lo = np.concatenate([self._lo, lo])
            self._hi = np.concatenate([self._hi, hi])
            self.done += count * k
        return self._lo, self._hi, self.done


def ema_block_size(weight: float) -> int:
    """Points per block such that weight**-block stays below 1e8 (no loss of precision)."""
    if weight <= 0:
        return 1 << 20
    return max(1, int(18.4 / -math.log(weight)))


def ema(
    values: np.ndarray, weight: float, state: float = 0.0, count: int = 0
) -> tuple[np.ndarray, float, int]:
    """Debiased EMA of `values` continuing from (`state`, `count` finite values seen):
    state = w·state + (1 − w)·v, shown as state / (1 − w^count). NaN values stay NaN and leave
    the state alone. Returns (smoothed values, state, count)."""
    w = float(weight)
    if w <= 0:
        return np.array(values, dtype=float), state, count
    out = np.full(len(values), np.nan)
    finite = np.nonzero(~np.isnan(values))[0]
    if not len(finite):
        return out, state, count
    v = values[finite]
    smoothed = np.empty(len(v))
    block = ema_block_size(w)
    if block < 64:  # a short memory: w^L < 1e-16 beyond L points, so a convolution is exact
        kernel = w ** np.arange(math.ceil(37 / -math.log(w)), dtype=float)  # (L,)
        smoothed = (1 - w) * np.convolve(v, kernel)[: len(v)]
        smoothed += state * w ** (np.arange(len(v)) + 1.0)
        return _debias(out, finite, smoothed, w, count), float(smoothed[-1]), count + len(v)
    for s in range(0, len(v), block):
        chunk = v[s : s + block]  # (L,)
        i = np.arange(len(chunk), dtype=float)
        # s_i = w^(i+1)·state + (1 − w)·Σ_{j≤i} w^(i−j)·v_j, the sum scaled by w^-j to be a cumsum
        sums = np.cumsum(chunk * w**-i)
        smoothed[s : s + len(chunk)] = w ** (i + 1) * state + (1 - w) * w**i * sums
        state = float(smoothed[s + len(chunk) - 1])
    return _debias(out, finite, smoothed, w, count), state, count + len(v)


def _debias(
    out: np.ndarray, finite: np.ndarray, smoothed: np.ndarray, w: float, count: int
) -> np.ndarray:
    out[finite] = smoothed / (1 - w ** (count + 1 + np.arange(len(smoothed), dtype=float)))
    return out


class MeanDecimator:
    """Mean of each bucket of k rows of a growing (rows, columns) array, k a power of two chosen
    as in `bucket_size`; complete buckets are kept incrementally (the heat map's columns: the
    mean of shares over the steps of one pixel is the share of all their rollouts)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.k = 0
        self.done = 0
        self._sums = np.zeros((0, 0))  # (complete buckets, columns)

    def __call__(self, rows: np.ndarray, width: int) -> np.ndarray:
        n = len(rows)
        k = bucket_size(n, width)
        if k == 1:
            return rows
        if n < self.done or k < self.k or self._sums.shape[1] not in (0, rows.shape[1]):
            self.reset()
        if not self.k:
            self.k, self._sums = k, np.zeros((0, rows.shape[1]))
        while self.k < k:  # a coarser level: add pairs of buckets
            even = len(self._sums) - len(self._sums) % 2
            self._sums = self._sums[0:even:2] + self._sums[1:even:2]
            self.k *= 2
            self.done = len(self._sums) * self.k
        count = (n - self.done) // k
        if count:
            new = rows[self.done : self.done + count * k].reshape(count, k, -1).sum(axis=1)
            self._sums = np.concatenate([self._sums, new])
            self.done += count * k
        out = self._sums / k
        if self.done < n:
            out = np.concatenate([out, rows[self.done :].mean(axis=0, keepdims=True)])
        return out
