"""Alarm markers on the training plots: a dashed vertical line, with a short label, at the step
of each alert, on the plots that show what went wrong (reward hacking on Reward and Held-out
accuracy, no signal on No-signal groups, truncation and the checker on Truncated, and so on).

Drawn from the history's alerts (`RunHistory.alerts`), so a reopened session shows them too. The
lines ignore the plots' data bounds (they never change a range); their labels have a light fill
so they stay readable over a curve. A kind raised at many steps (the checker's time-outs) gets a
line for its first few only. Try it: tests/ui/run/test_alarms.py.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt

from grpo_desktop.engine.alarm_kinds import alarm

PLOTS = {  # kind: the plots (PlotsView names) its marker goes on
    "reward_hacking": ("reward", "eval"),
    "no_signal": ("zero",),
    "truncation": ("truncated",),
    "length_drift": ("length",),
    "length_collapse": ("length",),
    "kl_blowup": ("kl",),
    "entropy_collapse": ("entropy",),
    "grad_spike": ("grad_norm",),
    "checker_errors": ("truncated",),
    "checker_timeouts": ("truncated",),
}
LABELS = {  # a word or two above the line; the tooltip has the title
    "reward_hacking": "hacking?",
    "no_signal": "no signal",
    "truncation": "cut off",
    "length_drift": "drift",
    "length_collapse": "collapse",
    "kl_blowup": "KL jump",
    "entropy_collapse": "collapse",
    "grad_spike": "spike",
    "checker_errors": "checker",
    "checker_timeouts": "checker",
}
COLORS = {"warning": "#c77700", "critical": "#b3261e"}
PER_KIND = 3  # lines per kind at most
LEFT_FROM = 10  # labels of alarms from this step on sit left of their line (it is often the
# last step, at the plot's right edge); earlier ones right of it, clear of the y axis


class AlarmMarkers:
    """The alarm lines of a PlotsView; `update(alerts)` after the history changed."""

    def __init__(self, plots: dict):
        self.plots = plots  # name -> StepPlot
        self.lines: list[tuple[str, int, str, pg.InfiniteLine]] = []  # (plot, step, kind, line)
        self._drawn: tuple[int, int] = (0, 0)  # (id, length) of the alerts list drawn

    def update(self, alerts: list[dict]) -> None:
        key = (id(alerts), len(alerts))
        if key == self._drawn:
            return
        self.clear()
        self._drawn = key
        count: dict[str, int] = {}
        for a in alerts:
            kind, step = str(a.get("kind", "")), int(a.get("step", 0))
            count[kind] = count.get(kind, 0) + 1
            if count[kind] > PER_KIND:
                continue
            for name in PLOTS.get(kind, ()):
                if name in self.plots:
                    self._add(name, step, kind, a.get("severity") or alarm(kind).severity)

    def _add(self, name: str, step: int, kind: str, severity: str) -> None:
        color = COLORS.get(severity, COLORS["warning"])
        anchor = (1.0, 0.5) if step >= LEFT_FROM else (0.0, 0.5)
        line = pg.InfiniteLine(
            pos=step,
            angle=90,
            pen=pg.mkPen(color, width=1.5, style=Qt.PenStyle.DashLine),
            label=LABELS.get(kind, "alarm"),
            labelOpts={
                "position": 0.93,
                "color": color,
                "anchors": [anchor, anchor],
                "fill": (255, 255, 255, 210),  # readable over a curve
            },
        )
        line.setToolTip(f"{alarm(kind).title} at step {step}: see the banner or the log")
        self.plots[name].plot.addItem(line, ignoreBounds=True)
        self.lines.append((name, step, kind, line))

    def steps(self, name: str) -> list[int]:
        """The steps with a marker on plot `name`."""
        return [step for plot, step, _, _ in self.lines if plot == name]

    def clear(self) -> None:
        for name, _, _, line in self.lines:
            self.plots[name].plot.removeItem(line)
        self.lines = []
        self._drawn = (0, 0)
