"""The Rollouts table as a user meets it in a 1366 × 768 window (issue 27 §3): a Completion
column with each answer's first line and all of it in the tooltip, every column inside the
table's width (no horizontal scrolling), the selected rollout kept while new steps arrive, and
the "No score" filter showing exactly the rows that read "no score".

The runs are fake train functions with the engine's signature (tests/support/fakes.py), run by
the window's real worker; the old-log case is a session whose run folder holds events written
before a reward part that did not score made the total unknown.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt
from PySide6.QtGui import QFontMetrics, QTextDocument

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import Rollouts, RunFinished, RunStarted, StepMetrics
from grpo_desktop.session.document import new_session
from grpo_desktop.ui.inspector.table import NO_SCORE, ROW_ROLE
from grpo_desktop.ui.main_window import MainWindow
from tests.support.fakes import event_log, fake_events, make_fake_train

B, G = 2, 4
LONG = (
    "<think>First I add the tens: 40 + 30 = 70, then the ones: 5 + 6 = 11, so the sum is "
    "70 + 11 = 81, which I check once more by counting up from 45 in steps of ten.</think>"
)


def config(steps: int):
    return demo_config().replace(
        run={"max_steps": steps}, algorithm={"prompts_per_step": B, "num_generations": G}
    )


def completion(step: int, i: int) -> str:
    return f"{LONG} (try {i} at step {step})\nSecond line\n<answer>{81 + i}</answer>"


def long_train(delay: float = 0.0, error_every: int = 0):
    """make_fake_train's run with long, three-line completions."""
    import time

    def train(cfg, control, run_dir=None, resume=False):
        with event_log(run_dir) as emit:
            total = cfg.run.max_steps
            yield emit(RunStarted("long", cfg.to_dict(), 0, total, "cpu (fake)", "fake", 10, 1))
            step = 0
            for step in range(1, total + 1):
                control.wait_if_paused()
                if control.should_stop(step - 1):
                    step -= 1
                    break
                rollouts, metrics = fake_events(step, total, B, G, error_every)
                for i, row in enumerate(rollouts.rows):
                    row["completion"] = completion(step, i)
                yield emit(rollouts)
                yield emit(metrics)
                if delay:
                    time.sleep(delay)
            yield emit(RunFinished("completed", step, f"completed at {step}", None))

    return train


@pytest.fixture
def make_window(show_window, tmp_path):
    def make(train_fn, steps: int) -> MainWindow:
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        w = show_window(MainWindow(config(steps), train_fn, settings=settings, probe_device=False))
        w.resize(1366, 768)
        w.tabs.setCurrentWidget(w.inspector)
        return w

    return make


def run(qtbot, w: MainWindow) -> None:
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == "finished", timeout=20_000)
    qtbot.wait(50)  # let the layout settle


def cell(ins, row: int, name: str, role=Qt.ItemDataRole.DisplayRole):
    view = ins.filters.view_model
    return view.index(row, ins.table_model.column(name)).data(role)


def plain(tip: str) -> str:
    doc = QTextDocument()
    doc.setHtml(tip)
    return doc.toPlainText()


def assert_columns_fit(ins) -> None:
    table = ins.table
    assert table.horizontalScrollBar().maximum() == 0
    width = table.viewport().width()
    for col, name in enumerate(ins.column_names()):
        if name == "key":
            continue
        if name == "Checker error" and not ins.table_model.has_errors:
            assert table.isColumnHidden(col)  # empty: no room taken
            continue
        assert not table.isColumnHidden(col), name
        left = table.horizontalHeader().sectionViewportPosition(col)
        assert table.columnWidth(col) > 20 and left >= 0 and left + table.columnWidth(col) <= width


def test_completion_column_shows_the_first_line_elided_with_the_full_text_in_its_tooltip(
    qtbot, make_window
):
    w = make_window(long_train(), steps=1)
    run(qtbot, w)
    ins = w.inspector
    col = ins.table_model.column("Completion")
    assert not ins.table.isColumnHidden(col) and ins.table.columnWidth(col) > 150
    assert col == ins.table_model.column("Prompt") + 1  # beside the prompt, not off to the right
    shown = cell(ins, 0, "Completion")
    assert shown == f"{LONG} (try 0 at step 1) …"  # the first line, and more follows
    assert plain(cell(ins, 0, "Completion", Qt.ItemDataRole.ToolTipRole)) == completion(1, 0)
    # Wider than its column, so the view draws it elided ("…" at the right edge).
    assert ins.table.textElideMode() == Qt.TextElideMode.ElideRight
    metrics = QFontMetrics(ins.table.font())
    assert metrics.horizontalAdvance(shown) > ins.table.columnWidth(col)
    # The prompt is not cut short either: all of it in the cell, elided only by the view.
    assert cell(ins, 0, "Prompt") == "What is 1 × 0?"
    assert plain(cell(ins, 0, "Prompt", Qt.ItemDataRole.ToolTipRole)) == "What is 1 × 0?"


