"""The GRPO Lab window: a non-modal top-level window with one tab per lab.

The main window creates it on first use (Learn ▸ GRPO Lab, Ctrl+L) and keeps that one instance;
closing it only hides it, so a lab keeps its state until the app quits. Labs are plain QWidgets:
`add_tab(widget, title)` appends one, `show_tab(title)` shows the window, raises it and selects
that tab. A lab that animates should stop when hidden (the answer lab's Play does).

It reads nothing from the training run by itself; a lab that needs the session gets `model`
(the window's `SessionModel`, or None in a bare Lab). Try it: tests/ui/lab/test_lab.py.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QTabWidget, QVBoxLayout, QWidget

DEFAULT_SIZE = (1180, 780)


class LabWindow(QWidget):
    """The Lab: tabs of experiments. `model` is the session model labs may read (may be None)."""

    def __init__(self, model=None, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Window)
        self.model = model
        self.setObjectName("lab_window")
        self.setWindowTitle("GRPO Lab")
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.tabs)
        self._add_default_tabs()
        self._fit_size()

    def _add_default_tabs(self) -> None:
        from grpo_desktop.ui.lab.answer_lab import AnswerLabView
        from grpo_desktop.ui.lab.signal_chart import SignalChartView

        self.answer_lab = AnswerLabView()
        self.add_tab(self.answer_lab, "One step by hand (17 × 24)")
        self.signal_chart = SignalChartView()
        self.add_tab(self.signal_chart, "Which groups teach")
        from grpo_desktop.ui.lab.reward_lab import TITLE, RewardLabView

        self.reward_lab = RewardLabView(self.model)
        self.add_tab(self.reward_lab, TITLE)

    def _fit_size(self) -> None:
        width, height = DEFAULT_SIZE
        screen = self.screen() or (self.parent().screen() if self.parent() else None)
        if screen is not None:
            area = screen.availableGeometry()
            width = min(width, area.width() - 40)
            height = min(height, area.height() - 60)
        self.resize(width, height)

    def add_tab(self, widget: QWidget, title: str) -> int:
        """Append a lab as a tab; returns its index. A title already present is replaced."""
        old = self.tab_index(title)
        if old >= 0:
            self.tabs.removeTab(old)
        return self.tabs.addTab(widget, title)

    def tab_index(self, title: str) -> int:
        for i in range(self.tabs.count()):
            if self.tabs.tabText(i) == title:
                return i
        return -1

    def tab(self, title: str) -> QWidget | None:
        i = self.tab_index(title)
        return self.tabs.widget(i) if i >= 0 else None

    def tab_titles(self) -> list[str]:
        return [self.tabs.tabText(i) for i in range(self.tabs.count())]

    def show_tab(self, title: str | None = None) -> QWidget | None:
        """Show the window (raised and active) on the tab `title` (the current one when None or
        unknown); returns that tab's widget."""
        i = self.tab_index(title) if title else -1
        if i >= 0:
            self.tabs.setCurrentIndex(i)
        self.show()
        if QGuiApplication.platformName() != "offscreen":  # it has no stacking (and says so)
            self.raise_()
            self.activateWindow()
        return self.tabs.currentWidget()
