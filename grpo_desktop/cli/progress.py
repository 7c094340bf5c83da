"""The status line on stderr while `grpo-desktop train` runs.

One line per step (redrawn in place on a terminal, one line each when piped): the step, a bar,
the reward, the last held-out accuracy, seconds per step and the ETA; alarms are printed even
with --quiet, since the run is in trouble. stdout stays free for scripts.

    grpo-desktop train --demo --out /tmp/demo-run --steps 3
"""

from __future__ import annotations

import sys


class Progress:
    """One status line on stderr: step, bar, reward, held-out accuracy, speed and ETA."""

    def __init__(self, enabled: bool = True, width: int = 24):
        self.enabled, self.width = enabled, width
        self.tty = sys.stderr.isatty()
        self.step_times: list[float] = []
        self.accuracy = None
        self.started = False  # until the run starts, info lines say how loading goes

    def update(self, event) -> None:
        kind = event.type
        if kind == "alert":  # shown even with --quiet: the run is in trouble
            self._print(f"{event.severity}: {event.message} {event.advice}".rstrip())
            return
        if not self.enabled:
            return
        if kind == "run_started":
            self.started = True
            steps = f"{event.start_step}..{event.total_steps}"
            self._print(f"Training {event.model} on {event.device}, steps {steps}")
        elif kind == "eval":
            self.accuracy = event.accuracy
            self._print(
                f"held-out accuracy at step {event.step}: {event.accuracy:.1%} "
                f"(format {event.format_rate:.1%}, n={event.n})"
            )
        elif kind == "log" and event.level == "warning":
            self._print(f"warning: {event.message}")
        elif kind == "log" and not self.started:  # loading: a GGUF model's import progress
            self._print(event.message)
        elif kind == "step":
            self._line(event)

    def _line(self, event) -> None:
        self.step_times.append(event.metrics.get("step_time") or 0.0)
        recent = self.step_times[-20:]
        per_step = sum(recent) / len(recent)
        eta = per_step * (event.total_steps - event.step)
        frac = event.step / max(event.total_steps, 1)
        fill = int(frac * self.width)
        reward = event.metrics.get("reward")
        acc = "" if self.accuracy is None else f" acc {self.accuracy:.0%}"
        text = (
            f"step {event.step}/{event.total_steps} [{'#' * fill}{'.' * (self.width - fill)}] "
            f"reward {reward if reward is None else f'{reward:.3f}'}{acc} "
            f"{per_step:.1f}s/step ETA {int(eta // 60)}:{int(eta % 60):02d}"
        )
        if self.tty:
            sys.stderr.write("\r" + text.ljust(100))
            sys.stderr.flush()
        else:
            print(text, file=sys.stderr)

    def _print(self, text: str) -> None:
        if self.tty and self.enabled:
            sys.stderr.write("\r" + " " * 100 + "\r")
        print(text, file=sys.stderr)

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")


def print_imports() -> None:
    """Every subcommand: a GGUF model imported on first use says how far it got on stderr
    (engine/models/gguf_import.py; `train` reports it through its own events instead)."""
    from grpo_desktop.engine.models.gguf_import import set_default_progress

    set_default_progress(
        lambda fraction, message: print(f"{message} [{fraction:.0%}]", file=sys.stderr)
    )
