"""The history of one training run, built from the engine's events: metrics, evals, logs, rollouts.

`RunHistory.append(event)` takes the engine's events (or their JSON dicts) in order and returns
what changed. It keeps:
- per-step metrics as growing numpy columns (NaN where a step lacks a metric), so a plot of
  10,000 steps reads one array view without copying;
- each step's advantage histogram (the heat map over steps is computed on one common range);
- held-out evaluations, log messages, checkpoints, the run's start and end;
- every rollout through `RolloutStore` (bounded memory, older steps paged from `events.jsonl`).

A resumed run's `run_started` (start_step s) supersedes everything logged after step s, as in the
engine's `events.jsonl`. `RunHistory.from_events_file(path)` replays a saved run the same way, so
a session can be persisted append-only as the engine's own events file.

Pure Python plus numpy: no Qt, no torch. Not thread-safe; the GUI thread owns it.

Try it:  python -c "from grpo_desktop.session.history import RunHistory; \
h = RunHistory.from_events_file('runs/demo/events.jsonl'); print(h.last_step, h.metric('reward'))"
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from grpo_desktop.engine.events import Event, event_from_dict
from grpo_desktop.session.rollouts import DEFAULT_MAX_ROWS, RolloutStore

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


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class RunHistory:
    """Everything one run reported, in step order. See the module docstring."""

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
        self.checkpoints: list[dict] = []
        self.version = 0  # bumped on every change; views redraw when it moved
        self.rollouts.clear()
        self._heatmap_cache: tuple[int, tuple] | None = None
        self._heat_rows: list[tuple[int, np.ndarray]] = []  # (row index, shares) per histogram
        self._heat_half, self._heat_bins = 0.0, 0

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
        self.rollouts.add(int(d["step"]), d.get("rows") or [])

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
        self.checkpoints = [e for e in self.checkpoints if e["step"] <= step]
        self.rollouts.truncate_after(step)
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
        """(steps, accuracy, format rate) of the held-out evaluations."""
        ev = sorted(self.evals, key=lambda e: e["step"])
        return (
            np.array([e["step"] for e in ev], dtype=float),
            np.array([_number(e.get("accuracy")) or 0.0 for e in ev], dtype=float),
            np.array([_number(e.get("format_rate")) or 0.0 for e in ev], dtype=float),
        )

    def latest_histogram(self) -> tuple[list[float], list[int]] | None:
        return next((h for h in reversed(self._hists) if h is not None), None)

    def seconds_per_step(self, window: int = 10) -> float | None:
        """Wall time per step over the last `window` steps (evals and checkpoints included)."""
        elapsed = self._cols.get("elapsed")
        n = len(elapsed)
        if n == 0 or math.isnan(elapsed[-1]):
            return None
        if n == 1:
            step_time = self.latest("step_time")
            return step_time
        k = min(window, n - 1)
        steps = self._cols.get("step")
        span = steps[-1] - steps[-1 - k]
        return float((elapsed[-1] - elapsed[-1 - k]) / span) if span > 0 else None

    def eta_seconds(self) -> float | None:
        per_step = self.seconds_per_step()
        if per_step is None or not self.total_steps:
            return None
        return max(0.0, per_step * (self.total_steps - self.last_step))

    def advantage_heatmap(self, bins: int = 41) -> tuple[np.ndarray, float, np.ndarray] | None:
        """(steps, half-range R, shares (n_steps, bins)): each step's advantage histogram re-binned
        onto [-R, R], R the largest |advantage| bin centre seen, as shares of that step's rollouts.

        Incremental: only steps added since the last call are re-binned, unless R had to grow."""
        cache = self._heatmap_cache
        if cache is not None and cache[0] == self.version:
            return cache[1]
        present = [i for i, h in enumerate(self._hists) if h is not None]
        if not present:
            return None
        rows, half = self._heat_rows, self._heat_half
        if len(rows) > len(present) or (rows and rows[-1][0] not in present):
            rows, half = [], 0.0  # the history was truncated: start over
        new = present[len(rows) :]
        needed = max((self._max_center(i) for i in new), default=0.0)
        if needed > half or bins != self._heat_bins:
            half = max(needed, max((self._max_center(i) for i in present), default=0.0))
            half = half * (1 + 1 / bins) if half >= 1e-3 else 1.0  # all zero: a readable scale
            rows, new = [], present
        rows = rows + list(zip(new, self._rebin(new, half, bins)))
        self._heat_rows, self._heat_half, self._heat_bins = rows, half, bins
        steps = self._cols.get("step")[[i for i, _ in rows]]
        result = (steps, half, np.vstack([r for _, r in rows]))
        self._heatmap_cache = (self.version, result)
        return result

    def _max_center(self, i: int) -> float:
        edges, counts = self._hists[i]
        e = np.asarray(edges, dtype=float)
        centers = (e[:-1] + e[1:]) / 2
        used = np.asarray(counts) > 0
        return float(np.abs(centers[used]).max()) if used.any() else 0.0

    def _rebin(self, indices: list[int], half: float, bins: int) -> np.ndarray:
        """Shares (len(indices), bins) of each histogram's counts on [-half, half] (vectorised)."""
        if not indices:
            return np.zeros((0, bins))
        width = max(len(self._hists[i][1]) for i in indices)
        centers = np.zeros((len(indices), width))
        counts = np.zeros((len(indices), width))
        for row, i in enumerate(indices):
            edges, cnt = self._hists[i]
            e = np.asarray(edges, dtype=float)
            centers[row, : len(cnt)] = (e[:-1] + e[1:]) / 2
            counts[row, : len(cnt)] = cnt
        idx = np.clip(((centers + half) / (2 * half) * bins).astype(int), 0, bins - 1)
        grid = np.zeros((len(indices), bins))
        rows = np.repeat(np.arange(len(indices)), width)
        np.add.at(grid, (rows, idx.ravel()), counts.ravel())
        totals = grid.sum(axis=1, keepdims=True)
        return np.divide(grid, totals, out=np.zeros_like(grid), where=totals > 0)

    # ------------------------------------------------------------------ files

    @classmethod
    def from_events_file(cls, path: str, max_rollout_rows: int = DEFAULT_MAX_ROWS) -> RunHistory:
        """Replay a run's events.jsonl; rollouts beyond the memory bound stay on disk."""
        history = cls(max_rollout_rows, events_path=path)
        history.extend_from_file(path)
        return history

    def extend_from_file(self, path: str, start: int = 0) -> int:
        """Append the complete lines of `path` from byte `start`; returns where reading ended."""
        offset = start
        with open(path, "rb") as fh:
            fh.seek(start)
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # a torn last line: a crash mid-write, or still being written
                if line.strip():
                    data = json.loads(line)
                    event_from_dict(data)  # validates the type and fields
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
