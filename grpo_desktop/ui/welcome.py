"""The first-run welcome: what to do first (train the demo), what next (your own model, data and
checker) and where to look, the least pressing message of the window's message area (one line,
the whole text under "More…") until the user dismisses it with the area's × ("Got it"); from
then on it never comes back (QSettings `welcome/dismissed`). Starting a run folds it away for that
window only. It holds no state of the run and changes no setting.
Try it: tests/ui/test_newcomer.py.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton

from grpo_desktop.ui.common.message_area import ElidedLabel

DISMISSED_KEY = "welcome/dismissed"
DISMISS_TIP = "Got it: hide this for good"
TEXT = (
    "<b>Welcome to GRPO Desktop.</b> "
    "<b>1. Train the demo first:</b> press <b>Start</b> (Ctrl+R). A tiny model learns arithmetic "
    "on the CPU in a few minutes; watch <i>Reward</i> and <i>Held-out accuracy</i> rise in "
    "<i>Training plots</i> and click a point to read that step's answers in <i>Rollouts</i>. "
    "<b>2. Then your own:</b> on the left, <i>Model</i> (a folder or a hub id), <i>Dataset</i> "
    "(a file or a hub id: check the preview) and <i>Reward</i> (your checker: <i>Test checker</i> "
    "before Start). The log at the bottom says what the run is doing."
)


class WelcomePanel(QFrame):
    dismissed = Signal()

    def __init__(self, settings: QSettings, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.setObjectName("welcome")
        self.setStyleSheet(
            "#welcome { background: #eef6ee; border: 1px solid #6a9f6a; border-radius: 4px; }"
        )
        self.label = ElidedLabel(TEXT)
        self.got_it = QPushButton("Got it")  # the message area's × does this
        self.got_it.setToolTip(DISMISS_TIP)
        self.got_it.clicked.connect(self.dismiss)
        self.got_it.hide()
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 2, 10, 2)
        row.addWidget(self.label, 1)
        if self.was_dismissed():
            self.hide()

    def was_dismissed(self) -> bool:
        return self.settings.value(DISMISSED_KEY, False, type=bool)

    def dismiss(self) -> None:
        """Hide it now and on every later launch."""
        self.settings.setValue(DISMISSED_KEY, True)
        self.settings.sync()
        self.hide()
        self.dismissed.emit()

    def fold(self) -> None:
        """Hide it in this window (a run started); it is back next launch until dismissed."""
        self.hide()