@pytest.mark.parametrize("error_every", [0, 2])
def test_every_column_fits_a_1366_by_768_window(qtbot, make_window, error_every):
    w = make_window(long_train(error_every=error_every), steps=2)
    run(qtbot, w)
    ins = w.inspector
    assert w.width() == 1366 and w.height() == 768
    assert ins.table_model.has_errors == bool(error_every)
    assert_columns_fit(ins)
    ins.mode_box.setCurrentIndex(ins.mode_box.findData("all"))
    assert_columns_fit(ins)
    # Dragging a column's edge wider takes the room from Completion: still no scrolling.
    length = ins.table_model.column("Length")
    before = ins.table.columnWidth(length)
    completion = ins.table.columnWidth(ins.table_model.column("Completion"))
    header = ins.table.horizontalHeader()
    edge = QPoint(header.sectionViewportPosition(length) + before - 2, header.height() // 2)
    qtbot.mousePress(header.viewport(), Qt.MouseButton.LeftButton, pos=edge)
    qtbot.mouseMove(header.viewport(), edge + QPoint(10, 0))
    qtbot.mouseMove(header.viewport(), edge + QPoint(20, 0))
    qtbot.mouseRelease(header.viewport(), Qt.MouseButton.LeftButton, pos=edge + QPoint(20, 0))
    assert ins.table.columnWidth(length) == before + 20
    assert ins.table.columnWidth(ins.table_model.column("Completion")) == completion - 20
    assert ins.table.horizontalScrollBar().maximum() == 0
    w.resize(1100, 700)  # a smaller window still fits
    qtbot.waitUntil(lambda: ins.table.viewport().width() < 900, timeout=3000)
    assert_columns_fit(ins)


def test_the_selected_rollout_stays_selected_when_a_new_step_arrives(qtbot, make_window):
    w = make_window(long_train(delay=0.2), steps=6)
    ins = w.inspector
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.history.last_step >= 1, timeout=10_000)
    w.controls.pause_action.trigger()  # hold the run at a known step while the user clicks
    qtbot.waitUntil(lambda: w.controls.paused_at is not None, timeout=10_000)
    paused = w.controls.paused_at
    ins.table.selectRow(5)  # group 1, answer 1 of the step shown
    picked = tuple(ins.table.currentIndex().data(ROW_ROLE))
    assert picked == (paused, 5)
    detail = ins.detail.toPlainText()
    assert f"(try 5 at step {paused})" in detail
    w.controls.pause_action.trigger()  # resume: the next steps arrive
    qtbot.waitUntil(lambda: w.model.history.last_step >= paused + 1, timeout=10_000)
    qtbot.wait(50)
    # Still the same rollout, still selected, its detail still open; the new step is listed.
    assert tuple(ins.table.currentIndex().data(ROW_ROLE)) == picked
    assert ins.table.selectionModel().isRowSelected(ins.table.currentIndex().row())
    assert ins.detail.toPlainText() == detail
    steps = {cell(ins, r, "Step") for r in range(ins.visible_rows())}
    latest = str(w.model.history.last_step)
    assert steps == {str(paused), latest}
    assert ins.visible_rows() == B * G + 1
    assert f"selected (step {paused})" in ins.limit_label.text()
    qtbot.waitUntil(lambda: w.model.state == "finished", timeout=20_000)
    assert tuple(ins.table.currentIndex().data(ROW_ROLE)) == picked
    # Selecting a row of the latest step lets the older one go.
    row = next(r for r in range(ins.visible_rows()) if cell(ins, r, "Step") == "6")
    ins.table.selectRow(row)
    assert {cell(ins, r, "Step") for r in range(ins.visible_rows())} == {"6"}
    assert ins.visible_rows() == B * G
    assert "selected (step" not in ins.limit_label.text()


