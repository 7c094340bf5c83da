"""The history of one training run, built from the engine's events: metrics, evals, logs, rollouts.

`RunHistory.append(event)` takes the engine's events (or their JSON dicts) in order and returns
what changed; `RunHistory.from_events_file(path)` replays a saved run, so a session persists
append-only as the engine's own events file. Metrics are growing numpy columns (a plot of 10,000
steps reads one array view), rollouts go through `RolloutStore` (bounded memory). A resumed run's
`run_started` supersedes everything logged after its start step, as in `events.jsonl`. A line
nested thousands deep or longer than 64 MB is a damaged line (ValueError naming it), never a
RecursionError or a runaway read. Pure Python plus numpy: no Qt, no torch. Not thread-safe; the GUI thread owns it.

    python -c "from grpo_desktop.session.history import RunHistory as H;
    h = H.from_events_file('runs/demo/events.jsonl'); print(h.last_step, h.metric('reward'))"
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from grpo_desktop.engine.events import Event, bad_line_message, event_from_dict, rows_with_prompts
from grpo_desktop.engine.units import size_text
from grpo_desktop.session.rollouts import DEFAULT_MAX_ROWS, RolloutStore

TOO_DEEP = "its brackets nest too deeply to read"  # a line built to hurt (RecursionError)
MAX_LINE_BYTES = 64 * 1024 * 1024  # one event; a step's rollouts are a few MB at most

# The order metrics come in CSV exports; any others follow alphabetically.
METRIC_ORDER = (
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "kl",
    "entropy",
    "loss",
    "grad_norm",
    "learning_rate",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
)


# A history's epoch changes whenever steps it recorded are removed (a new run, a resumed run
# redoing steps); unique across histories, so a view can key incremental caches on it.
_EPOCHS = itertools.count(1)


class _Columns:
    """Growable float64 columns aligned on one row per step."""

    def __init__(self) -> None:
        self.n = 0
        self._cap = 64
        self._data: dict[str, np.ndarray] = {}

    def _grow(self) -> None:
        self._cap *= 2
        for name, col in self._data.items():
            new = np.full(self._cap, np.nan)
            new[: self.n] = col[: self.n]
            self._data[name] = new

    def append(self, values: dict[str, float | None]) -> None:
        if self.n == self._cap:
            self._grow()
        for name, value in values.items():
            col = self._data.get(name)
            if col is None:
                col = self._data[name] = np.full(self._cap, np.nan)
            col[self.n] = np.nan if value is None else value
        self.n += 1

    def truncate(self, n: int) -> None:
        for col in self._data.values():
            col[n : self.n] = np.nan
        self.n = min(self.n, n)

    def get(self, name: str) -> np.ndarray:
        col = self._data.get(name)
        return col[: self.n] if col is not None else np.full(self.n, np.nan)

    def names(self) -> list[str]:
        return list(self._data)


class _HeatMap:
    """Every step's advantage histogram (bin centres and counts, one padded row per step) and
    their shares re-binned onto one symmetric range, grown as steps arrive."""

    def __init__(self) -> None:
        self.seen = 0  # entries of RunHistory._hists already added
        self.n = 0  # rows (steps that have a histogram)
        self.steps = np.zeros(0)
        self.centers = np.zeros((0, 1))  # (capacity, widest histogram)
        self.counts = np.zeros((0, 1))
        self.reach = np.zeros(0)  # largest |centre| of a bin with counts, per row
        self.grid = np.zeros((0, 0))  # shares (capacity, bins); rows [0, gridded) are current
        self.gridded, self.half, self.bins = 0, 0.0, 0
        self.reached = -1.0  # the largest reach the grid's range was made for
        self.version, self.result = -1, None

    def add(self, steps: list[float], hists: list[tuple[list[float], list[int]]]) -> None:
        """Append rows; histograms with the same number of bins are converted together."""
        by_width: dict[int, list[int]] = {}
        for j, (_, counts) in enumerate(hists):
            by_width.setdefault(len(counts), []).append(j)
        need = self.n + len(hists)
        if need > len(self.steps) or max(by_width, default=0) > self.centers.shape[1]:
            rows = max(64, 2 * len(self.steps), need)
            self._grow(rows, max(max(by_width, default=0), self.centers.shape[1]))
        for width, js in by_width.items():
            e = np.array([hists[j][0] for j in js], dtype=float)  # (m, width + 1)
            c = np.array([hists[j][1] for j in js], dtype=float)  # (m, width)
            centers = (e[:, :-1] + e[:, 1:]) / 2
            rows = self.n + np.array(js)
            self.steps[rows] = np.asarray(steps, dtype=float)[js]
            self.centers[rows], self.counts[rows] = 0.0, 0.0
            self.centers[rows, :width], self.counts[rows, :width] = centers, c
            self.reach[rows] = np.where(c > 0, np.abs(centers), 0.0).max(axis=1, initial=0.0)
        self.n = need

    def _grow(self, rows: int, width: int) -> None:
        def grown(a: np.ndarray, shape: tuple) -> np.ndarray:
            new = np.zeros(shape)
            new[tuple(slice(0, s) for s in a.shape)] = a
            return new

        self.steps = grown(self.steps, (rows,))
        self.reach = grown(self.reach, (rows,))
        self.centers = grown(self.centers, (rows, width))
        self.counts = grown(self.counts, (rows, width))

    def shares(self, bins: int) -> tuple[np.ndarray, float, np.ndarray]:
        needed = float(self.reach[self.gridded : self.n].max(initial=0.0))
        if needed > self.reached or bins != self.bins:  # a wider range: re-bin every row
            self.reached = float(self.reach[: self.n].max(initial=0.0))
            widened = self.reached * (1 + 1 / bins)  # a margin of a bin
            self.half = widened if self.reached >= 1e-3 else 1.0  # all 0: a readable scale
            self.bins, self.gridded = bins, 0
            self.grid = np.zeros((len(self.steps), bins))
        if self.grid.shape[0] < self.n:
            grid = np.zeros((len(self.steps), bins))
            grid[: self.gridded] = self.grid[: self.gridded]
            self.grid = grid
        rows = slice(self.gridded, self.n)
        self.grid[rows] = _rebin(self.centers[rows], self.counts[rows], self.half, bins)
        self.gridded = self.n
        return self.steps[: self.n], self.half, self.grid[: self.n]


def _rebin(centers: np.ndarray, counts: np.ndarray, half: float, bins: int) -> np.ndarray:
    """Shares (rows, bins) of each row's counts on [-half, half], bin by bin centre."""
    rows = len(centers)
    idx = np.clip(((centers + half) / (2 * half) * bins).astype(int), 0, bins - 1)  # (rows, W)
    flat = (np.arange(rows)[:, None] * bins + idx).ravel()
    grid = np.bincount(flat, weights=counts.ravel(), minlength=rows * bins).reshape(rows, bins)
    totals = grid.sum(axis=1, keepdims=True)
    return np.divide(grid, totals, out=np.zeros_like(grid), where=totals > 0)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class RunHistory:
    """Everything one run reported, in step order: per-step metrics as numpy columns (NaN where
    a step lacks a metric), each step's advantage histogram (the heat map over steps uses one
    common range), held-out evaluations, log messages, checkpoints, the run's start and end, and
    every rollout through `RolloutStore` (older steps paged from `events.jsonl`)."""

    def __init__(self, max_rollout_rows: int = DEFAULT_MAX_ROWS, events_path: str | None = None):
        self.rollouts = RolloutStore(max_rollout_rows, events_path)
        self.clear()

    def clear(self) -> None:
        """Forget everything (a new run starts)."""
        self.run: dict | None = None  # the run_started event as a dict
        self.finished: dict | None = None  # the run_finished event as a dict
        self.total_steps = 0
        self._cols = _Columns()  # "step", "elapsed" and every metric
        self._hists: list[tuple[list[float], list[int]] | None] = []
        self.evals: list[dict] = []
        self.logs: list[dict] = []
        self.alerts: list[dict] = []  # alert events (checker failures, health alarms), in order
        self.checkpoints: list[dict] = []
        self.version = 0  # bumped on every change; views redraw when it moved
        self.rollouts.clear()
        self._heat = _HeatMap()
        self._eval_cache: tuple[list, tuple] | None = None  # (the evals list it was made from, ...)
        self.epoch = next(_EPOCHS)

    # ------------------------------------------------------------------ writing

    def append(self, event: Event | dict) -> str:
        """Record one event; returns its type ("step", "rollouts", ...)."""
        data = event if isinstance(event, dict) else event.to_dict()
        kind = data.get("type", "")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(data)
            self.version += 1
        return kind

    def _on_run_started(self, d: dict) -> None:
        start = int(d.get("start_step", 0))
        if self.run is None or start == 0:
            kept_rollouts = self.rollouts.events_path
            self.clear()
            self.rollouts.events_path = kept_rollouts
        else:
            self.truncate_after(start)
        self.run, self.finished = d, None
        self.total_steps = int(d.get("total_steps", 0))

    def _on_rollouts(self, d: dict) -> None:
        self.rollouts.add(int(d["step"]), rows_with_prompts(d.get("rows") or [], d.get("prompts")))

    def _on_step(self, d: dict) -> None:
        step = int(d["step"])
        if self._cols.n and step <= self.last_step:
            self.truncate_after(step - 1)  # a repeated step replaces the old one
        values: dict[str, float | None] = {
            "step": float(step),
            "elapsed": _number(d.get("elapsed")),
        }
        for name, value in (d.get("metrics") or {}).items():
            values[name] = _number(value)
        self._cols.append(values)
        hist = d.get("advantage_hist") or {}
        edges, counts = hist.get("edges"), hist.get("counts")
        ok = isinstance(edges, list) and isinstance(counts, list) and len(edges) == len(counts) + 1
        self._hists.append((edges, counts) if ok and counts else None)
        self.total_steps = int(d.get("total_steps", self.total_steps))

    def _on_eval(self, d: dict) -> None:
        self.evals = [e for e in self.evals if e["step"] != d["step"]] + [d]

    def _on_log(self, d: dict) -> None:
        self.logs.append(d)

    def _on_alert(self, d: dict) -> None:
        self.alerts.append(d)

    def _on_checkpoint(self, d: dict) -> None:
        self.checkpoints.append(d)

    def _on_run_finished(self, d: dict) -> None:
        self.finished = d

    def truncate_after(self, step: int) -> None:
        """Forget what was logged after `step` (a resumed run redoes those steps)."""
        keep = int(np.searchsorted(self._cols.get("step"), step, side="right"))
        self._cols.truncate(keep)
        del self._hists[keep:]
        self.evals = [e for e in self.evals if e["step"] <= step]
        self.logs = [e for e in self.logs if e.get("step", 0) <= step]
        self.alerts = [e for e in self.alerts if e.get("step", 0) <= step]
        self.checkpoints = [e for e in self.checkpoints if e["step"] <= step]
        self.rollouts.truncate_after(step)
        self._heat = _HeatMap()
        self.epoch = next(_EPOCHS)
        self.version += 1

    # ------------------------------------------------------------------ reading

    @property
    def num_steps(self) -> int:
        return self._cols.n

    @property
    def last_step(self) -> int:
        return int(self._cols.get("step")[-1]) if self._cols.n else 0

    @property
    def steps(self) -> np.ndarray:
        return self._cols.get("step")

    def metric(self, name: str) -> np.ndarray:
        """One metric per recorded step (a view; NaN where the step lacks it)."""
        return self._cols.get(name)

    def metric_names(self) -> list[str]:
        return [n for n in self._cols.names() if n not in ("step", "elapsed")]

    def reward_functions(self) -> list[str]:
        """The reward parts reported, e.g. ["accuracy", "format"]."""
        names = self.metric_names()
        return [n.split("/")[1] for n in names if n.startswith("rewards/") and n.endswith("/mean")]

    def latest(self, name: str) -> float | None:
        if not self._cols.n:
            return None
        value = self._cols.get(name)[-1]
        return None if math.isnan(value) else float(value)

    def eval_series(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, accuracy, format rate) of the held-out evaluations (cached until they change;
        do not modify the arrays)."""
        cached = self._eval_cache
        if cached is not None and cached[0] is self.evals:
            return cached[1]
        ev = sorted(self.evals, key=lambda e: e["step"])
        result = (
            np.array([e["step"] for e in ev], dtype=float),
            np.array([_number(e.get("accuracy")) or 0.0 for e in ev], dtype=float),
            np.array([_number(e.get("format_rate")) or 0.0 for e in ev], dtype=float),
        )
        self._eval_cache = (self.evals, result)
        return result

    def latest_histogram(self) -> tuple[list[float], list[int]] | None:
        return next((h for h in reversed(self._hists) if h is not None), None)

    def seconds_per_step(self, window: int = 10) -> float | None:
        """Wall time per step over the last `window` steps (evals and checkpoints included), of
        the latest stretch of the run only: a continued run counts its time from 0 again."""
        elapsed = self._cols.get("elapsed")
        n = len(elapsed)
        if n == 0 or math.isnan(elapsed[-1]):
            return None
        drops = np.flatnonzero(np.diff(elapsed[-(window + 1) :]) < 0)
        if len(drops):  # continued: keep the steps since the clock started again
            n = min(n, window + 1) - (int(drops[-1]) + 1)
        if n == 1:
            step_time = self.latest("step_time")
            return step_time
        k = min(window, n - 1)
        steps = self._cols.get("step")
        span = steps[-1] - steps[-1 - k]
        return float((elapsed[-1] - elapsed[-1 - k]) / span) if span > 0 else None

    def median_step_time(self, window: int = 10) -> tuple[float, int] | None:
        """(median, count) of the engine's own `step_time` over the last `window` steps that
        report one: the steps alone, without the evaluations and checkpoints between them that
        `seconds_per_step` counts (what an estimate of a step's time is to be compared with)."""
        times = self._cols.get("step_time")[-window:]
        times = times[np.isfinite(times) & (times > 0)]
        return (float(np.median(times)), len(times)) if len(times) else None

    def eta_seconds(self) -> float | None:
        per_step = self.seconds_per_step()
        if per_step is None or not self.total_steps:
            return None
        return max(0.0, per_step * (self.total_steps - self.last_step))

    def advantage_heatmap(self, bins: int = 41) -> tuple[np.ndarray, float, np.ndarray] | None:
        """(steps, half-range R, shares (n_steps, bins)): each step's advantage histogram re-binned
        onto [-R, R], R the largest |advantage| bin centre seen, as shares of that step's rollouts.

        Incremental: only steps added since the last call are re-binned, unless R had to grow
        (then every row is, in one vectorised pass). The arrays returned are views: read them
        before the next append."""
        heat = self._heat
        if heat.result is not None and heat.version == self.version and heat.bins == bins:
            return heat.result
        steps, rows = self._cols.get("step"), heat.n
        new = [i for i in range(heat.seen, len(self._hists)) if self._hists[i] is not None]
        if new:
            heat.add(steps[new].tolist(), [self._hists[i] for i in new])
        heat.seen = len(self._hists)
        heat.version = self.version
        if heat.result is None or heat.n != rows or heat.bins != bins:  # else: the same object
            heat.result = heat.shares(bins) if heat.n else None
        return heat.result

    # ------------------------------------------------------------------ files

    @classmethod
    def from_events_file(cls, path: str, max_rollout_rows: int = DEFAULT_MAX_ROWS) -> RunHistory:
        """Replay a run's events.jsonl; rollouts beyond the memory bound stay on disk."""
        history = cls(max_rollout_rows, events_path=path)
        history.extend_from_file(path)
        return history

    def extend_from_file(self, path: str, start: int = 0) -> int:
        """Append the complete lines of `path` from byte `start`; returns where reading ended.
        A line longer than MAX_LINE_BYTES is damaged (ValueError), not read into memory."""
        offset = start
        with open(path, "rb") as fh:
            fh.seek(start)
            for line in iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""):
                if len(line) > MAX_LINE_BYTES:
                    too_long = ValueError(
                        f"it is longer than {size_text(MAX_LINE_BYTES)}, far more than any "
                        "event the app writes"
                    )
                    raise ValueError(bad_line_message(path, offset, too_long))
                if not line.endswith(b"\n"):
                    break  # a torn last line: a crash mid-write, or still being written
                if line.strip():
                    try:
                        data = json.loads(line)
                        event_from_dict(data)  # validates the type and fields
                    except RecursionError:
                        too_deep = ValueError(TOO_DEEP)
                        raise ValueError(bad_line_message(path, offset, too_deep)) from None
                    except (ValueError, TypeError, KeyError, AttributeError) as exc:
                        raise ValueError(bad_line_message(path, offset, exc)) from None
                    self.append(data)
                    if data.get("type") == "rollouts":
                        self.rollouts.index_line(int(data["step"]), offset)
                offset += len(line)
        return offset

    def write_csv(self, path: str) -> None:
        """One row per step: step, elapsed seconds, every metric, and the held-out results."""
        names = self.metric_names()
        ordered = [n for n in METRIC_ORDER if n in names] + sorted(
            n for n in names if n not in METRIC_ORDER
        )
        evals = {e["step"]: e for e in self.evals}
        columns = [self.metric(n) for n in ordered]
        elapsed = self._cols.get("elapsed")
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["step", "elapsed", *ordered, "eval_accuracy", "eval_format_rate"])
            for i, step in enumerate(self.steps.astype(int)):
                ev = evals.get(int(step), {})
                writer.writerow(
                    [int(step), _cell(elapsed[i]), *(_cell(c[i]) for c in columns)]
                    + [_cell(ev.get("accuracy")), _cell(ev.get("format_rate"))]
                )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    value = float(value)
    return "" if math.isnan(value) else repr(value)


def replay(events: Iterable[Event | dict], max_rollout_rows: int = DEFAULT_MAX_ROWS) -> RunHistory:
    """A history built from events in memory (tests, benchmarks)."""
    history = RunHistory(max_rollout_rows)
    for event in events:
        history.append(event)
    return history
