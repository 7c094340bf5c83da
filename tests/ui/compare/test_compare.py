"""The Compare tab driven as a user drives it, on the built-in demo model and a real trained run.

Sessions hold a copy of conftest's `trained_run` (the demo model trained for real with LoRA, a
checkpoint after each of its 2 steps). The tests pick the sides, press Run (the button or
Ctrl+Return), wait for the table, filter it, open a row, export it through the real file dialog,
cancel with Esc, and see the tab turned off while training runs or before any checkpoint.
"""

from __future__ import annotations

import functools
import json

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.runs.files import read_run_config
from grpo_desktop.engine.variants.compare_table import (
    CATEGORIES,
    FIXED,
    read_csv,
)
from grpo_desktop.engine.variants.eval_target import held_out_examples
from grpo_desktop.ui.compare import tips
from grpo_desktop.ui.compare.runner import live_threads
from grpo_desktop.ui.compare.table import ANSWER_A, ANSWER_B, PROBLEM
from grpo_desktop.ui.compare.view import CompareView
from grpo_desktop.ui.main_window import MainWindow
from tests.support.dialogs import when_modal
from tests.support.fakes import make_fake_train
from tests.support.sessions import session_on_disk

WAIT_MS = 90_000


@pytest.fixture
def make_view(make_tab):
    """`make_view(doc, train_fn=None)`: a CompareView (tests/ui/conftest.py's `make_tab`)."""
    return functools.partial(make_tab, CompareView)


def _items(box) -> list[str]:
    return [box.itemText(i) for i in range(box.count())]


def _focus(qtbot, view: CompareView, widget) -> None:
    """Give `widget` the keyboard focus in the active window, as a click into it would."""
    view.activateWindow()
    qtbot.waitUntil(view.isActiveWindow)
    widget.setFocus()
    qtbot.waitUntil(widget.hasFocus)


def _wait(qtbot, view: CompareView) -> None:
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)


def test_base_vs_latest_fills_the_table_filters_and_opens_a_row(qtbot, make_view, lora_session):
    view = make_view(lora_session)
    # both pickers offer the base and every checkpoint: base before, the newest after
    assert _items(view.side_a) == _items(view.side_b) == ["Base model", "Step 1", "Step 2 (latest)"]
    assert (view.side_a.currentData(), view.side_b.currentData()) == ("base", "step-2")
    assert not view.note.isVisible() and view.run_button.isEnabled()
    view.count.setValue(6)
    qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    assert view.runner.busy and view.cancel_button.isEnabled() and not view.run_button.isEnabled()
    assert view.progress.isVisible() and view.progress_label.text() == "Loading the model…"
    _wait(qtbot, view)
    assert not view.message_bar.message(), view.message_bar.message()
    assert not view.progress.isVisible() and view.run_button.isEnabled()

    c = view.results.comparison
    held = held_out_examples(read_run_config(lora_session.run_dir), 6, 0)
    assert [r.problem for r in c.rows] == [ex.problem for ex in held]  # eval's problems, in order
    s = c.summary
    assert view.results.summary.text().startswith(s.text())
    assert (
        "Base model: " in view.results.summary.text()
        and "→ Step 2: " in view.results.summary.text()
    )
    assert view.results.proxy.rowCount() == 6
    header = view.results.table_model.horizontalHeaderItem
    assert (header(ANSWER_A).text(), header(ANSWER_B).text()) == ("A: Base model", "B: Step 2")
    first = c.rows[0]
    a_cell = view.results.proxy.index(0, ANSWER_A).data()
    assert a_cell == ("✓ " if first.correct_a else "✗ ") + (first.answer_a or "no answer")
    assert view.results.proxy.index(0, PROBLEM).data() == first.problem

    # each filter shows exactly its category's rows, its count on the button
    assert view.results.filter_buttons[""].text() == "All (6)"
    for key in CATEGORIES:
        button = view.results.filter_buttons[key]
        assert button.text().endswith(f"({s.counts[key]})")
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert [r.category for r in view.results.shown_rows()] == [key] * s.counts[key]
    assert sum(s.counts.values()) == 6
    qtbot.mouseClick(view.results.filter_buttons[""], Qt.MouseButton.LeftButton)
    assert view.results.shown_rows() == c.rows

    # a double-click shows both full answers
    at = view.results.table.visualRect(view.results.proxy.index(1, PROBLEM)).center()
    qtbot.mouseClick(
        view.results.table.viewport(), Qt.MouseButton.LeftButton, pos=at
    )  # a double-click
    qtbot.mouseDClick(
        view.results.table.viewport(), Qt.MouseButton.LeftButton, pos=at
    )  # press first
    assert view.results.detail is not None and view.results.detail.isVisible()
    assert view.results.detail.answers[0].toPlainText() == c.rows[1].completion_a
    assert view.results.detail.answers[1].toPlainText() == c.rows[1].completion_b
    assert "Base model" in view.results.detail.headers[0].text()


