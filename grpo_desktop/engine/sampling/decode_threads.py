"""How many CPU threads the decode loop uses: all of torch's, or one, whichever steps faster here.

A decode step is a few hundred small operations, each ending at a barrier where torch's OpenMP
threads wait for each other. On a free CPU the second thread pays on most models (the demo's 32
rows: 0.32 s on two threads, 0.41 s on one, an idle 2-core Intel Xeon; SmolLM2-135M: 3.0 s
against 3.8 s). When another program keeps a core busy, a thread that shares its core makes
every barrier wait for the scheduler: the same demo decode took 12-15 s on two threads and
1.1-1.4 s on one. Which is faster depends on the model, the rows, the CPU and what else runs,
so every CPU decode times its own steps both ways, TRIALS each, alternating, after one warm-up
step, and keeps the one whose trial steps took less in all (a sum, not the best step: under
contention two threads have lucky steps too). A decode that kept all threads and then meets
SLOW_STEPS steps among WINDOW in a row that each took GUARD times the median of the steps
before them (a neighbour started) goes on with one thread; a lone slow step (the GUI thread
holding the interpreter a moment) does not count that much.
Which is faster also depends on the rows a step runs: when the decoder's rows double or halve
since the choice (twin rows forking as a group's answers part, twin_rows.py; ended rows
dropped), the trial runs again from that step. On the demo the first steps run 4-8 rows, where
one thread is faster, and later ones up to 32, where two are (a whole decode: 0.21-0.23 s on
two threads, 0.26-0.29 s on one, an idle 2-core AMD EPYC).
The tokens are the same either way (each output element is computed by one thread whatever the
count; tests/engine/sampling/test_decode_threads.py checks it).

Not used on CUDA (the threads only launch kernels there) or for decodes too short to pay for the
trial. `last_choice()` says what the last decode chose, for bench/ and tests.

Try it: python -m pytest -q tests/engine/sampling/test_decode_threads.py
"""

from __future__ import annotations

import statistics
import time
from collections import deque

import torch

MIN_TOKENS = 16  # decodes shorter than this keep torch's threads: too few steps to gain
WARMUP = 1  # steps at the usual threads before timing (first-call costs land there)
TRIALS = 2  # timed steps per choice
GUARD = 4.0  # a step this many times the median of recent steps is a slow one
SLOW_STEPS, WINDOW = 3, 8  # this many slow steps among the last WINDOW: one thread from then
FORCE: int | None = None  # tests: every decode on this many threads, no trial
_last = {"threads": 0, "seconds": {}}


def last_choice() -> dict:
    """The last decode's choice: {"threads": n (0: no choice made), "seconds": {threads: its
    trial steps' mean}, "guarded": whether a slow step sent it to one thread afterwards}."""
    return {
        "threads": _last["threads"],
        "seconds": dict(_last["seconds"]),
        "guarded": _last.get("guarded", False),
    }


class DecodeThreads:
    """Set the thread count for decode step `t` with `before(t)`, report its time with
    `after(t, seconds)`; `close()` restores torch's thread count."""

    def __init__(self, device: torch.device, max_new_tokens: int):
        self.usual = torch.get_num_threads()
        self.active = device.type == "cpu" and self.usual > 1 and max_new_tokens >= MIN_TOKENS
        self.best: dict[int, list[float]] = {}  # the trial steps' seconds per thread count
        self.recent: deque[float] = deque(maxlen=WINDOW)  # steps on all threads, not slow ones
        self.slow: deque[bool] = deque(maxlen=WINDOW)  # whether each recent step was slow
        self.chosen = 0
        self.start = 0  # the step the current choice's trial began at
        self.guarded = False  # a slow step sent it to one thread for good
        self.rows: int | None = None  # decoder rows when that trial began
        _last["threads"], _last["seconds"], _last["guarded"] = 0, {}, False
        if FORCE is not None and device.type == "cpu":
            self.active = False
            self._set(FORCE)

    def _trial_threads(self, t: int) -> int | None:
        """The thread count trial step t runs on, or None when t is not a trial step."""
        i = t - self.start - (WARMUP if self.start == 0 else 0)
        if i < 0 or i >= 2 * TRIALS:
            return None
        return self.usual if i % 2 == 0 else 1

    def _retry(self, t: int, rows: int | None) -> None:
        """Choose again from step t when the decoder's rows have doubled or halved since the
        choice (twin rows forking, ended rows dropped): which is faster depends on the rows."""
        if rows is None or self.rows is None:
            self.rows = rows if self.rows is None else self.rows
            return
        if (rows >= 2 * self.rows or 2 * rows <= self.rows) and not self.guarded:
            self.chosen, self.start, self.rows = 0, t, rows
            self.best, self.recent, self.slow = {}, deque(maxlen=WINDOW), deque(maxlen=WINDOW)

    def before(self, t: int, rows: int | None = None) -> None:
        """Step t, running `rows` decoder rows (None: not told), is about to run."""
        if not self.active:
            return
        if self.chosen:
            self._retry(t, rows)
        elif self.rows is None:
            self.rows = rows
        if self.chosen:
            return
        n = self._trial_threads(t)
        if n is not None:
            self._set(n)
        elif t >= self.start + (WARMUP if self.start == 0 else 0) + 2 * TRIALS:
            means = {k: sum(v) / len(v) for k, v in self.best.items()}
            self.chosen = min(means, key=means.get)
            self._set(self.chosen)
            _last["threads"], _last["seconds"] = self.chosen, means

    def after(self, t: int, seconds: float) -> None:
        if not self.active:
            return
        if self.chosen:
            if self.chosen > 1:
                self._guard(seconds)
            return
        n = self._trial_threads(t)
        if n is not None:
            self.best.setdefault(n, []).append(seconds)

    def _guard(self, seconds: float) -> None:
        """After a step on all threads: one thread from now on when steps turned slow."""
        recent = self.recent or self.best[self.chosen]
        self.slow.append(seconds > GUARD * statistics.median(recent))
        if not self.slow[-1]:
            self.recent.append(seconds)
        if sum(self.slow) >= SLOW_STEPS:
            self.chosen = 1  # a neighbour took a core: one thread for the rest of the decode
            self.guarded = True
            self._set(1)
            _last["threads"], _last["guarded"] = 1, True

    def _set(self, n: int) -> None:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)

    def close(self) -> None:
        self._set(self.usual)


def timed(step, *args):
    """step(*args) and the seconds it took."""
    t0 = time.perf_counter()
    out = step(*args)
    return out, time.perf_counter() - t0
