"""The main window driven by a fake train function: plots and the inspector follow the run, the
inspector filters and pages old steps from disk, plot clicks jump to a step, failures show a
message and leave the app usable, closing during a run asks and waits, the layout is remembered,
exports work, and the scripted mode takes a screenshot."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, QSettings, Qt

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.app import ScriptedRun
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.run.worker import FAILED, FINISHED, RUNNING, STOPPED
from tests.support.dialogs import answer_box
from tests.support.fakes import make_fake_train

B, G, N = 2, 4, 5


def config(steps: int = N):
    return demo_config().replace(
        run={"max_steps": steps}, algorithm={"prompts_per_step": B, "num_generations": G}
    )


@pytest.fixture
def make_window(show_window, tmp_path):
    def make(train_fn=None, steps: int = N, **kwargs) -> MainWindow:
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        w = MainWindow(
            config(steps),
            train_fn or make_fake_train(),
            settings=settings,
            probe_device=False,
            **kwargs,
        )
        return show_window(w)

    return make


def run(qtbot, w: MainWindow, final: str = FINISHED) -> None:
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == final, timeout=10_000)
    w.plots.redraw()


def test_plots_and_inspector_follow_a_run(qtbot, make_window):
    w = make_window()
    run(qtbot, w)
    reward = w.plots.plots["reward"]
    x, y = reward.series[0].item.getOriginalDataset()
    assert len(x) == N and list(x) == [1, 2, 3, 4, 5]
    assert {s.key for s in reward.series} == {"reward", "part/accuracy", "part/format"}
    for name in ("zero", "length", "truncated", "kl", "loss", "entropy", "lr", "grad_norm"):
        assert len(w.plots.plots[name].series[0].item.getOriginalDataset()[0]) == N, name
    assert w.plots.heat_image.image.shape[0] == N
    assert w.inspector.table_model.rowCount() == B * G * N
    assert w.inspector.visible_rows() == B * G  # the latest step
    assert "step 5 / 5" in w.controls.progress_label.text()
    assert w.controls.progress.value() == w.controls.progress.maximum() == 5
    assert w.model.history.finished["status"] == "completed"


def test_inspector_filters_by_step_sign_errors_and_text(qtbot, make_window):
    w = make_window(make_fake_train(error_every=2))
    run(qtbot, w)
    ins = w.inspector
    ins.mode_box.setCurrentIndex(ins.mode_box.findData("all"))
    assert ins.visible_rows() == B * G * N
    ins.sign_box.setCurrentIndex(ins.sign_box.findData("+"))
    assert ins.visible_rows() == (B - 1) * (G // 2) * N  # odd answers of groups with spread
    ins.sign_box.setCurrentIndex(ins.sign_box.findData("0"))
    assert ins.visible_rows() == G * N  # group 0 has no spread
    ins.sign_box.setCurrentIndex(0)
    ins.errors_box.setChecked(True)
    assert ins.visible_rows() == B * (G // 2) * N
    ins.errors_box.setChecked(False)
    ins.search.setText("What is 3 × 1?")
    assert ins.visible_rows() == G
    ins.search.clear()
    ins.show_step(2)
    assert ins.visible_rows() == B * G
    assert "Step 2" in ins.detail.toPlainText()
    # Sorting by advantage puts the pushed-down answers first.
    col = ins.table_model.column("Advantage")
    ins.table.sortByColumn(col, Qt.SortOrder.AscendingOrder)
    assert ins.filters.view_model.index(0, col).data() == "-1.000"


def test_unscored_rows_read_no_score_and_are_never_filtered_or_sorted_as_zero(qtbot, make_window):
    # The last two answers of group 1 could not be scored (the checker timed out): they have
    # no advantage. Before, they showed "0", were listed under "No signal" and sorted as 0.
    w = make_window(make_fake_train(unscored=2), steps=1)
    run(qtbot, w)
    ins = w.inspector
    adv_col = ins.table_model.column("Advantage")
    texts = [ins.filters.view_model.index(r, adv_col).data() for r in range(ins.visible_rows())]
    assert texts.count("no score") == 2 and texts.count("0") == G  # group 0 has no spread
    ins.sign_box.setCurrentIndex(ins.sign_box.findData("0"))
    assert ins.visible_rows() == G  # only group 0: unscored rows are not "no signal"
    ins.sign_box.setCurrentIndex(ins.sign_box.findData("n"))
    assert ins.visible_rows() == 2
    ins.table.selectRow(0)
    text = ins.detail.toPlainText()
    assert "no score" in text and "not trained on" in text and "timed out" in text
    ins.sign_box.setCurrentIndex(0)
    ins.table.sortByColumn(adv_col, Qt.SortOrder.DescendingOrder)
    shown = [ins.filters.view_model.index(r, adv_col).data() for r in range(ins.visible_rows())]
    assert shown[-2:] == ["no score", "no score"] and shown[0] == "+1.000"
    prompt_col = ins.table_model.column("Prompt")
    assert ins.filters.view_model.index(0, prompt_col).data() == "What is 1 × 1?"


def test_detail_pane_explains_the_advantage_and_highlights_tags(qtbot, make_window):
    w = make_window()
    run(qtbot, w)
    ins = w.inspector
    ins.show_step(3)
    ins.table.selectRow(5)  # group 1, answer 1: reward 1 against a group mean of 0.5
    html = ins.detail.toHtml()
    text = ins.detail.toPlainText()
    assert "advantage +1.000" in text and "made more likely" in text
    assert "#e6f4ea" in html  # the answer block is highlighted
    ins.table.selectRow(0)  # group 0: every answer scored the same
    assert "teaches nothing" in ins.detail.toPlainText()


def test_clicking_a_plot_point_jumps_to_that_steps_rollouts(qtbot, make_window):
    w = make_window()
    run(qtbot, w)
    plot = w.plots.plots["reward"].plot
    qtbot.wait(200)  # let the view settle on its auto range, as it has before a user clicks
    scene_pos = plot.vb.mapViewToScene(QPointF(2.1, float(w.model.history.metric("reward")[1])))
    view_pos = w.plots.canvas.mapFromScene(scene_pos)
    qtbot.mouseClick(w.plots.canvas.viewport(), Qt.MouseButton.LeftButton, pos=view_pos)
    qtbot.waitUntil(lambda: w.tabs.currentWidget() is w.inspector, timeout=3000)
    assert w.inspector.mode() == "one" and w.inspector.step_spin.value() == 2
    assert w.inspector.visible_rows() == B * G


def test_old_steps_leave_memory_and_are_paged_back_from_the_run_folder(qtbot, make_window):
    w = make_window(max_rollout_rows=2 * B * G)  # two steps in memory
    run(qtbot, w)
    ins = w.inspector
    assert ins.table_model.rowCount() == 2 * B * G
    assert (
        "limit 16" in ins.limit_label.text()
        and "read back from the run folder" in ins.limit_label.text()
    )
    ins.show_step(1)
    assert ins.visible_rows() == B * G
    assert (
        ins.filters.view_model.index(0, ins.table_model.column("Prompt")).data() == "What is 1 × 0?"
    )
    ins.mode_box.setCurrentIndex(ins.mode_box.findData("latest"))
    assert ins.table_model.rowCount() == 2 * B * G  # the paged step left again


def test_pause_resume_and_stop_from_the_controls(qtbot, make_window):
    w = make_window(make_fake_train(delay=0.05), steps=1000)
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.history.num_steps >= 2, timeout=10_000)
    with qtbot.waitSignal(w.model.pause_reached, timeout=5000):
        w.controls.pause_action.trigger()
    assert w.controls.pause_action.text() == "Resume"
    assert "Paused after step" in w.state_label.text()
    held = w.model.history.num_steps
    qtbot.wait(300)
    assert w.model.history.num_steps == held
    w.controls.pause_action.trigger()
    assert w.model.state == RUNNING
    qtbot.waitUntil(lambda: w.model.history.num_steps > held, timeout=5000)
    w.controls.stop_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == STOPPED, timeout=10_000)
    assert w.controls.start_action.isEnabled()


def test_a_failed_run_shows_the_error_and_the_app_stays_usable(qtbot, make_window):
    w = make_window(make_fake_train(fail_message="Model folder not found: /nope. Check the path."))
    run(qtbot, w, final=FAILED)
    assert w.message_bar.kind == "error" and "Model folder not found" in w.message_bar.message()
    assert "Traceback" not in w.message_bar.message()
    assert w.controls.start_action.isEnabled() and not w.controls.stop_action.isEnabled()
    w.model.runner.train_fn = make_fake_train()
    run(qtbot, w)
    assert w.model.history.num_steps == N


def test_invalid_settings_refuse_to_start_and_say_why(qtbot, make_window):
    w = make_window()
    w.model.set_value("model", "name_or_path", "")
    assert not w.start_run()
    assert "Choose a model" in w.message_bar.message() and w.model.state == "idle"


def test_the_reward_hacking_warning_shows_when_starting(qtbot, make_window):
    w = make_window()
    w.model.set_value("rewards", "format_weight", 1.0)
    run(qtbot, w)
    assert w.message_bar.kind == "warning" and "reward hacking" in w.message_bar.message()


def test_closing_during_a_run_asks_then_stops_and_waits(qtbot, make_window, monkeypatch):
    w = make_window(make_fake_train(delay=0.05), steps=1000)
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.history.num_steps >= 1, timeout=10_000)
    monkeypatch.setattr(w, "ask_stop_on_close", lambda: False)
    w.close()
    assert w.isVisible() and w.model.state == RUNNING  # "no": keep training
    monkeypatch.setattr(w, "ask_stop_on_close", lambda: True)
    with qtbot.waitSignal(w.closed, timeout=10_000):
        w.close()
    assert not w.model.runner.active and w.model.state == STOPPED
    assert w.model.history.finished["status"] == "stopped"


def test_the_layout_is_remembered(qtbot, make_window):
    w = make_window()
    w.docks["log"].hide()
    w.plots.smoothing.setValue(60)
    w.close()
    again = make_window()
    assert again.docks["log"].isHidden() and again.plots.smoothing.value() == 60


def test_history_and_plots_export(qtbot, make_window, tmp_path):
    w = make_window()
    run(qtbot, w)
    assert w.plots.export_history_csv(str(tmp_path / "h.csv")).endswith("h.csv")
    assert (tmp_path / "h.csv").read_text().count("\n") == N + 1
    item = w.plots.plots["reward"].plot
    png = w.plots.export_plot(item, "Reward", "png", str(tmp_path / "reward.png"))
    svg = w.plots.export_plot(item, "Reward", "svg", str(tmp_path / "reward.svg"))
    assert (tmp_path / "reward.png").stat().st_size > 1000 and png.endswith(".png")
    assert "<svg" in (tmp_path / "reward.svg").read_text() and svg.endswith(".svg")


def test_hover_shows_the_values_at_a_step(qtbot, make_window):
    w = make_window()
    run(qtbot, w)
    plot = w.plots.plots["kl"].plot
    qtbot.wait(200)
    w.plots._on_scene_mouse_moved(plot.vb.mapViewToScene(QPointF(3.2, 0.03)))
    assert "Step 3" in w.plots.readout.text() and "0.03" in w.plots.readout.text()


class _AppStub:
    def __init__(self):
        self.code = None

    def processEvents(self):  # noqa: N802 (Qt API)
        pass

    def exit(self, code):
        self.code = code


def test_scripted_mode_stops_after_n_steps_and_saves_a_screenshot(qtbot, make_window, tmp_path):
    w = make_window(make_fake_train(delay=0.02), steps=1000)
    app = _AppStub()
    shot = tmp_path / "shot.png"
    ScriptedRun(w, app, autostart=True, quit_after=3, screenshot=str(shot))
    qtbot.waitUntil(lambda: app.code is not None, timeout=10_000)
    assert app.code == 0 and shot.stat().st_size > 10_000
    assert w.model.state == STOPPED and w.model.history.num_steps == 3


def test_scripted_mode_exits_non_zero_when_the_run_fails(qtbot, make_window):
    w = make_window(make_fake_train(fail_message="Out of memory."))
    app = _AppStub()
    ScriptedRun(w, app, autostart=True, quit_after=3, screenshot=None)
    qtbot.waitUntil(lambda: app.code is not None, timeout=10_000)
    assert app.code == 1


def _alerting_train(config, control, run_dir=None, resume=False):
    from grpo_desktop.engine.events import Alert, RunFinished, RunStarted
    from tests.support.fakes import fake_events

    yield RunStarted("fake", config.to_dict(), 0, 1, "cpu (fake)", "fake-model", 10, 1)
    yield from fake_events(1, 1, B, G)
    yield Alert(1, "checker_timeouts", "critical", "Your checker timed out.", "Make it quick.")
    yield RunFinished("completed", 1, "done", None)


def test_alerts_reach_a_banner_the_log_the_status_bar_and_the_history(qtbot, make_window):
    w = make_window(_alerting_train, steps=1)
    run(qtbot, w)
    assert w.alarms.kinds() == ["checker_timeouts"] and not w.message_bar.isVisible()
    text = w.alarms.banner("checker_timeouts").plain_text()
    assert "Your checker timed out." in text and "What to try: Make it quick." in text
    assert "Step 1: Your checker timed out. Make it quick." in w.log_view.toPlainText()
    assert w.model.history.alerts[0]["kind"] == "checker_timeouts"


def test_start_after_a_failed_checker_test_asks_first(qtbot, make_window):
    w = make_window(steps=1)
    panel = w.reward_panel
    panel.editor.setPlainText(
        "def check(completion, answer, prompt):\n    raise ValueError('broken')\n"
    )
    panel.test_checker()
    qtbot.waitUntil(lambda: panel.test_button.isEnabled(), timeout=30_000)
    seen: list = []
    answer_box("Cancel", seen)
    assert not w.start_run()
    # the samples: right, wrong and plain answers to 3 of the dataset's problems, one empty
    assert seen and "failed on 10 of 10 samples" in seen[0] and w.model.state == "idle"
    answer_box("Start Anyway", seen)
    assert w.start_run()
    qtbot.waitUntil(lambda: w.model.state == FINISHED, timeout=10_000)
    assert len(seen) == 2
    # A fixed checker that passes its test starts without asking.
    panel.editor.setPlainText("def check(completion, answer, prompt):\n    return 1.0\n")
    panel.test_checker()
    qtbot.waitUntil(lambda: panel.test_button.isEnabled(), timeout=30_000)
    assert w.model.failed_checker_test() is None
