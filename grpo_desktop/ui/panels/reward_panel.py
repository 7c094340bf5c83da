"""The Reward panel: how answers are scored, and a place to write and test your own checker.

Accuracy and format weights are sliders with spin boxes; when the format weight is at or above the
accuracy weight a warning explains the reward-hacking trap (well-formed wrong answers pay). Format
credit (all-or-nothing or per tag) has a line saying why it matters: under all-or-nothing a model
that never writes all the tags gets no format signal at all. The
custom checker is Python (`check(completion, answer, prompt) -> float`) in an editor with line
numbers, compiled as you type (nothing runs); "Test checker" runs it in a separate process on
sample answers (the latest rollouts when there are any, else answers written for the dataset's
first problems with their gold answers: panels/checker_samples.py), showing each score or error,
where the samples came from, and marking the line it failed on. "Test on a file…" scores a JSONL file of samples with all these
settings and shows a table (panels/score_dialog.py), as `grpo-desktop score` does.

Checker code that came with a session or settings file from elsewhere and was not trusted yet is
shown read-only with a note and a Trust button; until then it cannot be tested or trained with.
Code typed here is the user's own and may run. Try it: tests/ui/panels/test_panels.py.
"""

from __future__ import annotations

import copy

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.checker.runner import compile_checker, test_checker
from grpo_desktop.engine.errors import CheckerError
from grpo_desktop.ui.common.code_editor import CodeEditor
from grpo_desktop.ui.common.form import ConfigForm, tooltip_for
from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import SliderSpin, note_label, set_note, wrapped_label
from grpo_desktop.ui.panels.checker_samples import dataset_samples
from grpo_desktop.ui.panels.score_dialog import ScoreFileRow
from grpo_desktop.ui.session.model import UNTRUSTED_CHECKER

EXAMPLE_CHECKER = '''\
def check(completion, answer, prompt):
    """Score one completion: 1.0 when the last line contains the answer, else 0.0."""
    lines = completion.strip().splitlines() or [""]
    return 1.0 if answer.strip() in lines[-1] else 0.0
'''

SAMPLES_FROM_ROLLOUTS = 8
TEST_TIP = (
    "Run check() in a separate process on sample answers and show each score or error: the "
    "latest answers of the run, or before any run answers written for the first problems of "
    "your dataset with their gold answers."
)


