"""How many CPU threads a step's log-prob and update passes use: all of torch's, or one fewer
when another program keeps a core busy.

The app lets OpenMP threads spin briefly at each barrier before they sleep (GOMP_SPINCOUNT in
grpo_desktop/__init__.py), which is what a free CPU runs fastest with. When another program
keeps a core busy, one of torch's threads shares that core, and every barrier of a parallel
operation waits for it: on an idle 2-core Intel Xeon a step of `bench/vs_trl.py --quick`'s
workload took 0.53 s on two threads and 0.87 s on one, but with one busy neighbour 1.36 s on two
and 0.93 s on one. So the passes run on all threads, and `UpdateThreads` tries one fewer when
there is a sign of a busy neighbour, and keeps it when it is faster, judged by the time per unit
of work (a token through a pass with gradients counts 3, through a pass without 1):

- the step's decode chose fewer threads than torch has (sampling/decode_threads.py times both
  at every decode): a trial on one fewer next step; a trial that loses makes the next such
  trial wait twice as long (BACKOFF steps at first), since a small model may decode faster on
  one thread on a free CPU too;
- on all threads, a step slower than SLOWER × the best of the last WINDOW steps (a neighbour
  started): a trial on one fewer;
- on fewer threads, every RECHECK steps a trial on all (the neighbour may have stopped);
- a trial that beats the kept count's latest step by SWITCH is kept.

A free CPU thus runs every step on all threads, with no trials.

The results are the same on any thread count up to float rounding (a reduction may be split
differently). The decode chooses its own threads each time (sampling/decode_threads.py).
Not used on CUDA or when torch has one thread.

Try it: python -m pytest -q tests/engine/grpo/test_update_threads.py
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable

import torch

from grpo_desktop.engine.sampling.decode_threads import last_choice

WINDOW = 8  # recent steps remembered per thread count
SLOWER = 1.5  # a step this much slower than the recent best (all threads) calls for a trial
RECHECK = 10  # on fewer threads: a trial on all threads every this many steps
BACKOFF = 10  # steps from a hinted trial to the next one at first (doubled after each loss)
SWITCH = 0.9  # a trial is kept when it takes at most this share of the kept count's time
GRAD_WEIGHT = 3  # work of a token through a pass with gradients (forward + backward ≈ 3 forwards)


class UpdateThreads:
    """`with threads.passes(work):` around a step's passes sets their thread count and times
    them; `work` is the step's tokens weighted as above (`pass_work`). `hint()` says whether
    the last decode chose fewer threads (by default from decode_threads.last_choice)."""

    def __init__(
        self,
        device: torch.device | str = "cpu",
        usual: int | None = None,
        hint: Callable[[], bool] | None = None,
    ):
        self.usual = usual or torch.get_num_threads()
        self.fewer = max(1, self.usual - 1)
        self.active = torch.device(device).type == "cpu" and self.fewer < self.usual
        self.hint = hint or (lambda: 0 < last_choice()["threads"] < self.usual)
        self.kept = self.usual
        self.times: dict[int, deque] = {n: deque(maxlen=WINDOW) for n in {self.usual, self.fewer}}
        self.step = 0
        self.next_trial: int | None = None
        self.hint_after = 1  # the first step whose hint may call for a trial
        self.backoff = BACKOFF

    def _count(self) -> tuple[int, bool]:
        """(threads for this step, whether it is a trial)."""
        if self.next_trial is not None:
            return self.next_trial, True
        return self.kept, False

    @contextlib.contextmanager
    def passes(self, work: float):
        if not self.active:
            yield
            return
        n, trial = self._count()
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
        if per_work is None or self.step == 1:
            return  # nothing timed, or the warm-up (first-call costs land there)
        if trial and n != self.kept and self.times[self.kept]:
            latest = self.times[self.kept][-1]  # the kept count as things are now
            if per_work <= SWITCH * latest:
                self.kept = n
            elif n == self.fewer:
                self.backoff *= 2  # fewer lost: hints wait longer before the next trial
        self.times[n].append(per_work)
        if trial or n != self.kept:
            return
        if n == self.usual:
            slow = per_work > SLOWER * min(self.times[n])
            hinted = self.step >= self.hint_after and self.hint()
            if hinted:
                self.hint_after = self.step + self.backoff
            if slow or hinted:
                self.next_trial = self.fewer
        elif self.step % RECHECK == 0:
            self.next_trial = self.usual


def pass_work(grad_tokens: int, no_grad_tokens: int) -> float:
    """A step's work in forward-token units: each token through a pass with gradients counts
    GRAD_WEIGHT, through a pass without 1."""
    return float(GRAD_WEIGHT * grad_tokens + no_grad_tokens)
