"""Every rollout of a run in bounded memory: the newest steps held, older ones paged from disk.

`RolloutStore.add(step, rows)` keeps whole steps until more than `max_rows` rows are held, then
forgets the oldest. `get(step)` still reads a forgotten step when the run's `events.jsonl` is
known: the file is indexed lazily by the byte offset of each step's `rollouts` line, and only
that line is parsed. Without an events file forgotten steps are gone (`forgotten` counts their
rows) unless a `loader` reads them elsewhere (a TRL run's parquet files, session/trl_run.py).
Pure Python: no Qt, no torch. Not thread-safe; the GUI thread owns it.

    python -c "from grpo_desktop.session.rollouts import RolloutStore as S; s = S(max_rows=4);
    [s.add(k, [{'reward': k}] * 2) for k in (1, 2, 3)]; print(s.steps_in_memory, s.get(1))"
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable

from grpo_desktop.engine.events import rows_with_prompts

DEFAULT_MAX_ROWS = 20_000
_ROLLOUTS_PREFIX = b'{"type": "rollouts", "step": '
_STARTED_PREFIX = b'{"type": "run_started"'
_DIGITS = re.compile(rb"\d+")


class RolloutStore:
    """Rollout rows by step; see the module docstring."""

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS, events_path: str | None = None):
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {max_rows}")
        self.max_rows = max_rows
        self.events_path = events_path
        self._memory: OrderedDict[int, list[dict]] = OrderedDict()
        self._rows_in_memory = 0
        self._known_steps: set[int] = set()
        self.forgotten = 0  # rows dropped from memory (still on disk when events_path is set)
        self._index: dict[int, int] = {}  # step -> byte offset of its rollouts line
        self._scanned = 0  # bytes of events_path indexed so far
        self._cache: tuple[int, list[dict]] | None = None  # the last step paged in
        # Without an events file: reads a forgotten step from wherever else it is kept (a TRL
        # run's completions parquet files: session/trl_run.py), or None.
        self.loader: Callable[[int], list[dict] | None] | None = None

    # -- writing

    def add(self, step: int, rows: list[dict]) -> list[int]:
        """Keep a step's rows (replacing an older copy of the same step); return the steps that
        were dropped from memory to stay within `max_rows`."""
        if step in self._memory:
            self._rows_in_memory -= len(self._memory.pop(step))
        self._memory[step] = list(rows)
        self._rows_in_memory += len(rows)
        self._known_steps.add(step)
        dropped = []
        while self._rows_in_memory > self.max_rows and len(self._memory) > 1:
            old, old_rows = self._memory.popitem(last=False)
            self._rows_in_memory -= len(old_rows)
            self.forgotten += len(old_rows)
            dropped.append(old)
        return dropped

    def index_line(self, step: int, offset: int) -> None:
        """Record where a step's rollouts line starts (used when reading an events file)."""
        self._index[step] = offset

    def truncate_after(self, step: int) -> None:
        """Forget every step after `step` (a resumed run redoes them)."""
        for s in [s for s in self._memory if s > step]:
            self._rows_in_memory -= len(self._memory.pop(s))
        self._known_steps = {s for s in self._known_steps if s <= step}
        self._index = {s: o for s, o in self._index.items() if s <= step}
        self._scanned = 0  # the engine may have rewritten the file shorter: index it afresh
        self._cache = None

    def clear(self) -> None:
        self._memory.clear()
        self._known_steps.clear()
        self._rows_in_memory = self.forgotten = self._scanned = 0
        self._index.clear()
        self._cache = None

    # -- reading

    @property
    def rows_in_memory(self) -> int:
        return self._rows_in_memory

    @property
    def steps_in_memory(self) -> list[int]:
        return list(self._memory)

    @property
    def steps(self) -> list[int]:
        """Every step with rollouts, in memory or not."""
        return sorted(self._known_steps)

    def memory_items(self) -> list[tuple[int, list[dict]]]:
        return list(self._memory.items())

    def in_memory(self, step: int) -> bool:
        return step in self._memory

    def latest_rows(self) -> list[dict]:
        return next(reversed(self._memory.values())) if self._memory else []

    def get(self, step: int) -> list[dict] | None:
        """The rows of `step`: from memory, else paged from the events file, else None."""
        if step in self._memory:
            return self._memory[step]
        if self._cache is not None and self._cache[0] == step:
            return self._cache[1]
        rows = self._read_from_disk(step)
        if rows is not None:
            self._cache = (step, rows)
        return rows

    def _read_from_disk(self, step: int) -> list[dict] | None:
        path = self.events_path
        if not path and self.loader is not None:
            return self.loader(step)
        if not path or not os.path.isfile(path):
            return None
        if step not in self._index:
            self._scan(path)
        offset = self._index.get(step)
        if offset is None:
            return None
        with open(path, "rb") as fh:
            fh.seek(offset)
            line = fh.readline()
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if data.get("type") != "rollouts":
            return None
        return rows_with_prompts(data.get("rows") or [], data.get("prompts"))

    def _scan(self, path: str) -> None:
        """Index the rollouts lines appended since the last scan (only complete lines). A
        `run_started` line of a resumed run supersedes later steps logged before it."""
        with open(path, "rb") as fh:
            fh.seek(self._scanned)
            offset = self._scanned
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # torn or still being written
                if line.startswith(_ROLLOUTS_PREFIX):
                    match = _DIGITS.match(line, len(_ROLLOUTS_PREFIX))
                    if match:
                        self._index[int(match.group())] = offset
                elif line.startswith(_STARTED_PREFIX):
                    try:
                        start = int(json.loads(line).get("start_step", 0))
                    except (ValueError, TypeError, AttributeError, RecursionError):
                        start = None
                    if start is not None:
                        self._index = {s: o for s, o in self._index.items() if s <= start}
                offset += len(line)
            self._scanned = offset
