"""The GRPO Lab: a separate window of small interactive experiments that need no model or GPU.

`LabWindow` (window.py) holds the tabs; `answer_lab.py` is the lesson's answer-level lab (a softmax
over four whole answers to 17 × 24), `signal_chart.py` the chance that a group carries signal.
Other labs join with `LabWindow.add_tab(widget, title)`; `LabWindow.show_tab(title)` brings one up.
"""

from __future__ import annotations

from grpo_desktop.ui.lab.window import LabWindow

__all__ = ["LabWindow"]
