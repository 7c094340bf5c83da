"""A banner in the window's message area when the session's run can be continued: how it ended, where Continue
training picks up, and the two ways on (Continue training, Start over).

Visible only while no run is active and the session model says the run can continue (stopped,
failed after some steps or interrupted; completed but the settings ask for more steps). The
buttons trigger the run controls' actions, so the banner, the toolbar and the Run menu behave
the same. One line (the whole text in its tooltip and under the area's "More…"); the area's ×
hides it until the run's state changes. Try it: tests/ui/session/test_session.py.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton

from grpo_desktop.session.run_state import describe
from grpo_desktop.ui.common.message_area import ElidedLabel

_STYLE = (
    "ResumeBanner { background: #e8f1fb; border: 1px solid #1f5fa8; border-radius: 4px; }"
    " ResumeBanner QLabel { color: #0d3c61; }"
)


class ResumeBanner(QFrame):
    def __init__(
        self, model, continue_action: QAction, start_over_action: QAction, parent=None
    ) -> None:
        super().__init__(parent)
        self.model = model
        self.setStyleSheet(_STYLE)
        self.text = ElidedLabel()
        self.continue_button = QPushButton("Continue Training")
        self.continue_button.setDefault(True)
        self.start_over_button = QPushButton("Start Over…")
        self.start_over_button.setToolTip(start_over_action.toolTip())
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 2, 6, 2)
        row.addWidget(self.text, 1)
        row.addWidget(self.start_over_button, 0, Qt.AlignmentFlag.AlignVCenter)
        row.addWidget(self.continue_button, 0, Qt.AlignmentFlag.AlignVCenter)
        self.continue_button.clicked.connect(continue_action.trigger)
        self.start_over_button.clicked.connect(start_over_action.trigger)
        model.state_changed.connect(self.refresh)
        model.session_replaced.connect(self.refresh)
        model.config_changed.connect(self._on_model_config_changed)
        model.config_replaced.connect(self.refresh)
        self.refresh()

    def _on_model_config_changed(self, section: str, name: str) -> None:
        if (section, name) == ("run", "max_steps"):
            self.refresh()

    def refresh(self, *_args) -> None:
        if not self.model.can_continue():
            self.hide()
            return
        state = self.model.run_state()
        self.text.setText(html.escape(describe(state, self.model.config.run.max_steps)))
        self.show()