def test_all_steps_keeps_the_selected_rollout_as_steps_arrive(qtbot, make_window):
    w = make_window(long_train(delay=0.2), steps=6)
    ins = w.inspector
    ins.mode_box.setCurrentIndex(ins.mode_box.findData("all"))
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.history.last_step >= 1, timeout=10_000)
    w.controls.pause_action.trigger()
    qtbot.waitUntil(lambda: w.controls.paused_at is not None, timeout=10_000)
    ins.table.selectRow(2)
    picked = tuple(ins.table.currentIndex().data(ROW_ROLE))
    w.controls.pause_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == "finished", timeout=20_000)
    assert ins.visible_rows() == 6 * B * G
    assert tuple(ins.table.currentIndex().data(ROW_ROLE)) == picked


def old_log_session(tmp_path):
    """A session whose events.jsonl was written before an unscored weighted part made the total
    unknown: one answer's custom part did not score but its total (1.2) and advantage were
    still summed; another could not be scored at all (total None), as the engine writes now."""
    cfg = config(1)
    doc = new_session(str(tmp_path / "old.grpo"), cfg)
    rows = []
    for i in range(G):
        parts = {"accuracy": float(i % 2), "format": 1.0, "custom": 1.0}
        reward = parts["accuracy"] + 0.2
        rows.append(
            {
                "group": 0,
                "completion": f"<answer>{i}</answer>",
                "answer": "1",
                "rewards": parts,
                "reward": reward,
                "advantage": 1.0 if i % 2 else -1.0,
                "length": 5,
                "truncated": False,
                "error": None,
            }
        )
    rows[1]["rewards"]["custom"] = None  # old log: summed without the checker's part
    rows[1]["error"] = "check() raised ValueError at line 3: bad"
    rows[2].update(rewards={"accuracy": None, "format": 1.0, "custom": 1.0}, reward=None)
    rows[2]["advantage"] = None  # no reference answer: total unknown, as the engine writes it
    with event_log(doc.run_dir) as emit:
        emit(RunStarted("old", cfg.to_dict(), 0, 1, "cpu", "tiny", 10, 1))
        emit(Rollouts(1, rows, ["What is 1?"]))
        emit(StepMetrics(1, 1, {"reward": 0.7}, {}, elapsed=0.1))
        emit(RunFinished("completed", 1, "completed at 1", None))
    return doc.path


def reads_no_score(ins, row: int) -> bool:
    view = ins.filters.view_model
    return any(
        view.index(row, c).data() == NO_SCORE
        for c in range(view.columnCount())
        if not ins.table.isColumnHidden(c)
    )


def test_no_score_filter_shows_exactly_the_rows_that_read_no_score(qtbot, make_window, tmp_path):
    w = make_window(make_fake_train(), steps=1)
    assert w.session.open_session(old_log_session(tmp_path))
    ins = w.inspector
    ins.show_step(1)
    assert ins.visible_rows() == G
    reading = [r for r in range(G) if reads_no_score(ins, r)]
    completions = sorted(cell(ins, r, "Completion") for r in reading)
    assert completions == ["<answer>1</answer>", "<answer>2</answer>"]
    ins.sign_box.setCurrentIndex(ins.sign_box.findData("n"))
    assert ins.visible_rows() == 2
    assert all(reads_no_score(ins, r) for r in range(2))
    assert sorted(cell(ins, r, "Completion") for r in range(2)) == completions
    # The old row keeps its logged advantage: it is also among the answers pushed up.
    ins.sign_box.setCurrentIndex(ins.sign_box.findData("+"))
    assert "<answer>1</answer>" in [cell(ins, r, "Completion") for r in range(ins.visible_rows())]


def test_no_score_filter_on_a_live_run_with_unscored_answers(qtbot, make_window):
    w = make_window(make_fake_train(unscored=3), steps=2)
    run(qtbot, w)
    ins = w.inspector
    ins.mode_box.setCurrentIndex(ins.mode_box.findData("all"))
    expected = sum(reads_no_score(ins, r) for r in range(ins.visible_rows()))
    assert expected == 2 * 3
    ins.sign_box.setCurrentIndex(ins.sign_box.findData("n"))
    assert ins.visible_rows() == expected
    assert all(reads_no_score(ins, r) for r in range(ins.visible_rows()))
