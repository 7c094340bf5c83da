"""The GRPO Lab: a separate window of small interactive experiments that need no model or GPU.

`LabWindow` (window.py) holds the tabs; `answer_lab.py` is the answer-level lab (a softmax over
four whole answers to 17 × 24), `signal_chart.py` the chance that a group carries signal,
`reward_lab.py` the reward-design lab. Other labs join with `LabWindow.add_tab(widget, title)`;
`LabWindow.show_tab(title)` brings one up. Try it: Learn ▸ GRPO Lab (Ctrl+L).
"""

from __future__ import annotations

from grpo_desktop.ui.lab.window import LabWindow

__all__ = ["LabWindow"]
