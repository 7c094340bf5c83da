"""Alarms in the window: each kind's banner appears once with what it means and what to try,
"Dismiss for this run" silences that kind, a dashed marker lands on the right plots at the
alarm's step, and a saved session shows its alarms (banners and markers) again when reopened.

Driven by a fake train function that writes events.jsonl like the engine; the engine's side
(which alarms fire when) is tests/engine/health/test_health.py.
"""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import Alert, RunFinished, RunStarted
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.run.worker import FINISHED
from tests.support.fakes import event_log, fake_events

B, G, N = 2, 4, 6
GATE = threading.Event()  # the run waits after step 3 until the test has dismissed the banner
HACK = Alert(
    3,
    "reward_hacking",
    "warning",
    "The training reward rose by 0.30 between steps 0 and 3 while held-out accuracy fell.",
    "Give accuracy the largest weight.",
)


def alarming_train(config, control, run_dir=None, resume=False):
    """Six steps; reward hacking at step 3, the checker's time-outs at steps 2 and 4 (a kind
    that repeats), reward hacking again at step 5 (after the user dismissed it)."""
    with event_log(run_dir) as emit:
        yield emit(RunStarted("fake", config.to_dict(), 0, N, "cpu (fake)", "fake-model", 10, 1))
        for step in range(1, N + 1):
            control.wait_if_paused()
            for event in fake_events(step, N, B, G):
                yield emit(event)
            if step in (2, 4):
                yield emit(
                    Alert(step, "checker_timeouts", "critical", f"Timed out {step}.", "Fix.")
                )
            if step == 3:
                yield emit(HACK)
                GATE.wait(10)
            if step == 5:
                yield emit(Alert(5, "reward_hacking", "warning", "Again.", "Still."))
        yield emit(RunFinished("completed", N, "done", None))


@pytest.fixture
def make_window(show_window, tmp_path):
    def make() -> MainWindow:
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        cfg = demo_config().replace(
            run={"max_steps": N}, algorithm={"prompts_per_step": B, "num_generations": G}
        )
        w = MainWindow(cfg, alarming_train, settings=settings, probe_device=False)
        return show_window(w)

    return make


def test_banner_once_dismiss_silences_the_kind_markers_and_reopening(qtbot, make_window, tmp_path):
    w = make_window()
    assert w.alarms.kinds() == []
    GATE.clear()
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: "reward_hacking" in w.alarms.kinds(), timeout=10_000)
    assert w.alarms.kinds() == ["reward_hacking", "checker_timeouts"]
    assert w.alarms.banner("reward_hacking").isVisible()  # the newest alarm is the one shown
    text = w.alarms.banner("reward_hacking").plain_text()
    assert text.startswith("Possible reward hacking  ·  step 3\n")
    assert HACK.message in text and "What to try: Give accuracy the largest weight." in text
    assert "held-out accuracy" in w.alarms.banner("reward_hacking").toolTip()  # the explanation
    assert "Alert at step 3" in w.statusBar().currentMessage()
    assert "Step 3: " + HACK.message in w.log_view.toPlainText()  # the log line
    w.alarms.banner("reward_hacking").dismiss_button.click()
    assert w.alarms.kinds() == ["checker_timeouts"]
    GATE.set()
    qtbot.waitUntil(lambda: w.model.state == FINISHED, timeout=10_000)
    # The repeated time-outs updated their one banner; the dismissed kind stayed away.
    assert w.alarms.kinds() == ["checker_timeouts"]
    assert "step 4" in w.alarms.banner("checker_timeouts").plain_text()
    assert [a["kind"] for a in w.model.history.alerts].count("reward_hacking") == 2
    w.plots.redraw()
    markers = w.plots.markers
    assert markers.steps("reward") == markers.steps("eval") == [3, 5]
    assert markers.steps("truncated") == [2, 4] and markers.steps("kl") == []
    lines = [line for name, _, _, line in markers.lines if name == "reward"]
    assert lines[0].value() == 3 and lines[0] in w.plots.plots["reward"].plot.items

    path = str(tmp_path / "alarms.grpo")
    assert w.session.save_as(path)
    other = make_window()
    assert other.session.open_session(path)
    assert other.alarms.kinds() == ["reward_hacking", "checker_timeouts"]  # shown again
    assert "step 5" in other.alarms.banner("reward_hacking").plain_text()  # the latest
    other.plots.redraw()
    assert other.plots.markers.steps("reward") == [3, 5]
