"""The main window's Learn and Help menus: the GRPO Lab window (ui/lab) and the Help window
(ui/help), each made on first use and kept for the window's life, F1 on what is under the mouse,
and the About box.

A mixin of `MainWindow` (kept apart so the window's file stays about layout and the run): it
expects the window's `model` (SessionModel), `alarms` (AlarmBanners), `plots` (PlotsView),
`show_message` and `_lab` / `_help` set to None in its constructor.
Try it: Learn ▸ GRPO Lab, F1; tests/ui/help/test_help.py, tests/ui/lab/test_lab.py.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QApplication, QMessageBox, QStyle, QToolBar


class LearnAndHelp:
    """Learn ▸ GRPO Lab (Ctrl+L, and a toolbar button), Help ▸ GRPO Desktop Help (F1), About."""

    def _build_learn_and_help_menus(self, bar) -> None:
        learn = bar.addMenu("&Learn")
        self.lab_action = learn.addAction("GRPO Lab", lambda: self.open_lab())
        self.lab_action.setShortcut("Ctrl+L")
        self.lab_action.setIcon(
            self.style().standardIcon(QStyle.StandardPixmap.SP_FileDialogContentsView)
        )
        self.lab_action.setToolTip("Open the GRPO Lab: watch one GRPO step by hand (Ctrl+L)")
        self.lab_action.setStatusTip("Small experiments that show how GRPO learns; no model needed")
        lab_bar = QToolBar("Learn")
        lab_bar.setObjectName("toolbar.learn")
        lab_bar.setMovable(False)
        lab_bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        lab_bar.addAction(self.lab_action)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, lab_bar)
        help_menu = bar.addMenu("&Help")
        self.help_action = help_menu.addAction("GRPO Desktop Help", self._on_help_action)
        self.help_action.setShortcut("F1")
        self.help_action.setStatusTip("What the plots, the alarms and GRPO's words mean (F1)")
        help_menu.addAction("About GRPO Desktop", self._show_about)
        self.alarms.help_requested.connect(self.open_help)
        self.plots.help_links.help_requested.connect(self.open_help)

    def lab_window(self):
        """The Lab window (ui/lab), created on first use and kept for the window's life."""
        if self._lab is None:
            from grpo_desktop.ui.lab import LabWindow

            self._lab = LabWindow(self.model, self)
        return self._lab

    def open_lab(self, tab: str | None = None):
        """Show the Lab (on the tab titled `tab` if given); returns that tab's widget."""
        return self.lab_window().show_tab(tab)

    def _on_model_lab_requested(self, step: int, group: int) -> None:
        """The inspector's "Open in Lab": that step's rollouts in the reward-design Lab."""
        from grpo_desktop.ui.lab.reward_lab import TITLE

        if self.lab_window().tab(TITLE).open_step(step, None if group < 0 else group):
            self.open_lab(TITLE)
        else:
            self.show_message("warning", f"Step {step}'s rollouts are no longer available.")

    def help_window(self):
        """The Help window (ui/help), created on first use and kept for the window's life."""
        if self._help is None:
            from grpo_desktop.ui.help.window import HelpWindow

            self._help = HelpWindow(self)
            self._help.lab_requested.connect(self.open_lab)
        return self._help

    def open_help(self, anchor: str | None = None):
        """Show Help on the entry `anchor` ("advantage", "plot-kl", "alarm-no_signal"; the entry
        last read when None); returns the Help window."""
        return self.help_window().show_topic(anchor)

    def _on_help_action(self) -> None:
        """F1: the entry of the plot under the mouse or the alarm banner in focus, if any."""
        from grpo_desktop.ui.help.window import context_anchor

        under = QApplication.widgetAt(QCursor.pos())
        self.open_help(context_anchor(under, QApplication.focusWidget()))

    def _show_about(self) -> None:
        QMessageBox.about(
            self,
            "About GRPO Desktop",
            "GRPO Desktop fine-tunes a language model with GRPO: for each problem it samples a "
            "group of answers, scores them with your checker, and makes the answers that beat "
            "their group's average more likely.",
        )
