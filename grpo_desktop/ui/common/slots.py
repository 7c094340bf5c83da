"""Wiring a view to a sender by the house naming: signal `step_finished` of the session model goes
to the view's `_on_model_step_finished`. One call instead of a column of `.connect` lines that
repeat each name twice; a missing slot fails at construction (AttributeError naming it), never
silently at the first emission.

Slots named otherwise (`model.config_replaced.connect(self.refresh)`) are connected directly.
Try it: every view's constructor uses it, e.g. ui/compare/view.py (`name="runner"`).
"""

from __future__ import annotations

from PySide6.QtCore import QObject


def connect_slots(sender: QObject, receiver: object, *signals: str, name: str = "model") -> None:
    """Connect each of `sender`'s `signals` to `receiver._on_<name>_<signal>`."""
    for signal in signals:
        getattr(sender, signal).connect(getattr(receiver, f"_on_{name}_{signal}"))
