"""What the plots draw of long series: min/max decimation keeps every bucket's extremes and the
window's ends, grows incrementally to the same result as from scratch, keeps gaps; the EMA
matches the plain loop; the heat map's mean columns, the follow range and round axis limits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grpo_desktop.engine.events import StepMetrics
from grpo_desktop.session.history import RunHistory
from grpo_desktop.ui.plots.decimate import MeanDecimator, MinMaxDecimator, bucket_size, ema
from grpo_desktop.ui.plots.hist import nice_ceiling, sticky_limit
from grpo_desktop.ui.plots.kit import follow_range, sticky_range


def test_bucket_size_gives_between_one_and_two_buckets_per_pixel():
    assert bucket_size(600, 300) == 1  # 2 points per pixel: drawn as they are
    assert bucket_size(601, 300) == 2  # 601 / 300 = 2.0: k = 2, 300 full buckets
    assert bucket_size(10_000, 300) == 32  # 10,000 / 300 = 33.3: k = 32, 312 buckets
    assert bucket_size(10_000, 100) == 64  # 100: k = 64, 156 buckets


def test_a_sparse_series_is_drawn_as_it_is():
    x, y = np.arange(1.0, 11.0), np.arange(10.0) ** 2
    xd, yd = MinMaxDecimator()(x, y, width=300)
    assert list(xd) == list(x) and list(yd) == list(y)


def test_every_bucket_keeps_its_min_and_max_at_its_centre_and_the_ends_are_drawn():
    rng = np.random.default_rng(0)
    x, y = np.arange(1.0, 10_001.0), rng.normal(size=10_000)
    xd, yd = MinMaxDecimator()(x, y, width=300)
    k = 32  # bucket_size(10_000, 300); 312 full buckets and a tail of 16 points
    assert (xd[0], yd[0]) == (x[0], y[0]) and (xd[-1], yd[-1]) == (x[-1], y[-1])
    assert len(xd) == 2 * (312 + 1) + 2  # two points per bucket, tail included, plus the ends
    assert np.all(np.diff(xd) >= 0)
    for b in range(312):
        block = y[b * k : (b + 1) * k]
        centre = x[b * k + (k - 1) // 2]  # steps b·32 + 16: its two points sit there
        drawn = yd[xd == centre]
        assert sorted(drawn) == [block.min(), block.max()], b
    tail = y[312 * k :]
    assert {tail.min(), tail.max()} <= set(yd[-3:])
    assert yd.min() == y.min() and yd.max() == y.max()  # so the y range is the data's


def test_extremes_are_drawn_in_the_order_they_occur():
    # 8 points on a 2-pixel plot: k = 4. Bucket 0 peaks (9) before its dip (-9), bucket 1 the
    # other way round, so the line runs 9 -> -9 -> -5 -> 5 as the data does.
    x = np.arange(8.0)
    y = np.array([0.0, 9.0, -9.0, 1.0, -5.0, 0.0, 5.0, 1.0])
    xd, yd = MinMaxDecimator()(x, y, width=2)
    assert list(yd) == [0.0, 9.0, -9.0, -5.0, 5.0, 1.0]  # first point, 2 buckets, last point
    assert list(xd) == [0.0, 1.0, 1.0, 5.0, 5.0, 7.0]  # bucket centres: index (4 - 1) // 2 = 1, 5


def test_growing_incrementally_gives_what_a_fresh_decimation_gives():
    rng = np.random.default_rng(1)
    x, y = np.arange(20_000.0), rng.normal(size=20_000).cumsum()
    y[5_000:5_100] = np.nan  # a gap
    growing = MinMaxDecimator()
    for n in [*range(100, 1_000, 37), 1_000, 4_097, 4_100, 9_999, 16_385, 20_000]:
        inc = growing(x[:n], y[:n], width=250)  # crosses levels k = 2, 4, ... 64 by merging
        fresh = MinMaxDecimator()(x[:n], y[:n], width=250)
        assert np.array_equal(inc[0], fresh[0]), n
        assert np.array_equal(inc[1], fresh[1], equal_nan=True), n


def test_an_all_nan_bucket_stays_a_gap_and_a_partly_nan_one_keeps_its_finite_extremes():
    x = np.arange(12.0)
    y = np.array([1.0, 2.0, 3.0, 4.0, np.nan, np.nan, np.nan, np.nan, np.nan, 7.0, -7.0, 0.0])
    xd, yd = MinMaxDecimator()(x, y, width=1)  # 12 points, 1 pixel: k = 8, one bucket + tail
    assert list(yd[1:3]) == [1.0, 4.0]  # bucket 0 (points 0-7): its finite min and max
    assert list(yd[3:5]) == [-7.0, 7.0] or list(yd[3:5]) == [7.0, -7.0]  # the tail, 8-11
    x2 = np.arange(24.0)
    y2 = np.concatenate([np.ones(8), np.full(8, np.nan), np.ones(8)])
    _, yd2 = MinMaxDecimator()(x2, y2, width=3)  # k = 8: the middle bucket is all NaN
    assert np.isnan(yd2[3:5]).all() and not np.isnan(yd2[[1, 2, 5, 6]]).any()


def test_a_zoomed_window_covers_its_points_and_keeps_their_extremes():
    rng = np.random.default_rng(2)
    x, y = np.arange(10_000.0), rng.normal(size=10_000)
    xd, yd = MinMaxDecimator()(x, y, width=100, window=(2_000, 6_000))
    assert xd[0] == 2_000 and xd[-1] == 5_999  # the window's first and last points
    assert yd.min() == y[2_000:6_000].min() and yd.max() == y[2_000:6_000].max()
    raw = MinMaxDecimator()(x, y, width=100, window=(2_000, 2_150))  # 150 points: as they are
    assert np.array_equal(raw[1], y[2_000:2_150])


def test_band_edges_keep_the_lowest_and_the_highest_value_of_each_bucket():
    y = np.array([3.0, 1.0, 2.0, 5.0, 4.0, 0.0, 6.0, 2.0])
    x = np.arange(8.0)
    _, lower = MinMaxDecimator("min")(x, y, width=2)  # k = 4: buckets [3,1,2,5] and [4,0,6,2]
    _, upper = MinMaxDecimator("max")(x, y, width=2)
    assert list(lower) == [3.0, 1.0, 0.0, 2.0]  # first point, the two minima, last point
    assert list(upper) == [3.0, 5.0, 6.0, 2.0]


def test_ema_matches_the_plain_loop_and_continues_where_it_stopped():
    def loop(values, w):
        out, state, norm = [], 0.0, 0.0
        for v in values:
            if math.isnan(v):
                out.append(math.nan)
                continue
            state, norm = w * state + (1 - w) * v, w * norm + (1 - w)
            out.append(state / norm)
        return np.array(out)

    # Hand-computed for w = 0.5: 1 -> 1; 0 -> 0.25 / 0.75 = 1/3; NaN stays NaN; 0 -> 1/7.
    out, _, _ = ema(np.array([1.0, 0.0, np.nan, 0.0]), 0.5)
    assert np.allclose(out, [1.0, 1 / 3, np.nan, 1 / 7], equal_nan=True)
    rng = np.random.default_rng(3)
    y = rng.normal(size=5_000)
    y[rng.random(5_000) < 0.05] = np.nan
    for w in (0.05, 0.5, 0.8, 0.99):  # the convolution path (small w) and the block path
        head, state, count = ema(y[:1_234], w)
        tail, _, _ = ema(y[1_234:], w, state, count)
        both = np.concatenate([head, tail])
        assert np.allclose(both, loop(y, w), rtol=1e-10, atol=1e-12, equal_nan=True), w


def test_heat_map_columns_are_the_mean_share_of_each_bucket_of_steps():
    rows = np.zeros((10, 2))
    rows[:, 0] = np.arange(10.0)  # 10 steps on a 2-pixel plot: k = 4, buckets 0-3, 4-7, tail
    out = MeanDecimator()(rows, width=2)
    assert list(out[:, 0]) == [1.5, 5.5, 8.5]  # (0+1+2+3)/4, (4+5+6+7)/4, (8+9)/2


def test_the_heat_map_grows_row_by_row_to_what_one_pass_gives():
    def hist(s):
        half = 1.0 + (s % 5) / 2  # the range grows at steps 1..4: every row is re-binned
        return {"edges": [-half, 0.0, half], "counts": [s % 3, 2]}

    grown, once = RunHistory(), RunHistory()
    for s in range(1, 40):
        grown.append(StepMetrics(s, 40, {}, hist(s)))
        grown.advantage_heatmap(bins=5)
        once.append(StepMetrics(s, 40, {}, hist(s)))
    a, b = grown.advantage_heatmap(bins=5), once.advantage_heatmap(bins=5)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1] and np.allclose(a[2], b[2])
    epoch = grown.epoch
    grown.truncate_after(20)
    assert grown.epoch != epoch and len(grown.advantage_heatmap(bins=5)[0]) == 20


def test_follow_range_moves_only_when_the_run_outgrows_it():
    # Steps 1..1000: pad = 2 % of 999 = 19.98; a new range is [1 - pad, 1000 + 3 pads].
    lo, hi = follow_range(1, 1000, (0.0, 1.0))
    assert lo == pytest.approx(1 - 19.98) and hi == pytest.approx(1000 + 3 * 19.98)
    assert follow_range(1, 1010, (lo, hi)) is None  # 10 more steps still fit
    assert follow_range(1, 1055, (lo, hi)) is not None  # less than half a pad left
    # Steps 1..21 early in a run: pad 0.5, room a quarter of the 20 steps = 5.
    assert follow_range(1, 21, (0.0, 1.0)) == (0.5, 26.0)
    assert follow_range(1, 25, (0.5, 26.0)) is None  # the x axis stays for 4 more steps
    assert follow_range(1, 26, (0.5, 26.0)) == (0.5, 32.25)  # room = 25 / 4


def test_round_axis_limits_grow_at_once_and_shrink_only_well_inside():
    assert [nice_ceiling(v) for v in (0.7, 1.0, 1.3, 2.2, 7.0, 9.0, 31.0)] == [
        0.8,
        1.0,
        1.5,
        2.5,
        8.0,
        10.0,
        40.0,
    ]
    assert sticky_limit(None, 3.3) == 4.0
    assert sticky_limit(4.0, 3.9) == 4.0 and sticky_limit(4.0, 2.1) == 4.0  # over half of 4
    assert sticky_limit(4.0, 4.2) == 5.0 and sticky_limit(4.0, 1.7) == 2.0


def test_y_ranges_get_round_limits_and_move_only_when_the_data_outgrows_them():
    # Data 0.23..1.47: span 1.24, a quarter 0.31 -> step 0.5; 2 % margin 0.0248 -> [0, 1.5].
    assert sticky_range(0.23, 1.47, (0.0, 1.0)) == pytest.approx((0.0, 1.5))
    assert sticky_range(0.21, 1.49, (0.0, 1.5)) is None  # still inside and over half of it
    assert sticky_range(0.21, 1.52, (0.0, 1.5)) == pytest.approx((0.0, 2.0))  # outgrown
    assert sticky_range(0.9, 1.2, (0.0, 2.0)) is not None  # fills 15 %: fit it again
    assert sticky_range(3.0, 3.0, (0.0, 1.0)) == (1.5, 4.5)  # constant: ±half its value
    assert sticky_range(0.0, 0.0, (-1.0, 1.0)) is None  # constant 0: ±1, already there
