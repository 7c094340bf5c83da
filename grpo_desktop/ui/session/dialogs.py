"""The questions sessions ask: trust a checker from elsewhere, save changes, restore an autosave,
reopen sessions after a crash, start over on a session that already holds a run.

Each is a small function or dialog returning the answer; `SessionController` calls them through
its own `ask_*` methods, which tests replace (or answer through `QApplication.activeModalWidget`).
No file access here. Try it: tests/ui/session/test_session.py.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.common.code_editor import CodeEditor

SAVE, DISCARD, CANCEL = "save", "discard", "cancel"
NEW_SESSION, REPLACE = "new", "replace"


def trust_buttons(dialog: QDialog, trust: str, keep: str) -> QHBoxLayout:
    """The Trust / Keep row of a dialog that asks before running code from a file, as
    `dialog.trust_button` (accepts) and `dialog.keep_button` (rejects, the default: Enter never
    runs code by accident)."""
    dialog.trust_button = QPushButton(trust)
    dialog.trust_button.setAutoDefault(False)
    dialog.keep_button = QPushButton(keep)
    dialog.keep_button.setDefault(True)
    dialog.trust_button.clicked.connect(dialog.accept)
    dialog.keep_button.clicked.connect(dialog.reject)
    row = QHBoxLayout()
    row.addStretch(1)
    row.addWidget(dialog.trust_button)
    row.addWidget(dialog.keep_button)
    return row


class TrustDialog(QDialog):
    """Shows checker code that came from elsewhere, read-only, and asks whether it may run."""

    def __init__(self, source: str, origin: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Run this checker code?")
        self.setMinimumSize(640, 440)
        intro = QLabel(
            f"<b>{_html(os.path.basename(origin.rstrip(os.sep)) or origin)}</b> includes a custom "
            "reward checker: Python code that runs on this computer, with your permissions, "
            "every time an answer is scored. It was not written in this app on this computer."
            "<br><br>Read it first. Trust it only if you know what it does or trust where the "
            "file came from. If you keep it disabled, you can still look at the session's "
            "settings and history; training and <i>Test checker</i> stay off until you trust it "
            "in the Reward panel."
        )
        intro.setWordWrap(True)
        intro.setTextFormat(Qt.TextFormat.RichText)
        where = QLabel(origin)
        where.setStyleSheet("color: palette(placeholder-text);")
        where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.code = CodeEditor()
        self.code.setObjectName("trust.code")
        self.code.setReadOnly(True)
        self.code.setPlainText(source)
        buttons = trust_buttons(self, "Trust and enable", "Keep disabled")
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(where)
        layout.addWidget(self.code, 1)
        layout.addLayout(buttons)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        self.keep_button.setFocus()


class RecoveryDialog(QDialog):
    """Lists the sessions a crashed window left open and asks which one to reopen."""

    def __init__(self, sessions: list[tuple[str, str]], parent: QWidget | None = None):
        """`sessions`: (label, path) of each, newest first."""
        super().__init__(parent)
        self.setWindowTitle("Reopen after a crash?")
        intro = QLabel(
            "GRPO Desktop did not close properly last time. These sessions were open; their "
            "training runs are on disk up to the last checkpoint, and unsaved edits were "
            "autosaved. Reopen one?"
        )
        intro.setWordWrap(True)
        self.list = QListWidget()
        for label, path in sessions:
            item = QListWidgetItem(label)
            item.setToolTip(path)
            item.setData(Qt.ItemDataRole.UserRole, path)
            self.list.addItem(item)
        self.list.setCurrentRow(0)
        self.list.itemDoubleClicked.connect(self.accept)
        buttons = QDialogButtonBox()
        buttons.addButton("Reopen", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton("Not now", QDialogButtonBox.ButtonRole.RejectRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        note = QLabel(
            "Sessions you do not reopen stay where they are and are listed in Open Recent."
        )
        note.setWordWrap(True)
        note.setStyleSheet("color: palette(placeholder-text);")
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.list, 1)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.resize(620, 300)

    def chosen(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None


def ask_save_changes(parent: QWidget, name: str) -> str:
    """SAVE, DISCARD or CANCEL for a session with unsaved changes."""
    box = QMessageBox(
        QMessageBox.Icon.Warning,
        "Save changes?",
        f"The settings of {name} have changes that are not saved.",
        parent=parent,
    )
    box.setInformativeText(
        "Save them in the session? The training run itself is already on disk either way."
    )
    box.setStandardButtons(
        QMessageBox.StandardButton.Save
        | QMessageBox.StandardButton.Discard
        | QMessageBox.StandardButton.Cancel
    )
    box.button(QMessageBox.StandardButton.Discard).setText("Don't Save")  # as the README says
    box.setDefaultButton(QMessageBox.StandardButton.Save)
    answer = box.exec()
    return {
        QMessageBox.StandardButton.Save: SAVE,
        QMessageBox.StandardButton.Discard: DISCARD,
    }.get(QMessageBox.StandardButton(answer), CANCEL)


def ask_restore_autosave(parent: QWidget, name: str, when: str) -> bool:
    answer = QMessageBox.question(
        parent,
        "Restore unsaved changes?",
        f"{name} has settings changes from {when} that were never saved (the app may have "
        "closed unexpectedly). Restore them? If you don't, the saved version opens and the "
        "autosaved changes are deleted.",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.Yes,
    )
    return answer == QMessageBox.StandardButton.Yes


def ask_start_over(parent: QWidget, steps: int) -> str:
    """NEW_SESSION, REPLACE or CANCEL before a fresh run replaces a run of `steps` steps."""
    box = QMessageBox(
        QMessageBox.Icon.Question,
        "Start over?",
        f"This session already holds a run of {steps} steps.",
        parent=parent,
    )
    box.setInformativeText(
        "Start the new run in a new session to keep that one (the settings are copied), or "
        "replace it: its history and checkpoints are deleted."
    )
    new = box.addButton("Start in a New Session", QMessageBox.ButtonRole.AcceptRole)
    replace = box.addButton("Replace the Run", QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(new)
    box.exec()
    clicked = box.clickedButton()
    return NEW_SESSION if clicked is new else REPLACE if clicked is replace else CANCEL


def ask_start_with_failed_checker(parent: QWidget, failed: int, total: int, error: str) -> bool:
    """Whether to start although the custom checker failed its last test."""
    box = QMessageBox(
        QMessageBox.Icon.Warning,
        "Start with a failing checker?",
        (
            "Your custom checker could not load in its last test."
            if total == 0
            else f"Your custom checker failed on {failed} of {total} samples in its last test."
        ),
        parent=parent,
    )
    box.setInformativeText(
        f"First error: {error[:300]}\n\nAnswers it fails on get no score from it, so the "
        "reward misses that part (and a checker that always fails teaches nothing). Fix it in "
        "the Reward panel and test again, or start anyway."
    )
    start = box.addButton("Start Anyway", QMessageBox.ButtonRole.AcceptRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    return box.clickedButton() is start


def _html(text: str) -> str:
    import html

    return html.escape(text, quote=False)
