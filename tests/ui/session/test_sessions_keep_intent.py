"""Sessions keep what the user meant (issue 27 §4), in a real window with the real dialogs:
- after "Don't Save", New Session (Ctrl+N) starts from the default settings, as Close Session
  (Ctrl+W) always did, never from the edits just discarded;
- a reopened session shows its run's log again (read back from the events its run folder keeps),
  as it shows its alarms;
- Open Recent lists the sessions the user named, not the "Untitled-…" ones they never named;
- Try, opened after a run, offers the run's newest checkpoint (not a step chosen in another
  session) and no longer says "No checkpoint yet".
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QMessageBox

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import (
    Alert,
    CheckpointSaved,
    EvalResult,
    LogMessage,
    RunFinished,
    RunStarted,
)
from grpo_desktop.engine.runs.layout import STATE_FILE, checkpoints_dir
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.try_it import tips as try_tips
from tests.support.dialogs import when_modal
from tests.support.fakes import event_log, fake_events

N = 40  # steps; a checkpoint every 10


def checkpointing_train(config, control, run_dir=None, resume=False):
    """Forty quick steps writing checkpoint folders (as the engine names them) every 10 steps,
    a hint, an alarm and a held-out evaluation on the way."""
    with event_log(run_dir) as emit:
        yield emit(RunStarted("fake", config.to_dict(), 0, N, "cpu (fake)", "fake-model", 10, 1))
        for step in range(1, N + 1):
            for event in fake_events(step, N, 2, 4):
                yield emit(event)
            if step == 5:
                yield emit(LogMessage(5, "warning", "Every answer of group 0 scored the same."))
                yield emit(
                    Alert(5, "no_signal", "warning", "Half the groups teach nothing.", "Raise G.")
                )
            if step % 10 == 0:
                folder = os.path.join(checkpoints_dir(run_dir), f"step-{step:08d}")
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, STATE_FILE), "w", encoding="utf-8") as fh:
                    json.dump({"step": step}, fh)
                yield emit(EvalResult(step, 0.25, 0.5, 8, 12.0))
                yield emit(CheckpointSaved(step, os.path.relpath(folder, run_dir)))
        yield emit(RunFinished("completed", N, "Finished all 40 steps.", None))


@pytest.fixture
def make_window(qtbot, tmp_path):
    """A shown window whose questions are the real dialogs (nothing replaced)."""
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    made = []

    def make() -> MainWindow:
        cfg = demo_config().replace(
            run={"max_steps": N}, algorithm={"prompts_per_step": 2, "num_generations": 4}
        )
        w = MainWindow(cfg, checkpointing_train, settings=settings, probe_device=False)
        qtbot.addWidget(w)
        w.show()
        made.append(w)
        return w

    yield make
    for w in made:  # teardown only: a window left dirty must not block on its question
        if w.isVisible():
            w.session.ask_save_changes = lambda _name: "discard"
            w.close()


def _train(qtbot, w: MainWindow) -> None:
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == "finished", timeout=20_000)


def _dont_save(seen: list) -> None:
    """Answer the next "Save changes?" box with Don't Save, from the event loop."""

    def answer(box: QMessageBox) -> None:
        seen.append(box.windowTitle())
        box.button(QMessageBox.StandardButton.Discard).click()

    when_modal(QMessageBox, answer, every_ms=10)


def _discardable_edits(w: MainWindow) -> None:
    """The edits of the issue: accuracy weight 0, format 1, the DAPO preset."""
    w.model.set_value("rewards", "accuracy_weight", 0.0)
    w.model.set_value("rewards", "format_weight", 1.0)
    w.model.apply_preset("dapo")
    assert w.model.dirty and w.model.matching_preset() == "dapo"