def test_export_csv_through_the_real_dialog(qtbot, make_view, lora_session, tmp_path):
    view = make_view(lora_session)
    view.count.setValue(3)
    view.side_a.setCurrentIndex(view.side_a.findData("step-1"))
    _focus(qtbot, view, view.count)
    qtbot.keyClick(view.count, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert view.runner.busy  # Ctrl+Return runs
    _wait(qtbot, view)
    assert view.results.comparison.a.label == "Step 1" and view.results.export_button.isEnabled()
    target = str(tmp_path / "out" / "mine.csv")
    (tmp_path / "out").mkdir()
    seen = []

    def answer(dialog: QFileDialog) -> None:
        seen.append(dialog.windowTitle())
        dialog.selectFile(target)
        dialog.accept()

    view.results.set_filter(FIXED)  # the export holds every row, not only the filtered ones
    when_modal(QFileDialog, answer)
    qtbot.mouseClick(view.results.export_button, Qt.MouseButton.LeftButton)
    assert seen == ["Export the comparison as CSV"]
    assert (
        read_csv(target) == view.results.comparison.rows and len(view.results.comparison.rows) == 3
    )
    assert view.message_bar.kind == "info" and target in view.message_bar.message()


def test_problems_from_a_file_chosen_in_the_dialog(qtbot, make_view, lora_session, tmp_path):
    view = make_view(lora_session)
    problems = tmp_path / "mine.jsonl"
    rows = [{"question": "What is 11 × 11?", "answer": "121"}, {"question": "What is 9 × 9?"}]
    problems.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    when_modal(QFileDialog, lambda d: (d.selectFile(str(problems)), d.accept()))
    view.source_box.setCurrentIndex(view.source_box.count() - 1)
    view.source_box.activated.emit(view.source_box.count() - 1)  # as a click on the item does
    assert view.source_box.currentText() == "mine.jsonl" and view.problem_file() == str(problems)
    assert view.run()
    _wait(qtbot, view)
    assert [r.problem for r in view.results.comparison.rows] == [
        "What is 11 × 11?"
    ]  # 9 × 9: no answer
    assert "mine.jsonl problems" in view.results.summary.text()


def test_escape_cancels_and_keeps_what_both_sides_finished(qtbot, make_view, lora_session):
    view = make_view(lora_session)
    view.count.setValue(40)
    assert view.run()
    qtbot.waitUntil(lambda: view.progress.maximum() == 80, timeout=WAIT_MS)  # answering
    _focus(qtbot, view, view.results.table)
    qtbot.keyClick(view.results.table, Qt.Key.Key_Escape)
    assert not view.cancel_button.isEnabled()
    _wait(qtbot, view)
    c = view.results.comparison
    assert c.cancelled and c.rows == [] and c.asked == 40  # stopped inside side A's batch
    assert view.results.summary.text().startswith("Cancelled before any problem was answered")
    assert view.run_button.isEnabled() and not view.results.export_button.isEnabled()


def test_training_turns_compare_off_with_the_reason(qtbot, make_view, lora_session):
    view = make_view(lora_session, train_fn=make_fake_train(delay=0.2))
    assert view.model.start(resume=True) == []  # continuing: the checkpoints stay
    assert not view.run_button.isEnabled() and view.note.text() == tips.TRAINING
    assert tips.TRAINING in view.run_button.toolTip()
    assert not view.run() and view.message_bar.message() == tips.TRAINING
    view.model.stop()
    qtbot.waitUntil(lambda: not view.model.runner.active, timeout=WAIT_MS)
    assert view.run_button.isEnabled() and not view.note.isVisible()


def test_before_any_checkpoint_run_is_off_with_the_reason(qtbot, make_view, tmp_path):
    view = make_view(session_on_disk(tmp_path))
    assert _items(view.side_a) == ["Base model"]
    assert view.note.text() == tips.NO_CHECKPOINT and not view.run_button.isEnabled()
    assert not view.side_b.isEnabled()
    assert not view.run() and view.message_bar.message() == tips.NO_CHECKPOINT


def test_the_same_model_on_both_sides_cannot_run(qtbot, make_view, lora_session):
    view = make_view(lora_session)
    view.side_a.setCurrentIndex(view.side_a.findData("step-2"))
    assert not view.run_button.isEnabled() and tips.SAME_SIDES in view.run_button.toolTip()
    assert not view.run() and view.message_bar.message() == tips.SAME_SIDES


def test_the_window_has_a_compare_tab_and_closing_stops_its_work(
    qtbot, show_window, lora_session, tmp_path
):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = show_window(
        MainWindow(demo_config(), session=lora_session.path, settings=settings, probe_device=False)
    )
    tabs = [window.tabs.tabText(i) for i in range(window.tabs.count())]
    assert "Compare" in tabs
    window.tabs.setCurrentWidget(window.compare_view)
    view = window.compare_view
    assert view.side_b.currentText() == "Step 2 (latest)"
    view.count.setValue(40)
    with qtbot.waitSignal(view.runner.progressed, timeout=WAIT_MS):
        assert view.run()
    window.close()
    assert not view.runner.busy and not live_threads()


def test_a_cancelled_comparisons_rows_and_a_save_that_fails(qtbot, make_view, tmp_path):
    """What the results say about a comparison cancelled after some problems, and a CSV that
    cannot be written (no model needed: the Comparison is made by hand)."""
    from grpo_desktop.engine.variants.compare import Comparison
    from grpo_desktop.engine.variants.compare_table import CompareRow
    from grpo_desktop.engine.variants.variant import BASE_VARIANT, Variant

    view = make_view(session_on_disk(tmp_path))
    step = Variant("step-40", "Step 40", 40, str(tmp_path), True)
    rows = [
        CompareRow("What is 2 × 3?", "6", "5", False, "6", True),
        CompareRow("What is 4 × 4?", "16", "16", True, None, False),
        CompareRow("What is 5 × 5?", "25", "25", True, "25", True),
    ]
    c = Comparison(BASE_VARIANT, step, rows, "held-out", asked=10, cancelled=True, seconds=3.0)
    view.results.show_comparison(c)
    # 2 of 3 right on each side → [21–94 %] (Wilson, the mirror of 1/3's [6–79 %]); one fixed,
    # one broken: McNemar p = 1
    assert view.results.summary.text() == (
        "Cancelled: 3 of 10 problems compared. Base model: 67 % [21–94 %] → Step 40: 67 % "
        "[21–94 %], 1 fixed, 1 broken (of 3) · McNemar p = 1 · held-out problems, 3 s"
    )
    assert view.results.proxy.index(1, ANSWER_B).data() == "✗ no answer"
    assert [b.text() for b in view.results.filter_buttons.values()] == [
        "All (3)",
        "Fixed (1)",
        "Broken (1)",
        "Both wrong (0)",
        "Both right (1)",
    ]
    assert view.results.export_csv(str(tmp_path / "no-such-folder" / "t.csv")) == ""
    bar = view.message_bar
    assert (
        bar.kind == "error" and "Cannot save" in bar.message() and "No such file" in bar.message()
    )
