"""The Reward panel's "Test on a file…" as a user meets it: the real button, the real file dialog
answered from a QTimer, scoring off the GUI thread with the panel's current settings, and the
table and summary of the dialog it opens; a bad file gets a message naming its lines."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QFileDialog, QMessageBox

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.reward_panel import RewardPanel
from grpo_desktop.ui.panels.score_dialog import ScoreDialog
from grpo_desktop.ui.session.model import UNTRUSTED_CHECKER, SessionModel
from tests.support.dialogs import when_modal

pytestmark = pytest.mark.timeout(120)

RIGHT = "<think>17 × 24 = 340 + 68 = 408</think>\n<answer>408</answer>"
WRONG = "<think>17 × 20 = 340, plus 4 × 17 = 58, so 398</think><answer>398</answer>"
UNTAGGED = "17 times 24 is 408"
FRACTION = "<think>Half of one is a half.</think><answer>\\frac{1}{2}</answer>"
GSM8K_GOLD = "Natalia sold 48+24 = <<48+24=72>>72 clips altogether.\n#### 72"
SAMPLES = [
    {"prompt": "What is 17 × 24?", "completion": RIGHT, "answer": "408"},
    {"prompt": "What is 17 × 24?", "completion": WRONG, "answer": "408"},
    {"completion": UNTAGGED, "answer": 408},
    {"completion": FRACTION, "answer": "0.5"},  # math-verify, in its helper process (off-thread)
    {"completion": "<think>48 + 24</think><answer>72</answer>", "answer": GSM8K_GOLD},
    {"completion": "I do not know.", "answer": "12"},
]
CHECKER = """def check(completion, answer, prompt):
    if "know" in completion:
        raise ValueError("nothing to check")
    return 1.0 if answer in completion else 0.0
