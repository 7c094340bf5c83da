"""How many CPU threads the decode loop uses: all of torch's, or one, whichever steps faster here.

A decode step is a few hundred small operations. With two OpenMP threads each one ends at a
barrier where the other thread waits, and the app keeps that wait short (GOMP_SPINCOUNT in
grpo_desktop/__init__.py: a long spin starves the work when another program keeps a core busy),
so the waiting thread sleeps and is woken again at nearly every operation. On a small model that
costs more than the second core gives: 32 rows of the demo model decode in 0.37 s on one thread
and 0.57 s on two (an idle 2-core Intel Xeon). A large model's products do pay for the second
core (SmolLM2-135M: 3.0 s on two threads, 3.8 s on one). Which is faster depends on the model,
the rows, the CPU and what else runs, so every CPU decode times its own steps both ways, two
each, alternating, after one warm-up step, and keeps the faster for the rest. The tokens are the
same either way (each output element is computed by one thread whatever the count;
tests/engine/sampling/test_decode_threads.py checks it).

Not used on CUDA (the threads only launch kernels there) or for decodes too short to pay for the
trial. `last_choice()` says what the last decode chose, for bench/ and tests.

Try it: python -m pytest -q tests/engine/sampling/test_decode_threads.py
"""

from __future__ import annotations

import time

import torch

MIN_TOKENS = 16  # decodes shorter than this keep torch's threads: too few steps to gain
WARMUP = 1  # steps at the usual threads before timing (first-call costs land there)
TRIALS = 2  # timed steps per choice
FORCE: int | None = None  # tests: every decode on this many threads, no trial
_last = {"threads": 0, "seconds": {}}


def last_choice() -> dict:
    """The last decode's choice: {"threads": n (0: no choice made), "seconds": {threads: the
    fastest timed step}}."""
    return {"threads": _last["threads"], "seconds": dict(_last["seconds"])}


class DecodeThreads:
    """Set the thread count for decode step `t` with `before(t)`, report its time with
    `after(t, seconds)`; `close()` restores torch's thread count."""

    def __init__(self, device: torch.device, max_new_tokens: int):
        self.usual = torch.get_num_threads()
        self.active = device.type == "cpu" and self.usual > 1 and max_new_tokens >= MIN_TOKENS
        self.best: dict[int, float] = {}
        self.chosen = 0
        _last["threads"], _last["seconds"] = 0, {}
        if FORCE is not None and device.type == "cpu":
            self.active = False
            self._set(FORCE)

    def _trial_threads(self, t: int) -> int | None:
        """The thread count trial step t runs on, or None when t is not a trial step."""
        i = t - WARMUP
        if i < 0 or i >= 2 * TRIALS:
            return None
        return self.usual if i % 2 == 0 else 1

    def before(self, t: int) -> None:
        if not self.active or self.chosen:
            return
        n = self._trial_threads(t)
        if n is not None:
            self._set(n)
        elif t >= WARMUP + 2 * TRIALS:
            self.chosen = min(self.best, key=self.best.get)
            self._set(self.chosen)
            _last["threads"], _last["seconds"] = self.chosen, dict(self.best)

    def after(self, t: int, seconds: float) -> None:
        if not self.active or self.chosen:
            return
        n = self._trial_threads(t)
        if n is not None:
            self.best[n] = min(seconds, self.best.get(n, float("inf")))

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
