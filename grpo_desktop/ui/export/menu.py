"""The window's Export… action (File menu and toolbar, Ctrl+E): opens the Export dialog on the
session's run; disabled, with the reason in its tooltip, while training runs.

`install_export_action(window, menu)` adds the action to `menu` and, when the window has its
run toolbar, beside the run controls; it returns the action. The dialog: ui/export/dialog.py.
Try it: tests/ui/export/test_export.py (the action, off while training).
"""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QToolBar

from grpo_desktop.ui.export.dialog import TRAINING, ExportDialog

TIP = (
    "Export the trained model: a LoRA adapter, a merged model, GGUF for llama.cpp / Ollama / "
    "LM Studio, or a TRL project for multi-GPU training (Ctrl+E)"
)


def install_export_action(window, menu: QMenu) -> QAction:
    action = QAction("Export…", window)
    action.setObjectName("action.export")
    action.setShortcut(QKeySequence("Ctrl+E"))
    action.setToolTip(TIP)
    action.setStatusTip(TIP)

    def open_dialog() -> None:
        if window.model.running:
            return
        dialog = ExportDialog(window.model, window)
        window.export_dialog = dialog  # reachable (tests, screenshots) while it is open
        dialog.exec()
        window.export_dialog = None
        dialog.deleteLater()

    def on_state_changed(_state: str = "") -> None:
        running = window.model.running
        action.setEnabled(not running)
        tip = f"{TRAINING}" if running else TIP
        action.setToolTip(tip)
        action.setStatusTip(tip)

    action.triggered.connect(open_dialog)
    window.model.state_changed.connect(on_state_changed)
    on_state_changed()
    menu.addAction(action)
    toolbar = window.findChild(QToolBar, "toolbar.run")
    if toolbar is not None:
        separators = [a for a in toolbar.actions() if a.isSeparator()]
        if separators:
            toolbar.insertAction(separators[0], action)
        else:
            toolbar.addAction(action)
    window.export_dialog = None
    return action
