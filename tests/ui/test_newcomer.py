"""What a newcomer meets: Start refused with the reason when the Dataset panel shows
that the held-out split leaves nothing to train on; no stale "Failed"/"Finished" in a new
session; no "0:00 left" once a continued run has its first step; the welcome panel, dismissed
once and never back."""

from __future__ import annotations

import json
import threading

import pytest
from PySide6.QtCore import QSettings, Qt

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import RunFinished, RunStarted, StepMetrics
from grpo_desktop.session.history import RunHistory
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.run.worker import FAILED, FINISHED
from tests.support.fakes import make_fake_train


def small_config(steps: int = 3):
    return demo_config().replace(
        run={"max_steps": steps}, algorithm={"prompts_per_step": 2, "num_generations": 4}
    )


@pytest.fixture
def make_window(show_window, tmp_path):
    def make(train_fn=None, steps: int = 3, settings_name: str = "settings.ini") -> MainWindow:
        settings = QSettings(str(tmp_path / settings_name), QSettings.Format.IniFormat)
        w = MainWindow(
            small_config(steps),
            train_fn or make_fake_train(),
            settings=settings,
            probe_device=False,
        )
        return show_window(w)

    return make


def test_start_is_refused_when_the_preview_shows_nothing_left_to_train_on(
    qtbot, make_window, tmp_path
):
    path = tmp_path / "five.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": f"{i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
            for i in range(5)
        )
    )
    w = make_window()
    w.docks["dataset"].raise_()
    model = w.model
    model.set_value("data", "source", "file")
    model.set_value("data", "path", str(path))
    model.set_value("data", "eval_size", 5)
    panel = w.dataset_panel
    qtbot.waitUntil(lambda: "leaves none" in panel.status_note.text(), timeout=15_000)
    w.docks["model"].raise_()
    assert not w.start_run()
    assert w.model.state == "idle" and not w.model.runner.active
    assert "Cannot start" in w.message_bar.message()
    assert "leaves none" in w.message_bar.message()
    assert not w.docks["dataset"].visibleRegion().isEmpty()  # the panel that says why is shown
    # Fixed in the panel: the preview follows and Start goes.
    model.set_value("data", "eval_size", 2)
    qtbot.waitUntil(
        lambda: "3</b> problems for training" in panel.counts_label.text(), timeout=15_000
    )
    assert w.start_run()
    qtbot.waitUntil(lambda: w.model.state == FINISHED, timeout=10_000)


@pytest.mark.parametrize("final", [FINISHED, FAILED])
def test_a_new_session_does_not_show_the_last_sessions_end(qtbot, make_window, final):
    fail = "boom" if final == FAILED else None
    w = make_window(make_fake_train(fail_message=fail))
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == final, timeout=10_000)
    label = "Failed" if final == FAILED else "Finished"
    assert w.state_label.text().startswith(label)
    assert w.session.new_session()
    assert w.state_label.text() == "Ready"
    assert "failed" not in w.controls.progress_label.text().lower()
    assert "finished" not in w.controls.progress_label.text().lower()
    assert w.controls.start_action.text() == "Start"


def _continued_train(release: threading.Event):
    """Run 1: steps 1-4, 10 s each by the clock. Run 2 (resume): its clock starts at 0 again,
    as the engine's does; it holds after its first step so the label can be read."""

    def train(config, control, run_dir=None, resume=False):
        total = config.run.max_steps
        start = 4 if resume else 0
        yield RunStarted(
            "fake", config.to_dict(), start, total, "cpu", "fake", 10, 1, resumed=resume
        )
        last = 4 if not resume else 5
        for step in range(start + 1, last + 1):
            elapsed = 10.0 * (step - start)
            yield StepMetrics(step, total, {"reward": 0.5, "step_time": 10.0}, {}, elapsed)
        if resume:
            release.wait(10)
        yield RunFinished("stopped", last, "stopped", None)

    return train


def test_continuing_a_run_shows_a_real_time_left_after_its_first_step(qtbot, make_window):
    release = threading.Event()
    w = make_window(_continued_train(release), steps=20)
    try:
        assert w.model.start() == []
        qtbot.waitUntil(lambda: not w.model.runner.active, timeout=10_000)
        assert w.model.start(resume=True) == []
        qtbot.waitUntil(lambda: w.model.history.last_step == 5, timeout=10_000)
        qtbot.waitUntil(lambda: "left" in w.controls.progress_label.text(), timeout=5000)
        # 15 steps to go at 10 s each: 2:30, not the 0:00 a clock gone back to 0 gave.
        assert w.controls.progress_label.text() == "step 5 / 20 · 2:30 left"
    finally:
        release.set()
    qtbot.waitUntil(lambda: not w.model.runner.active, timeout=10_000)


def test_seconds_per_step_counts_only_the_stretch_since_the_clock_restarted():
    h = RunHistory()
    h.append(RunStarted("r", {}, 0, 20, "cpu", "m"))
    for step in range(1, 5):
        h.append(StepMetrics(step, 20, {"step_time": 9.0}, {}, 10.0 * step))
    assert h.seconds_per_step() == pytest.approx(10.0)
    h.append(RunStarted("r", {}, 4, 20, "cpu", "m", resumed=True))
    h.append(StepMetrics(5, 20, {"step_time": 9.0}, {}, 12.0))  # one step since the restart
    assert h.seconds_per_step() == pytest.approx(9.0)
    h.append(StepMetrics(6, 20, {"step_time": 9.0}, {}, 20.0))
    assert h.seconds_per_step() == pytest.approx(8.0)
    assert h.eta_seconds() == pytest.approx(8.0 * 14)


def test_the_welcome_says_what_to_do_first_and_once_dismissed_never_comes_back(qtbot, make_window):
    w = make_window()
    assert w.welcome.isVisible()
    text = w.welcome.label.text()
    assert "Train the demo first" in text and "Start" in text and "Held-out accuracy" in text
    assert "Dataset" in text and "Rollouts" in text
    qtbot.mouseClick(w.welcome.got_it, Qt.MouseButton.LeftButton)
    assert not w.welcome.isVisible()
    w.close()
    again = make_window()  # the same settings file: a later launch
    assert not again.welcome.isVisible()
    again.controls.start_action.trigger()
    qtbot.waitUntil(lambda: again.model.state == FINISHED, timeout=10_000)
    assert not again.welcome.isVisible()


def test_starting_a_run_folds_the_welcome_until_the_next_launch(qtbot, make_window):
    w = make_window()
    assert w.welcome.isVisible()
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == FINISHED, timeout=10_000)
    assert not w.welcome.isVisible()
    w.close()
    assert make_window().welcome.isVisible()  # not dismissed: it is back
