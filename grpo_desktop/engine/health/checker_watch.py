"""Alerts about a custom checker that fails or hangs, which a user must see.

A checker that raises on every rollout leaves the reward without that part, and the run would
still end "Finished all steps"; one that always hangs makes every step take B·G·timeout seconds.
`CheckerWatch` reads each step's checker errors and returns `Alert` events (the schema the health
alarms share) and, when the checker timed out on every call two steps running, the message the
run stops with. Torch-free, so the CLI and tests read it without loading the engine.

Try it:
    python -c "from grpo_desktop.engine.health.checker_watch import CheckerWatch as W; w = W(); print(w.after_step(1, ['check() timed out after 5.0 s'] * 4))"
"""

from __future__ import annotations

from grpo_desktop.engine.events import Alert

ERROR_SHARE = 0.25  # more than this share of answers failing raises checker_errors
TIMEOUT_MARK = "timed out"  # how the checker process words a call that hit its time limit


def is_timeout(error: str | None) -> bool:
    """Whether a checker error text reports a call that hit the time limit."""
    return bool(error) and TIMEOUT_MARK in error


class CheckerWatch:
    """Watches the custom checker's errors step by step. Rules (per run):

    - `checker_errors` (warning), once: the first step in which the checker failed on more than
      a quarter of the answers, with the first error text.
    - `checker_timeouts` (critical): a step in which every call timed out; if the next step is
      the same, the run stops ("failed") with a message saying what to fix.
    """

    def __init__(self, timeout_s: float | None = None):
        self.timeout_s = timeout_s
        self.warned_errors = False
        self.timeout_streak = 0  # consecutive steps in which every call timed out

    def after_step(self, step: int, errors: list[str | None]) -> tuple[list[Alert], str | None]:
        """The alerts for one step's per-answer checker errors (None = fine), and the message to
        stop the run with (None: go on)."""
        alerts: list[Alert] = []
        n = len(errors)
        failed = [e for e in errors if e]
        timeouts = sum(is_timeout(e) for e in failed)
        if n and timeouts == n:
            self.timeout_streak += 1
            limit = f" ({self.timeout_s:g} s each)" if self.timeout_s else ""
            alerts.append(
                Alert(
                    step,
                    "checker_timeouts",
                    "critical",
                    f"Your checker timed out on every answer of step {step}{limit}, so it scored "
                    "nothing and the step took far longer than it should.",
                    "Make check() return quickly (no waiting, no endless loops), or raise the "
                    "checker time limit in the Reward panel. The run stops if the next step is "
                    "the same.",
                )
            )
        else:
            self.timeout_streak = 0
        if n and len(failed) > ERROR_SHARE * n and not self.warned_errors:
            self.warned_errors = True
            alerts.append(
                Alert(
                    step,
                    "checker_errors",
                    "warning",
                    f"Your checker failed on {len(failed)} of {n} answers in step {step}; those "
                    f"answers get no score from it. First error: {failed[0]}",
                    "Fix check() (Reward panel → Test checker shows each error with its line), or "
                    "set the custom weight to 0. Until then the reward misses that part.",
                )
            )
        if self.timeout_streak >= 2:
            return alerts, (
                f"Stopped: the custom checker timed out on every answer for {self.timeout_streak} "
                "steps in a row, so training could learn nothing from it. Make check() return "
                "quickly, or raise the checker time limit, then continue the run."
            )
        return alerts, None