"""


@pytest.fixture
def model(qtbot, tmp_path):
    return SessionModel(SessionDocument(str(tmp_path / "score.grpo"), demo_config()))


@pytest.fixture
def panel(qtbot, model):
    panel = RewardPanel(model)
    qtbot.addWidget(panel)
    panel.show()
    return panel


@pytest.fixture
def samples(tmp_path) -> str:
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in SAMPLES))
    return str(path)


def _answer_file_dialog(path: str, seen: list) -> None:
    """Pick `path` in the real (non-native) QFileDialog once it is up."""

    def answer(dialog: QFileDialog) -> None:
        seen.append(dialog.windowTitle())
        dialog.selectFile(path)
        dialog.accept()

    when_modal(QFileDialog, answer)


def _opened_dialog(qtbot, panel) -> ScoreDialog:
    qtbot.waitUntil(
        lambda: panel.file_test.dialog is not None and panel.file_test.dialog.isVisible(),
        timeout=60_000,
    )
    return panel.file_test.dialog


def _column(dialog: ScoreDialog, name: str) -> list[str]:
    col = dialog.columns.index(name)
    return [dialog.table.item(i, col).text() for i in range(dialog.table.rowCount())]


def _plain(tooltip: str) -> str:
    doc = QTextDocument()
    doc.setHtml(tooltip)
    return doc.toPlainText()


def test_the_button_scores_the_file_chosen_in_the_dialog(qtbot, panel, samples, tmp_path):
    button = panel.file_test.button
    assert button.text() == "Test on a file…" and button.isEnabled()
    assert "silently broken reward is the most common way to waste a GRPO run" in button.toolTip()
    seen: list = []
    _answer_file_dialog(samples, seen)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert seen == ["Test the reward on a file of samples"]
    dialog = _opened_dialog(qtbot, panel)

    table = dialog.table
    assert table.rowCount() == 6
    assert dialog.columns == [
        "Line", "Completion", "Answer", "Extracted", "accuracy", "format", "Total", "Reason"
    ]  # fmt: skip
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert headers[4:6] == ["Accuracy\n× 1", "Format\n× 0.2"]  # the demo's weights
    assert _column(dialog, "Line") == ["1", "2", "3", "4", "5", "6"]
    # The GSM8K gold "… #### 72" reads as 72, the number 408 as "408".
    assert _column(dialog, "Answer") == ["408", "408", "408", "0.5", "72", "12"]
    assert _column(dialog, "Extracted") == [
        "408",
        "398",
        "408",
        "\\frac{1}{2}",
        "72",
        "(none found)",
    ]
    assert _column(dialog, "accuracy") == ["1", "0", "1", "1", "1", "0"]
    assert _column(dialog, "format") == ["1", "1", "0", "1", "1", "0"]
    # Totals: 1 + 0.2·1 = 1.2, 0 + 0.2 = 0.2, 1 + 0 = 1, 1.2, 1.2, 0 + 0 = 0.
    assert _column(dialog, "Total") == ["1.2", "0.2", "1", "1.2", "1.2", "0"]
    # "I do not know." has no final answer: the accuracy checker says so.
    assert _column(dialog, "Reason") == [""] * 5 + ["accuracy: no final answer found"]
    completion = table.item(0, 1)
    assert "⏎" in completion.text() and "\n" not in completion.text()  # one line in the cell
    assert _plain(completion.toolTip()) == RIGHT  # the whole completion in the tooltip
    # Summary: accuracy 4/6 = 0.667, format 4/6 = 0.667, total (1.2·3 + 0.2 + 1 + 0)/6 = 0.8.
    summary = dialog.summary_label.text()
    assert summary == (
        "6 samples · accuracy mean 0.667 · format mean 0.667 · reward mean 0.800 · "
        "0 checker errors · 0 unscored"
    )
    assert dialog.windowTitle() == "Reward test: samples.jsonl"
    assert dialog.grab().save(str(tmp_path / "score_dialog.png"))
    dialog.close()


def test_it_scores_with_the_settings_as_shown_including_a_checker_being_typed(
    qtbot, panel, model, samples
):
    panel.accuracy.spin.setValue(2.0)
    panel.editor.setPlainText(CHECKER)  # typed: the compile timer has not written it through yet
    panel.file_test.score(samples)  # what the button calls with the chosen path
    assert not panel.file_test.button.isEnabled()  # busy while it scores
    dialog = _opened_dialog(qtbot, panel)
    assert panel.file_test.button.isEnabled()
    assert dialog.columns[4:7] == ["accuracy", "format", "custom"]
    # custom: "408" in the right answer, not in "398", "408" in the untagged one; "0.5" is not
    # in the fraction; "72" is; "I do not know." raises.
    assert _column(dialog, "custom") == ["1", "0", "1", "0", "1", "no score"]
    # Totals with accuracy × 2, format × 0.2, custom × 1: 2 + 0.2 + 1 = 3.2; 0 + 0.2 + 0 = 0.2;
    # 2 + 0 + 1 = 3; 2 + 0.2 + 0 = 2.2; 3.2; the error row's total is unknown: its checker part
    # is missing (issue 27 §1), so neither 0 + 0 nor a 0 custom.
    assert _column(dialog, "Total") == ["3.2", "0.2", "3", "2.2", "3.2", "no score"]
    reason = _column(dialog, "Reason")[5]
    assert "ValueError at line 3" in reason and "nothing to check" in reason
    assert "1 checker error · 1 unscored" in dialog.summary_label.text()
    assert model.value("rewards", "custom_checker") == CHECKER
    dialog.close()


def test_a_bad_file_gets_a_message_naming_its_lines(qtbot, panel, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"completion": RIGHT, "answer": "408"}) + "\n{oops\n" + '{"answer": "1"}\n'
    )
    panel.file_test.score(str(bad))
    qtbot.waitUntil(
        lambda: panel.file_test.message is not None and panel.file_test.message.isVisible(),
        timeout=30_000,
    )
    box = panel.file_test.message
    assert isinstance(box, QMessageBox) and "bad.jsonl could not be scored" in box.text()
    details = box.informativeText()
    assert "line 2: not valid JSON" in details and 'line 3: no "completion" field' in details
    assert panel.file_test.dialog is None and panel.file_test.button.isEnabled()
    box.close()


def test_a_missing_file_and_broken_checker_code_get_messages(qtbot, panel, samples, tmp_path):
    panel.file_test.score(str(tmp_path / "gone.jsonl"))
    qtbot.waitUntil(lambda: panel.file_test.message is not None, timeout=30_000)
    assert "Sample file not found" in panel.file_test.message.informativeText()
    panel.file_test.message.close()
    panel.editor.setPlainText("def check(c, a, p)\n    return 1\n")
    panel.file_test.message = None
    panel.file_test.score(samples)
    qtbot.waitUntil(lambda: panel.file_test.message is not None, timeout=30_000)
    assert "line 1" in panel.file_test.message.informativeText()
    panel.file_test.message.close()


def test_an_untrusted_checker_keeps_the_button_disabled(qtbot, tmp_path):
    cfg = demo_config().replace(rewards={"custom_checker": CHECKER})
    model = SessionModel(SessionDocument(str(tmp_path / "shared.grpo"), cfg))
    panel = RewardPanel(model)
    qtbot.addWidget(panel)
    button = panel.file_test.button
    assert not button.isEnabled() and button.toolTip() == UNTRUSTED_CHECKER
    panel.trust_button.click()
    assert button.isEnabled() and "silently broken reward" in button.toolTip()
