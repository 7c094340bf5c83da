"""One calm message area (issue 27 §2): a session reopened after a crash brings four messages at
once (its alarm, its stopped run, the restored changes, the welcome of a first launch). They
share one strip of fixed height: the alarm is shown, "1 of 4" counts the rest, ‹ › step through
them, × dismisses each the way it always was dismissed, "More…" shows a line cut short in full,
and the tab bar and the plots never move while messages come and go (1366 × 768, the small
laptop screen of the issue)."""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QRect, QSettings
from PySide6.QtWidgets import QApplication, QMessageBox

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import Alert, RunFinished, RunStarted
from grpo_desktop.session import recovery
from grpo_desktop.ui.common.message_area import HEIGHT
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.welcome import DISMISSED_KEY
from tests.support.dialogs import when_modal
from tests.support.fakes import event_log, fake_events

STEPS, STOP_AT = 8, 4
HACK = Alert(
    3,
    "reward_hacking",
    "warning",
    "The training reward rose by 0.30 between steps 0 and 3 while held-out accuracy fell.",
    "Give accuracy the largest weight.",
)


def stopped_train(config, control, run_dir=None, resume=False):
    """Four of eight steps, the reward-hacking alarm at step 3, then stopped by the user."""
    with event_log(run_dir) as emit:
        yield emit(RunStarted("fake", config.to_dict(), 0, STEPS, "cpu (fake)", "fake", 10, 1))
        for step in range(1, STOP_AT + 1):
            for event in fake_events(step, STEPS, 2, 4):
                yield emit(event)
        yield emit(HACK)
        yield emit(RunFinished("stopped", STOP_AT, f"Stopped at step {STOP_AT}.", None))


@pytest.fixture
def make_window(show_window, tmp_path):
    def make(settings_name: str) -> MainWindow:
        settings = QSettings(str(tmp_path / settings_name), QSettings.Format.IniFormat)
        cfg = demo_config().replace(
            run={"max_steps": STEPS}, algorithm={"prompts_per_step": 2, "num_generations": 4}
        )
        w = show_window(MainWindow(cfg, stopped_train, settings=settings, probe_device=False))
        w.resize(1366, 768)
        return w

    return make


def _crashed_session(qtbot, make_window, tmp_path) -> str:
    """A saved session with a stopped run and its alarm, and a newer autosave of an edit."""
    w = make_window("first.ini")
    w.session.autosave_timer.setInterval(20)
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == "stopped", timeout=10_000)
    path = str(tmp_path / "crashed.grpo")
    assert w.session.save_as(path)
    w.model.set_value("run", "seed", 7)
    auto = os.path.join(path, recovery.AUTOSAVE_FILE)
    qtbot.waitUntil(lambda: os.path.isfile(auto), timeout=5000)
    return path


def _settle() -> None:
    for _ in range(5):
        QApplication.processEvents()


def _fixed_parts(w: MainWindow) -> tuple[QRect, QRect]:
    """Where the tab bar and the plots are, in window coordinates."""
    bar = w.tabs.tabBar()
    return (
        QRect(bar.mapTo(w, bar.rect().topLeft()), bar.size()),
        QRect(w.plots.mapTo(w, w.plots.rect().topLeft()), w.plots.size()),
    )


def test_four_messages_share_one_line_and_nothing_below_moves(qtbot, make_window, tmp_path):
    path = _crashed_session(qtbot, make_window, tmp_path)
    w = make_window("fresh.ini")  # a first launch: the welcome is up
    _settle()
    area = w.messages
    assert area.messages() == [w.welcome] and w.welcome.isVisible()
    before = _fixed_parts(w)

    assert w.session.open_session(path, after_crash=True)
    _settle()
    alarm = w.alarms.banner("reward_hacking")
    assert area.messages() == [alarm, w.resume_banner, w.message_bar, w.welcome]
    assert "Restored the unsaved changes" in w.message_bar.message()
    assert area.current() is alarm and alarm.isVisible()
    assert not w.resume_banner.isVisible() and not w.welcome.isVisible()  # counted, not stacked
    assert area.position.text() == "1 of 4" and area.position.isVisible()
    assert area.height() == HEIGHT
    assert _fixed_parts(w) == before  # the tabs did not move when three messages came
    assert w.plots.height() >= 480  # was 344 with the four banners stacked (issue 27 §2)

    # The alarm's line is cut; its tooltip and "More…" hold the whole text with the advice.
    assert alarm.text.is_elided() and area.more_button.isVisible()
    assert "What to try: Give accuracy the largest weight." in alarm.text.toolTip()
    seen: list = []

    def read(box: QMessageBox) -> None:
        seen.append(box.text())
        box.accept()

    when_modal(QMessageBox, read)
    area.more_button.click()
    assert seen and HACK.message in seen[0] and "Give accuracy the largest weight." in seen[0]

    # ‹ › step through the others; each is shown in the same place.
    area.next_button.click()
    assert area.current() is w.resume_banner and w.resume_banner.isVisible()
    assert area.position.text() == "2 of 4"
    assert "stopped after step 4 of 8" in w.resume_banner.text.text()
    area.prev_button.click()
    area.prev_button.click()
    assert area.current() is w.welcome and area.position.text() == "4 of 4"

    # × dismisses each the way it is meant: the welcome for good, the alarm for this run.
    assert "for good" in area.dismiss_button.toolTip()
    area.dismiss_button.click()
    assert w.settings.value(DISMISSED_KEY, False, type=bool)
    assert area.current() is alarm and area.position.text() == "1 of 3"
    assert "until a new run starts" in area.dismiss_button.toolTip()
    area.dismiss_button.click()
    assert w.alarms.kinds() == [] and "reward_hacking" in w.alarms.dismissed
    assert area.current() is w.resume_banner
    area.dismiss_button.click()
    assert w.resume_banner.isHidden() and w.model.can_continue()  # Run ▸ Continue still there
    assert area.current() is w.message_bar and not area.position.isVisible()  # the last one
    area.dismiss_button.click()
    assert w.message_bar.message() == "" and area.messages() == []
    assert not area.dismiss_button.isVisible()
    _settle()
    assert _fixed_parts(w) == before and area.height() == HEIGHT  # gone: nothing moved either


def test_an_error_comes_to_the_front_a_lesser_message_only_adds_to_the_count(qtbot, make_window):
    w = make_window("fresh.ini")
    area = w.messages
    w.show_message("info", "Saved 3 problems to /tmp/x.jsonl.")
    assert area.current() is w.message_bar  # the info outranks the welcome
    w.welcome.show()  # (as at launch) a lesser message: counted, the info stays in front
    assert area.current() is w.message_bar and area.position.text() == "1 of 2"
    w.show_message("error", "Cannot start: the dataset file is empty.\nPick another file.")
    assert area.current() is w.message_bar and w.message_bar.isVisible()
    assert w.message_bar.message() == (
        "Cannot start: the dataset file is empty.\nPick another file."
    )
    assert "Pick another file." in w.message_bar.text.text()  # one line: "·" between the two
    w.message_bar.clear()
    assert area.current() is w.welcome and w.welcome.isVisible()
