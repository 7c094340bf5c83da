"""The trust question for a model's own code: the `.py` files that `model.trust_remote_code`
would make transformers import when the model or its tokenizer loads (a checkpoint's included).

Shows each file read-only (and any `auto_map` entry that fetches code from the Hub) and asks
whether it may run; "Keep off" is the default button, so Enter never runs code by accident. The
session controller asks it (through its `ask_model_code`) when a session or settings file with
such code is opened, and again before Start or Continue while the code is untrusted. No file
writes here; the answer is remembered by the session model's TrustStore.
Try it: tests/ui/test_hazards.py.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.models.remote_code import ModelCode
from grpo_desktop.ui.common.code_editor import CodeEditor
from grpo_desktop.ui.session.dialogs import trust_buttons

MAX_SHOWN = 200_000  # characters of one file shown


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(MAX_SHOWN + 1)
    except OSError as exc:
        return f"# {path} cannot be read: {exc.strerror or exc}"
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "\n# … (cut: the file is longer)"


class RemoteCodeDialog(QDialog):
    """Lists the model code that would run and shows the chosen file; accept = trust it."""

    def __init__(self, codes: list[ModelCode], origin: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Run this model's code?")
        self.setMinimumSize(680, 480)
        name = os.path.basename(origin.rstrip(os.sep)) or origin
        intro = QLabel(
            f"<b>{_html(name)}</b> sets <i>Trust remote code</i> (model.trust_remote_code): "
            "loading its model or tokenizer would run the Python code listed below, which came "
            "with it, on this computer with your permissions — before any training starts."
            "<br><br>Read it first. Trust it only if you know what it does or trust where it "
            "came from. If you keep it off, nothing runs it: the Dataset preview uses the plain "
            "prompt template and Start asks again."
        )
        intro.setWordWrap(True)
        intro.setTextFormat(Qt.TextFormat.RichText)
        self.files = QListWidget()
        self.files.setObjectName("trust.files")
        for code in codes:
            if code.folder is None:
                self._add(code.describe(), "# Downloaded from the Hub when the model loads.")
            for rel in code.files:
                self._add(os.path.join(code.source, rel), path=os.path.join(code.source, rel))
            for entry in code.auto_map:
                self._add(f"{code.source}: auto_map {entry}", f"# {entry}")
        self.code = CodeEditor()
        self.code.setObjectName("trust.code")
        self.code.setReadOnly(True)
        self.files.currentItemChanged.connect(self._on_files_current_item_changed)
        buttons = trust_buttons(self, "Trust and run", "Keep off")
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.files)
        layout.addWidget(self.code, 1)
        layout.addLayout(buttons)
        self.files.setCurrentRow(0)

    def _add(self, label: str, text: str = "", path: str = "") -> None:
        item = QListWidgetItem(label)
        item.setData(Qt.ItemDataRole.UserRole, (text, path))
        self.files.addItem(item)

    def _on_files_current_item_changed(self, item, _previous) -> None:
        if item is None:
            return
        text, path = item.data(Qt.ItemDataRole.UserRole)
        self.code.setPlainText(_read(path) if path else text)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        self.keep_button.setFocus()


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