@pytest.mark.parametrize(("action", "keys"), [("new_action", "Ctrl+N"), ("close_action", "Ctrl+W")])
def test_after_dont_save_a_new_session_starts_from_the_defaults(
    qtbot, make_window, tmp_path, action, keys
):
    w = make_window()
    assert w.session.save_as(str(tmp_path / "mine.grpo"))
    _discardable_edits(w)
    seen: list = []
    _dont_save(seen)
    menu_action = getattr(w.session, action)
    assert menu_action.shortcut() == QKeySequence(keys)
    menu_action.trigger()
    assert seen == ["Save changes?"]
    assert w.model.doc.name == "Untitled" and not w.model.dirty
    assert w.model.config == demo_config()  # the defaults, not the edits just discarded
    assert w.model.config.rewards.accuracy_weight == demo_config().rewards.accuracy_weight
    assert w.model.matching_preset() != "dapo"


def test_a_reopened_session_shows_its_runs_log_again(qtbot, make_window, tmp_path):
    w = make_window()
    _train(qtbot, w)
    live = w.log_view.toPlainText().splitlines()
    path = str(tmp_path / "logged.grpo")
    assert w.session.save_as(path)
    w.close()

    again = make_window()
    assert again.session.open_session(path)
    reopened = again.log_view.toPlainText()
    assert "Opened the session logged" in reopened and "and the log of its run:" in reopened
    wanted = [
        line.split(" ", 1)[1]  # without its time
        for line in live
        if not line.split(" ", 1)[1].startswith(("Saving events", "Opened the session"))
    ]
    assert any("Every answer of group 0 scored the same." in line for line in wanted)
    assert any("Half the groups teach nothing. Raise G." in line for line in wanted)
    assert any(line.startswith("Held-out accuracy at step 40: 25%") for line in wanted)
    assert any(line.startswith("Run completed at step 40") for line in wanted)
    for line in wanted:
        assert line in reopened, line  # every line the run logged, read back
    assert again.alarms.kinds() == ["no_signal"]  # (the alarms came back before, too)


def test_open_recent_lists_only_the_sessions_the_user_named(qtbot, make_window, tmp_path):
    w = make_window()
    untitled = w.model.doc.path
    _train(qtbot, w)  # an untitled session with a run: kept on disk, not put in Open Recent
    assert os.path.isdir(untitled)
    named = str(tmp_path / "named.grpo")
    assert w.session.save_as(named)
    w.session.close_session()  # back to a new untitled session
    _train(qtbot, w)
    stale = w.model.doc.path  # an older version put trained untitled sessions in the list
    w.settings.setValue("sessions/recent", [stale, untitled, named])
    w.session.recent_menu.aboutToShow.emit()
    entries = [a.data() for a in w.session.recent_menu.actions() if a.data()]
    assert entries == [named]
    assert not any("Untitled" in a.text() for a in w.session.recent_menu.actions())


def test_try_after_a_run_offers_its_newest_checkpoint(qtbot, make_window, tmp_path):
    w = make_window()
    w.tabs.setCurrentWidget(w.try_view)  # looked at before the run: "No checkpoint yet"
    tv = w.try_view
    assert tv.trained_pane.status.text() == try_tips.NO_CHECKPOINT
    w.tabs.setCurrentWidget(w.plots)
    _train(qtbot, w)
    w.tabs.setCurrentWidget(tv)  # opened after the run
    assert tv.checkpoint_box.currentText() == "Step 40 (latest)"
    assert tv.trained_pane.status.text() != try_tips.NO_CHECKPOINT
    assert tv.checkpoint_box.isEnabled()

    # A step chosen in one session is not what Try offers in the next one.
    first = str(tmp_path / "first.grpo")
    assert w.session.save_as(first)
    other = str(tmp_path / "other.grpo")
    shutil.copytree(first, other)
    tv.checkpoint_box.setCurrentIndex(tv.checkpoint_box.findData("step-30"))
    assert tv.checkpoint_box.currentText() == "Step 30"
    assert w.session.open_session(other)
    assert tv.run_dir().startswith(other)
    assert tv.checkpoint_box.currentText() == "Step 40 (latest)"
    assert tv.trained_pane.status.text() != try_tips.NO_CHECKPOINT
