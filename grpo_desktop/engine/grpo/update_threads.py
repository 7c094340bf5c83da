"""How many CPU threads a step's log-prob and update passes use: all of torch's, or one fewer
when another program keeps a core busy.

The app lets OpenMP threads spin briefly at each barrier before they sleep (GOMP_SPINCOUNT in
grpo_desktop/__init__.py), which is what a free CPU runs fastest with. When another program
keeps a core busy, one of torch's threads shares that core, and every barrier of a parallel
operation waits for it: on an idle 2-core Intel Xeon a step of `bench/vs_trl.py --quick`'s
workload took 0.53 s on two threads and 0.87 s on one, but with one busy neighbour 1.36 s on two
and 0.93 s on one. So the passes run on all threads, and `UpdateThreads` switches to one fewer
when that is faster, judged by the time per unit of work (a token through a pass with gradients
counts 3, through a pass without 1):

- the run's second step is a trial on one fewer thread, the third on all; the faster is kept;
- on all threads, a step slower than SLOWER × the best of the last WINDOW steps is followed by a
  trial on one fewer (a neighbour started);
- on fewer threads, every RECHECK steps is a trial on all (the neighbour may have stopped);
- a trial that beats the kept count's latest step by SWITCH is kept.

The results are the same on any thread count up to float rounding (a reduction may be split
differently). The decode chooses its own threads each time (sampling/decode_threads.py).
Not used on CUDA or when torch has one thread.

Try it: python -m pytest -q tests/engine/grpo/test_update_threads.py
"""

from __future__ import annotations

import contextlib
import time
from collections import deque

import torch

WINDOW = 8  # recent steps remembered per thread count
SLOWER = 1.5  # a step this much slower than the recent best (all threads) calls for a trial
RECHECK = 10  # on fewer threads: a trial on all threads every this many steps
SWITCH = 0.9  # a trial is kept when it takes at most this share of the kept count's time
GRAD_WEIGHT = 3  # work of a token through a pass with gradients (forward + backward ≈ 3 forwards)


class UpdateThreads:
    """`with threads.passes(work):` around a step's passes sets their thread count and times
    them; `work` is the step's tokens weighted as above (`pass_work`)."""

    def __init__(self, device: torch.device | str = "cpu", usual: int | None = None):
        self.usual = usual or torch.get_num_threads()
        self.fewer = max(1, self.usual - 1)
        self.active = torch.device(device).type == "cpu" and self.fewer < self.usual
        self.kept = self.usual
        self.times: dict[int, deque] = {n: deque(maxlen=WINDOW) for n in {self.usual, self.fewer}}
        self.step = 0
        self.next_trial: int | None = None
        self.last_count = self.usual

    def _count(self) -> tuple[int, bool]:
        """(threads for this step, whether it is a trial)."""
        if self.step == 0:
            return self.usual, False  # warm-up: first-call costs land here, not timed
        if self.step == 1:
            return self.fewer, True
        if self.step == 2:
            return self.usual, True
        if self.next_trial is not None:
            return self.next_trial, True
        return self.kept, False

    @contextlib.contextmanager
    def passes(self, work: float):
        if not self.active:
            yield
            return
        n, trial = self._count()
        self.last_count = n
        before = torch.get_num_threads()
        if before != n:
            torch.set_num_threads(n)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - t0
            if torch.get_num_threads() != before:
                torch.set_num_threads(before)
        self._record(n, trial, seconds / work if work > 0 else None)

    def _record(self, n: int, trial: bool, per_work: float | None) -> None:
        self.step += 1
        self.next_trial = None
        if per_work is None:  # nothing to time (no pass ran): decide nothing
            return
        if self.step == 1:
            return  # the warm-up
        other = self.fewer if n == self.usual else self.usual
        if trial and self.step >= 3:
            if self.step == 3:  # the opening pair: keep the faster
                first = self.times[self.fewer]
                self.kept = self.fewer if first and first[-1] < per_work else self.usual
            elif n != self.kept and self.times[self.kept]:
                latest = self.times[self.kept][-1]  # the kept count as things are now
                self.kept = n if per_work <= SWITCH * latest else self.kept
        self.times[n].append(per_work)
        if trial or n != self.kept:
            return
        if n == self.usual and per_work > SLOWER * min(self.times[n]):
            self.next_trial = other  # slower than it was: is a neighbour taking a core?
        elif n == self.fewer and self.step % RECHECK == 0:
            self.next_trial = other


def pass_work(grad_tokens: int, no_grad_tokens: int) -> float:
    """A step's work in forward-token units: each token through a pass with gradients counts
    GRAD_WEIGHT, through a pass without 1."""
    return float(GRAD_WEIGHT * grad_tokens + no_grad_tokens)
