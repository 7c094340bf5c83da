"""The reasoning-gym task picker and the task's settings form, as a user meets them: the real
dialog opened from the Dataset panel (answered from a timer), search, the example, choosing sets
the config; the settings form built from the task's config edits data.task_options; the preview
shows the task's problems."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QCheckBox, QLineEdit, QSpinBox

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.dataset_panel import DatasetPanel
from grpo_desktop.ui.panels.task_picker import TaskPickerDialog, parse_list
from grpo_desktop.ui.session.model import SessionModel
from tests.support.dialogs import when_modal


def panel_on_tasks(qtbot, tmp_path, show: bool = False) -> tuple[DatasetPanel, SessionModel]:
    """A Dataset panel on a task run; shown, it previews (and loads the model's tokenizer for
    the template), so only the preview test shows it."""
    cfg = demo_config().replace(
        data={"source": "task", "task": "basic_arithmetic", "task_size": 30, "eval_size": 5}
    )
    model = SessionModel(SessionDocument(str(tmp_path / "t.grpo"), cfg))
    panel = DatasetPanel(model)
    qtbot.addWidget(panel)
    if show:
        panel.show()
    return panel, model


def until(condition, then, every_ms: int = 20, tries: int = 500) -> None:
    """Call `then` from the event loop once `condition()` holds (the dialog loads in the
    background while it is modal)."""
    if condition():
        then()
    elif tries:
        QTimer.singleShot(every_ms, lambda: until(condition, then, every_ms, tries - 1))


def test_the_picker_searches_shows_an_example_and_choosing_sets_the_config(qtbot, tmp_path):
    panel, model = panel_on_tasks(qtbot, tmp_path)
    model.set_value("data", "task_options", {"max_terms": 3})
    seen: dict = {}

    def act(dialog: TaskPickerDialog) -> None:
        def loaded() -> None:
            seen["all"] = dialog.names(visible_only=False)
            seen["current"] = dialog.chosen()
            dialog.search.setText("logic knight")
            seen["knight"] = dialog.names()
            dialog.search.setText("countdown")
            seen["countdown"] = dialog.names()
            dialog.select("countdown")
            until(lambda: "Its answer" in dialog.example.toPlainText(), example_shown)

        def example_shown() -> None:
            seen["example"] = dialog.example.toPlainText()
            dialog.ok_button.click()

        until(lambda: dialog.list.count() > 0, loaded)

    when_modal(TaskPickerDialog, act)
    panel.choose_task()
    assert len(seen["all"]) > 90 and seen["current"] == "basic_arithmetic"
    assert seen["knight"] == ["knights_knaves"]
    assert seen["countdown"] == ["countdown"]
    assert "using all of these numbers" in seen["example"] and "min_numbers" in seen["example"]
    assert model.value("data", "task") == "countdown"
    assert model.value("data", "task_options") == {}  # a new task starts from its defaults
    assert panel.task_edit.text() == "countdown"


def test_cancelling_the_picker_changes_nothing(qtbot, tmp_path):
    panel, model = panel_on_tasks(qtbot, tmp_path)
    when_modal(TaskPickerDialog, lambda d: d.reject())
    panel.choose_task()
    assert model.value("data", "task") == "basic_arithmetic"


def test_the_settings_form_is_built_from_the_tasks_config(qtbot, tmp_path):
    panel, model = panel_on_tasks(qtbot, tmp_path)
    form = panel.task_options
    qtbot.waitUntil(lambda: "max_terms" in form.editors, timeout=20000)
    spin = form.findChild(QSpinBox, "task_option.max_terms")
    assert spin is not None and spin.value() == 6  # the task's default
    assert isinstance(form.editors["allow_parentheses"], QCheckBox)
    operators = form.findChild(QLineEdit, "task_option.operators")
    assert operators.text() == "+, -, *, /"
    spin.setValue(3)
    spin.editingFinished.emit()
    assert model.value("data", "task_options") == {"max_terms": 3}
    operators.setText("+, -")
    operators.editingFinished.emit()
    assert model.value("data", "task_options") == {"max_terms": 3, "operators": ["+", "-"]}
    form.reset_button.click()
    assert model.value("data", "task_options") == {}
    assert spin.value() == 6
    assert parse_list("1, 2.5, x", [1]) == [1, 2.5, "x"]


def test_the_preview_shows_the_tasks_problems(qtbot, tmp_path):
    panel, _model = panel_on_tasks(qtbot, tmp_path, show=True)
    panel.refresh_preview()
    qtbot.waitUntil(lambda: "held out" in panel.counts_label.text(), timeout=30000)
    qtbot.waitUntil(lambda: not panel.cancel_button.isVisible(), timeout=60000)  # the template
    assert "reasoning-gym task basic_arithmetic" in panel.counts_label.text()
    assert panel.table.rowCount() > 0 and "Calculate" in panel.table.item(0, 0).text()
    assert not panel.path_widget.isVisible() and panel.task_widget.isVisible()


def test_the_reward_panels_file_test_scores_a_task_run_with_the_tasks_checker(qtbot, tmp_path):
    import json

    from grpo_desktop.engine.rewards.task_score import TaskVerifier
    from grpo_desktop.ui.panels.reward_panel import RewardPanel

    cfg = demo_config().replace(
        data={"source": "task", "task": "countdown", "task_size": 10, "eval_size": 2}
    )
    model = SessionModel(SessionDocument(str(tmp_path / "r.grpo"), cfg))
    panel = RewardPanel(model)
    qtbot.addWidget(panel)
    entry = TaskVerifier(cfg.data).problems.train[0]
    q, a = entry["question"].strip(), entry["answer"]
    rows = [
        {"prompt": q, "completion": f"<answer>{a}</answer>", "answer": a},
        {"prompt": q, "completion": "<answer>1 + 2</answer>", "answer": a},
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    panel.file_test.score(str(path))
    qtbot.waitUntil(lambda: panel.file_test.dialog is not None, timeout=60_000)
    report = panel.file_test.dialog.report
    assert [r["rewards"]["accuracy"] for r in report.results] == [1.0, 0.05]


def test_settings_a_form_cannot_edit_are_named_and_left_at_the_tasks_defaults(qtbot, tmp_path):
    panel, model = panel_on_tasks(qtbot, tmp_path)
    model.set_value("data", "task", "time_intervals")
    form = panel.task_options
    qtbot.waitUntil(lambda: "max_date_difference_days" in form.editors, timeout=20000)
    assert "min_date" not in form.editors
    assert "(not editable here): min_time, max_time, min_date, max_date" in form.note.text()
