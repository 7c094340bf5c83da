"""The reward-design Lab's custom-checker box: the session's check() code, editable when trusted.

Shown when the Lab holds a run's real rollouts. The code starts as the session's checker; the
user may edit it here only when the session's checker may run (`SessionModel.checker_trusted`:
empty, typed in this window, or trusted before), otherwise it is read-only with the reason and the
run's recorded scores are used. Edits are compiled as typed (nothing runs) and announced after a
pause with `edited`; the Lab then runs the code in the sandboxed checker process.
Try it: tests/ui/lab/test_reward_lab.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QVBoxLayout

from grpo_desktop.engine.checker.runner import compile_checker
from grpo_desktop.engine.errors import CheckerError
from grpo_desktop.ui.common.code_editor import CodeEditor
from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import SliderSpin, note_label, set_note, wrapped_label

UNTRUSTED = (
    "This checker came with the session and has not been trusted, so the Lab does not run it: "
    "its scores are the run's own. To edit and re-run it, trust it in the Reward panel."
)


class CheckerBox(QGroupBox):
    edited = Signal()  # the code (after a pause in typing) or the weight changed

    def __init__(self, parent=None):
        super().__init__("Your checker", parent)
        self.weight = SliderSpin(0.0, 100.0, 5.0)
        self.weight.setToolTip("Weight of your checker's score in the reward")
        self.editor = CodeEditor()
        self.editor.setPlaceholderText(
            "Optional: def check(completion, answer, prompt) -> float. It runs in a separate, "
            "locked-in process, as in training."
        )
        self.editor.setMinimumHeight(110)
        self.note = note_label("warning")
        self.status = wrapped_label(muted=True)
        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("Weight", self.weight)
        col = QVBoxLayout(self)
        col.addLayout(form)
        col.addWidget(self.note)
        col.addWidget(self.editor, 1)
        col.addWidget(self.status)
        self.tasks = BackgroundTasks(self)
        self._timer = QTimer(self, singleShot=True, interval=400)
        self._timer.timeout.connect(self._on_timer_timeout)
        self.editor.textChanged.connect(self._timer.start)
        self.weight.value_edited.connect(lambda _v: self.edited.emit())

    def source(self) -> str:
        return self.editor.toPlainText()

    def set_source(self, source: str, weight: float, trusted: bool) -> None:
        self.editor.blockSignals(True)
        self.editor.setPlainText(source)
        self.editor.blockSignals(False)
        self.weight.set_value(weight)
        self.set_trusted(trusted)

    def set_trusted(self, trusted: bool) -> None:
        self.editor.setReadOnly(not trusted)
        set_note(self.note, "" if trusted else UNTRUSTED)

    @property
    def trusted(self) -> bool:
        return not self.editor.isReadOnly()

    def compiles(self) -> bool:
        """Whether the code compiles (empty code does); shows the error when not."""
        source = self.source()
        if not source.strip():
            self.editor.mark_error_line(None)
            return True
        try:
            compile_checker(source)
        except CheckerError as exc:
            self.set_status(str(exc))
            return False
        self.editor.mark_error_line(None)
        return True

    def set_status(self, text: str) -> None:
        self.status.setText(text)

    def flush(self) -> None:
        """Announce pending typing now (before the settings are copied)."""
        if self._timer.isActive():
            self._timer.stop()
            self._on_timer_timeout()

    def _on_timer_timeout(self) -> None:
        self.edited.emit()

    def run(self, lab, source: str, timeout_s: float, memory_mb: int, finished: Callable) -> None:
        """Run `source` on the Lab's rollouts it has not scored (engine RewardLab.run_checker,
        the sandboxed checker process) in the background; `finished(lab)` afterwards."""
        if not self.trusted:
            self.set_status("Not run: the checker is not trusted.")
            return
        self.set_status("Running your checker on the rollouts it has not scored…")

        def job():
            t0 = time.perf_counter()
            calls = lab.run_checker(source, timeout_s, memory_mb)
            return calls, time.perf_counter() - t0

        self.tasks.submit(
            "checker", job, lambda res, err: self._on_run_done(lab, res, err, finished)
        )

    def _on_run_done(self, lab, result, error, finished: Callable) -> None:
        if error is not None:
            text = str(error) if isinstance(error, CheckerError) else f"{error!r}"
            self.set_status(f"Your checker could not run: {text}")
            return
        calls, seconds = result
        self.set_status(
            f"Ran your checker {calls} times in {seconds * 1000:.0f} ms (a separate process); "
            "results are kept per completion, so re-weighting does not run it again."
        )
        finished(lab)