class RewardPanel(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.tasks = BackgroundTasks(self)
        self.results: list = []
        self.tested_on = ""  # where the last test's samples came from

        self.accuracy = SliderSpin(0.0, 100.0, 5.0)
        self.accuracy.setObjectName("rewards.accuracy_weight")
        self.accuracy.setToolTip(tooltip_for("rewards", "accuracy_weight"))
        self.format = SliderSpin(0.0, 100.0, 5.0)
        self.format.setObjectName("rewards.format_weight")
        self.format.setToolTip(tooltip_for("rewards", "format_weight"))
        self.hacking_note = note_label("warning")
        self.credit_form = ConfigForm(model, [("rewards", "format_credit")])
        self.credit_note = wrapped_label(muted=True)  # why the format credit matters
        self.credit_note.setTextFormat(Qt.TextFormat.PlainText)  # the tags are text
        weights = QGroupBox("What counts as a good answer")
        wform = QFormLayout(weights)
        wform.addRow("Accuracy weight", self.accuracy)
        wform.addRow("Format weight", self.format)
        wform.addRow(self.credit_form)
        wform.addRow(self.credit_note)
        wform.addRow(self.hacking_note)
        self.scoring_form = ConfigForm(
            model,
            [
                ("rewards", "answer_extraction"),
                ("rewards", "answer_checker"),
                ("rewards", "think_tag"),
                ("rewards", "answer_tag"),
                ("rewards", "numeric_tolerance"),
            ],
        )
        wform.addRow(self.scoring_form)
        self.file_test = ScoreFileRow(self._current_rewards, data=lambda: self.model.config.data)
        wform.addRow(self.file_test)

        self.editor = CodeEditor()
        self.editor.setObjectName("rewards.custom_checker")
        self.editor.setToolTip(tooltip_for("rewards", "custom_checker"))
        self.editor.setPlaceholderText(
            "Optional. Write check(completion, answer, prompt) returning a number, or press "
            "'Insert example'. Leave empty to use only accuracy and format."
        )
        self.editor.setMinimumHeight(140)
        self.compile_note = note_label("error")
        self.trust_note = note_label("warning")
        self.trust_note.setText(
            "This checker came with the session and has not been trusted, so it does not run. "
            "Review the code below (it would run on this computer with your permissions), then "
            "press Trust and enable — or remove it."
        )
        self.trust_button = QPushButton("Trust and enable")
        self.trust_button.setToolTip(
            "You have read this code and accept that it runs on this computer with your "
            "permissions. Remembered for this exact code."
        )
        self.remove_button = QPushButton("Remove checker")
        self.remove_button.setToolTip(
            "Delete this code from the settings; score with accuracy and format only"
        )
        trust_row = QHBoxLayout()
        trust_row.addStretch(1)
        trust_row.addWidget(self.remove_button)
        trust_row.addWidget(self.trust_button)
        self.trust_box = QWidget()
        trust_col = QVBoxLayout(self.trust_box)
        trust_col.setContentsMargins(0, 0, 0, 0)
        trust_col.addWidget(self.trust_note)
        trust_col.addLayout(trust_row)
        self.example_button = QPushButton("Insert example")
        self.test_button = QPushButton("Test checker")
        self.test_button.setToolTip(TEST_TIP)
        self.test_status = QLabel()
        self.test_status.setWordWrap(True)  # a long result wraps; it never widens the panel
        self.results_table = QTableWidget(0, 4)
        self.results_table.setHorizontalHeaderLabels(["Completion", "Answer", "Score", "Error"])
        header = self.results_table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        for narrow in (1, 2):  # the gold answer and the score: as wide as they are
            header.setSectionResizeMode(narrow, QHeaderView.ResizeMode.ResizeToContents)
        self.results_table.verticalHeader().setVisible(False)
        self.results_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.results_table.setMinimumHeight(120)
        self.checker_form = ConfigForm(
            model,
            [
                ("rewards", "custom_weight"),
                ("rewards", "checker_timeout_s"),
                ("rewards", "checker_memory_mb"),
            ],
        )
        buttons = QHBoxLayout()
        buttons.addWidget(self.example_button)
        buttons.addStretch(1)
        buttons.addWidget(self.test_button)
        checker = QGroupBox("Your own checker (Python)")
        ccol = QVBoxLayout(checker)
        ccol.addWidget(
            wrapped_label(
                "Runs in a separate process with a time limit. An error or a time-out gives that "
                "answer no score (not 0), and the error shows in the rollout inspector.",
                muted=True,
            )
        )
        ccol.addWidget(self.trust_box)
        ccol.addWidget(self.editor, 2)
        ccol.addWidget(self.compile_note)
        ccol.addLayout(buttons)
        ccol.addWidget(self.test_status)
        ccol.addWidget(self.results_table, 1)
        ccol.addWidget(self.checker_form)

        layout = QVBoxLayout(self)
        layout.addWidget(weights)
        layout.addWidget(checker, 1)

        self._compile_timer = QTimer(self, singleShot=True, interval=300)
        self._compile_timer.timeout.connect(self._on_compile_timer_timeout)
        self.accuracy.value_edited.connect(
            lambda v: model.set_value("rewards", "accuracy_weight", float(v))
        )
        self.format.value_edited.connect(
            lambda v: model.set_value("rewards", "format_weight", float(v))
        )
        self.editor.textChanged.connect(self._compile_timer.start)
        self.example_button.clicked.connect(self._on_example_clicked)
        self.test_button.clicked.connect(self.test_checker)
        self.trust_button.clicked.connect(self._on_trust_clicked)
        self.remove_button.clicked.connect(self._on_remove_clicked)
        model.config_changed.connect(self._on_model_config_changed)
        model.config_replaced.connect(self._load)
        model.trust_changed.connect(self._on_model_trust_changed)
        self._load()
        self._on_model_trust_changed(model.checker_trusted())

    # -- model -> widgets

    def _load(self) -> None:
        r = self.model.config.rewards
        self.accuracy.set_value(r.accuracy_weight)
        self.format.set_value(r.format_weight)
        if self.editor.toPlainText() != r.custom_checker:
            self.editor.blockSignals(True)
            self.editor.setPlainText(r.custom_checker)
            self.editor.blockSignals(False)
            self._check_compiles()
        self._update_hacking_note()
        self._update_credit_note()

    def _on_model_config_changed(self, section: str, name: str) -> None:
        if section == "rewards":
            self._load()

    def _update_hacking_note(self) -> None:
        r = self.model.config.rewards
        text = ""
        if r.format_weight > 0 and r.format_weight >= r.accuracy_weight:
            text = (
                "Reward hacking ahead: the format weight is at or above the accuracy weight, so "
                "the cheapest way to raise the reward is to emit the tags without solving "
                "anything. Keep format small (e.g. 0.2) and watch the held-out accuracy."
            )
        elif r.accuracy_weight == 0 and r.format_weight == 0 and not r.custom_checker.strip():
            text = "Every weight is 0: all answers score the same, so nothing can be learned."
        set_note(self.hacking_note, text)

    def _update_credit_note(self) -> None:
        r = self.model.config.rewards
        t, a = r.think_tag, r.answer_tag
        if r.format_credit == "per_tag":
            text = (
                f"Per tag: each tag in its place (<{t}> opening the answer, </{t}>, <{a}> right "
                f"after it, </{a}> closing it at the end) earns a quarter, so answers with more "
                "tags beat their siblings and the model learns the format a tag at a time. The "
                "full format still scores 1."
            )
        else:
            text = (
                f"All or nothing: only the whole <{t}>…</{t}><{a}>…</{a}> format scores. A "
                "model that never writes all four tags (most small real models at first) scores "
                "0 on every answer: the format reward has no spread in any group and teaches "
                "nothing. Choose per tag to give partial credit."
            )
        self.credit_note.setText(text)
        self.credit_note.setVisible(r.format_weight > 0)

    # -- checker editing

    def _on_example_clicked(self) -> None:
        self.editor.setPlainText(EXAMPLE_CHECKER)
        self._on_compile_timer_timeout()

    def _on_remove_clicked(self) -> None:
        self.editor.setPlainText("")
        self._on_compile_timer_timeout()

    def _on_trust_clicked(self) -> None:
        self.model.trust_checker()

    def _on_model_trust_changed(self, trusted: bool) -> None:
        self.trust_box.setVisible(not trusted)
        self.trust_note.setVisible(not trusted)
        self.editor.setReadOnly(not trusted)
        self.test_button.setEnabled(trusted)
        self.test_button.setToolTip(TEST_TIP if trusted else UNTRUSTED_CHECKER)
        self.file_test.set_trusted(trusted)

    def _on_compile_timer_timeout(self) -> None:
        if self.editor.toPlainText() != self.model.config.rewards.custom_checker:
            self.model.write_checker(self.editor.toPlainText())  # typed here: the user's code
        self._check_compiles()

    def _check_compiles(self) -> bool:
        source = self.editor.toPlainText()
        if not source.strip():
            set_note(self.compile_note, "")
            self.editor.mark_error_line(None)
            return True
        try:
            compile_checker(source)
        except CheckerError as exc:
            set_note(self.compile_note, str(exc))
            self.editor.mark_error_line(_line_of(str(exc)))
            return False
        set_note(self.compile_note, "")
        self.editor.mark_error_line(None)
        return True

    # -- testing

    def samples(self) -> list[tuple[str, str, str]]:
        """The latest rollouts' answers; [] before a run has any (the dataset's problems are
        read in the test's background job then: panels/checker_samples.py)."""
        rows = self.model.history.rollouts.latest_rows()[:SAMPLES_FROM_ROLLOUTS]
        return [(r["completion"], r["answer"], r["prompt"]) for r in rows]

    def _current_rewards(self):
        """The reward settings as shown (checker code being typed is written through first)."""
        self._compile_timer.stop()
        self._on_compile_timer_timeout()
        return self.model.config.rewards

    def test_checker(self) -> None:
        """Run the checker on the samples in the background; results fill the table."""
        self._compile_timer.stop()
        self._on_compile_timer_timeout()
        source = self.editor.toPlainText()
        if not source.strip():
            self.test_status.setText("Write a checker first (or insert the example).")
            return
        if not self.model.checker_trusted():
            self.test_status.setText("Trust the checker first.")
            return
        rollouts = self.samples()
        data = copy.deepcopy(self.model.config.data)
        r = self.model.config.rewards
        tags = (r.think_tag, r.answer_tag)
        self._tested_source = source
        timeout, memory = r.checker_timeout_s, r.checker_memory_mb

        def job():
            if rollouts:
                n = len(rollouts)
                where = f"the run's latest {n} answer{'s' if n > 1 else ''}"
                samples = rollouts
            else:
                samples, where = dataset_samples(data, *tags)
            return samples, where, test_checker(source, samples, timeout, memory)

        self.test_button.setEnabled(False)
        self.test_status.setText(
            "Testing on the run's latest answers…"
            if rollouts
            else "Testing on answers written for your dataset's first problems…"
        )
        self.tasks.submit("test", job, self._on_test_done)

    def _on_test_done(self, result, error) -> None:
        self.test_button.setEnabled(True)
        self.results_table.setRowCount(0)
        if error is not None:
            message = (
                str(error)
                if isinstance(error, CheckerError)
                else f"{type(error).__name__}: {error}"
            )
            self.test_status.setText("The checker could not load.")
            self.model.record_checker_test(self._tested_source, 1, 0, message)
            set_note(self.compile_note, message)
            self.editor.mark_error_line(_line_of(message))
            self.results = []
            return
        samples, where, results = result
        self.results = results
        self.tested_on = where
        failed = [r for r in results if r.error]
        self.model.record_checker_test(
            self._tested_source, len(failed), len(results), failed[0].error if failed else ""
        )
        self.test_status.setText(
            f"{len(results) - len(failed)} scored, {len(failed)} failed"
            + (f" (first failure at line {failed[0].line})" if failed and failed[0].line else "")
            + f". Tested on {where}."
        )
        self.editor.mark_error_line(next((r.line for r in failed if r.line), None))
        self.results_table.setRowCount(len(results))
        for i, ((completion, answer, prompt), res) in enumerate(zip(samples, results)):
            cells = [
                completion.replace("\n", " ⏎ ")[:200],
                answer,
                "" if res.value is None else f"{res.value:g}",
                "" if res.error is None else res.error,
            ]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(
                    f"Problem: {prompt}\n\nAnswer: {completion or '(empty)'}" if col == 0 else text
                )
                if res.error:
                    item.setForeground(QColor("#b3261e"))
                self.results_table.setItem(i, col, item)

    def fields(self) -> list[tuple[str, str]]:
        return [
            ("rewards", "accuracy_weight"),
            ("rewards", "format_weight"),
            ("rewards", "custom_checker"),
            *self.credit_form.editors,
            *self.scoring_form.editors,
            *self.checker_form.editors,
        ]


def _line_of(message: str) -> int | None:
    import re

    match = re.search(r"\bline (\d+)", message)
    return int(match.group(1)) if match else None
