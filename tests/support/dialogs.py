"""Answering the app's real modal dialogs in tests, the way a user does: a QTimer polls
`QApplication.activeModalWidget()` until the dialog is up (its `exec()` keeps the event loop
running), then looks at it and clicks. Nothing in the app is replaced. Not a test module (no
test_ prefix); the UI tests import it like `hazards`.

    when_modal(TrustDialog, lambda d: d.trust_button.click())
    answer_box("Start Anyway", seen)   # a QMessageBox, by the text on its button
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox


def when_modal(kind: type, act: Callable, every_ms: int = 20, tries: int | None = None) -> None:
    """Once the active modal widget is a `kind`, call `act(dialog)` (from the event loop).
    Polls every `every_ms`; with `tries`, gives up after that many polls (the test's own
    assertion then fails, rather than a later dialog being answered by mistake)."""

    def poll(left: int | None) -> None:
        dialog = QApplication.activeModalWidget()
        if isinstance(dialog, kind):
            act(dialog)
        elif left is None or left > 0:
            QTimer.singleShot(every_ms, lambda: poll(None if left is None else left - 1))

    QTimer.singleShot(0, lambda: poll(tries))


def answer_box(button_text: str, seen: list) -> None:
    """Click the button labelled `button_text` (mnemonic '&' ignored) in the next QMessageBox,
    noting the box's text in `seen`."""

    def click(box: QMessageBox) -> None:
        seen.append(box.text())
        for button in box.buttons():
            if button.text().replace("&", "") == button_text:
                button.click()
                return

    when_modal(QMessageBox, click)
