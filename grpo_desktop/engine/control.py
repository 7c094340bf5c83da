"""Thread-safe run control: stop and pause flags the training loop checks between steps.

The GUI thread (or a signal handler in the CLI) calls `stop()`, `pause()` and `resume()`; the
training generator calls `wait_if_paused()` and `should_stop()`. Plain `threading.Event`s, because
a queued Qt slot would never run while the worker is busy inside the generator. Torch-free.

Try it:  python -c "from grpo_desktop.engine.control import TrainControl as T; c = T(); \\
c.stop_after(3); print(c.should_stop(2), c.should_stop(3))"
"""

from __future__ import annotations

import threading


class TrainControl:
    def __init__(self) -> None:
        self._stop = threading.Event()
        self._running = threading.Event()  # set = not paused
        self._running.set()
        self._stop_after: int | None = None

    def stop(self) -> None:
        """Finish the current step, save a checkpoint and end the run as 'stopped'."""
        self._stop.set()
        self._running.set()  # a paused run must wake up to stop

    def stop_after(self, step: int) -> None:
        """Stop gracefully once `step` is finished (exact, unlike a stop sent when the GUI sees
        the step: by then the engine may have begun the next one)."""
        self._stop_after = step

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def should_stop(self, finished_step: int | None = None) -> bool:
        """True once a stop was requested, or `finished_step` reached the stop_after() step."""
        if self._stop.is_set():
            return True
        target = self._stop_after
        return finished_step is not None and target is not None and finished_step >= target

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def wait_if_paused(self, poll_s: float = 0.1) -> None:
        """Block while paused; return at once when running or when a stop was requested."""
        while not self._running.wait(poll_s):
            if self._stop.is_set():
                return
