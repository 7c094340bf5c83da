"""Unsaved settings are never dropped without asking: Quit (closing the window), Close Session,
New Session and Open Recent show the real Save / Don't Save / Cancel box, answered here from a
timer through `QApplication.activeModalWidget()` (the ask method is not replaced). The autosave
stays on disk until the question is answered; Cancel keeps the window, the session and the edits.
The last test launches the app the way `grpo-desktop` does (`cli.main`, `run_app`), in a
subprocess, and checks that a plain launch asks too (a scripted-mode helper that answers "discard" must
never be installed on a plain launch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMessageBox

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session import recovery
from grpo_desktop.session.document import load_session, new_session
from grpo_desktop.ui.main_window import MainWindow
from tests.support.dialogs import when_modal
from tests.support.fakes import make_fake_train

SAVE = QMessageBox.StandardButton.Save
DONT_SAVE = QMessageBox.StandardButton.Discard
CANCEL = QMessageBox.StandardButton.Cancel


def config():
    return demo_config().replace(run={"max_steps": 3})


@pytest.fixture
def window(qtbot, tmp_path):
    """A shown window whose questions are the real dialogs (nothing replaced)."""
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    made = []

    def make() -> MainWindow:
        w = MainWindow(config(), make_fake_train(), settings=settings, probe_device=False)
        w.session.autosave_timer.setInterval(20)
        qtbot.addWidget(w)
        w.show()
        made.append(w)
        return w

    yield make
    for w in made:  # teardown only: a window left dirty must not block on its question
        if w.isVisible():
            w.session.ask_save_changes = lambda _name: "discard"
            w.close()


def _autosave(doc) -> str:
    return os.path.join(doc.path, recovery.AUTOSAVE_FILE)


def answer_save_question(button, seen: list, autosave: str) -> None:
    """Once the "Save changes?" box is up: record its text, its buttons and whether the
    autosave file is still on disk at that moment, then click `button`."""

    def answer(box: QMessageBox) -> None:
        seen.append(
            {
                "title": box.windowTitle(),
                "text": box.text(),
                "buttons": sorted(b.text().replace("&", "") for b in box.buttons()),
                "autosave_there": os.path.isfile(autosave),
            }
        )
        box.button(button).click()

    when_modal(QMessageBox, answer, every_ms=10)


def _edit(qtbot, w, seed: int) -> str:
    """Change a setting and wait for its autosave; returns the autosave path."""
    w.model.set_value("run", "seed", seed)
    auto = _autosave(w.model.doc)
    qtbot.waitUntil(lambda: os.path.isfile(auto), timeout=5000)
    assert w.isWindowModified()
    return auto


def _named(w, tmp_path, name: str = "mine") -> str:
    path = str(tmp_path / f"{name}.grpo")
    assert w.session.save_as(path)
    return path


def test_quit_asks_and_cancel_keeps_the_window_the_edits_and_the_autosave(qtbot, window, tmp_path):
    w = window()
    path = _named(w, tmp_path)
    auto = _edit(qtbot, w, 11)
    seen: list = []
    answer_save_question(CANCEL, seen, auto)
    assert not w.close()
    assert len(seen) == 1 and seen[0]["title"] == "Save changes?"
    assert "mine" in seen[0]["text"]
    assert seen[0]["buttons"] == ["Cancel", "Don't Save", "Save"]
    assert seen[0]["autosave_there"]  # nothing deleted before the answer
    assert w.isVisible() and w.isWindowModified() and w.model.config.run.seed == 11
    assert os.path.isfile(auto)  # Cancel: the autosave stays
    assert os.path.isfile(recovery._marker(path))  # still open: the crash marker stays

    answer_save_question(DONT_SAVE, seen, auto)
    with qtbot.waitSignal(w.closed, timeout=5000):
        assert w.close()
    assert len(seen) == 2 and seen[1]["autosave_there"]
    assert not os.path.isfile(auto)  # answered Don't Save: now it goes
    assert load_session(path).config.run.seed == 0  # the saved file was not changed


def test_quit_and_save_writes_the_session_then_closes(qtbot, window, tmp_path):
    w = window()
    path = _named(w, tmp_path)
    auto = _edit(qtbot, w, 12)
    seen: list = []
    answer_save_question(SAVE, seen, auto)
    with qtbot.waitSignal(w.closed, timeout=5000):
        assert w.close()
    assert len(seen) == 1 and seen[0]["autosave_there"]
    assert load_session(path).config.run.seed == 12
    assert not os.path.isfile(auto)


def test_close_session_asks_and_cancel_stays_on_the_session(qtbot, window, tmp_path):
    w = window()
    path = _named(w, tmp_path)
    auto = _edit(qtbot, w, 13)
    seen: list = []
    answer_save_question(CANCEL, seen, auto)
    assert not w.session.close_session()
    assert len(seen) == 1 and seen[0]["autosave_there"]
    assert w.model.doc.path == path and w.model.config.run.seed == 13 and w.isWindowModified()
    assert os.path.isfile(auto)

    answer_save_question(DONT_SAVE, seen, auto)
    assert w.session.close_session()
    assert len(seen) == 2
    assert w.model.doc.path != path and recovery.is_untitled(w.model.doc)
    assert not os.path.isfile(auto) and load_session(path).config.run.seed == 0


def test_new_session_asks_and_save_keeps_the_edits_in_the_old_one(qtbot, window, tmp_path):
    w = window()
    path = _named(w, tmp_path)
    auto = _edit(qtbot, w, 14)
    seen: list = []
    answer_save_question(CANCEL, seen, auto)
    assert not w.session.new_session()
    assert len(seen) == 1 and w.model.doc.path == path and w.model.config.run.seed == 14

    answer_save_question(SAVE, seen, auto)
    assert w.session.new_session()
    assert len(seen) == 2 and seen[1]["autosave_there"]
    assert recovery.is_untitled(w.model.doc) and not w.isWindowModified()
    assert load_session(path).config.run.seed == 14  # saved before the switch
    assert not os.path.isfile(auto)


def test_open_recent_asks_and_cancel_stays_on_the_current_session(qtbot, window, tmp_path):
    other = new_session(str(tmp_path / "other.grpo"), config().replace(run={"seed": 99}))
    w = window()
    w.session._add_recent(other.path)
    path = _named(w, tmp_path)
    auto = _edit(qtbot, w, 15)
    w.session.rebuild_recent_menu()
    action = next(a for a in w.session.recent_menu.actions() if a.data() == other.path)
    seen: list = []
    answer_save_question(CANCEL, seen, auto)
    action.trigger()
    assert len(seen) == 1 and seen[0]["autosave_there"]
    assert w.model.doc.path == path and w.model.config.run.seed == 15 and os.path.isfile(auto)

    answer_save_question(DONT_SAVE, seen, auto)
    action.trigger()
    assert len(seen) == 2
    assert w.model.doc.path == other.path and w.model.config.run.seed == 99
    assert not os.path.isfile(auto) and load_session(path).config.run.seed == 0


# The app launched as `grpo-desktop` launches it (cli.main -> run_app, no scripted options);
# a timer inside that process edits a setting, closes the window and answers the real box.
LAUNCH = textwrap.dedent(
    """
    import json, os, sys
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox
    from grpo_desktop.session import recovery
    from grpo_desktop.ui.main_window import MainWindow

    app = QApplication(sys.argv)
    report = {"asked": [], "after_cancel": None}

    def window():
        return next(w for w in app.topLevelWidgets() if isinstance(w, MainWindow))

    def answer(button):
        box = app.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(10, lambda: answer(button))
            return
        auto = os.path.join(window().model.doc.path, recovery.AUTOSAVE_FILE)
        report["asked"].append([box.windowTitle(), os.path.isfile(auto)])
        box.button(button).click()

    def edit_then_quit():
        w = window()
        w.model.set_value("run", "seed", 21)
        w.session._on_autosave_timer_timeout()  # write the autosave now
        QTimer.singleShot(0, lambda: answer(QMessageBox.StandardButton.Cancel))
        w.close()
        report["after_cancel"] = [w.isVisible(), w.model.config.run.seed]
        QTimer.singleShot(0, lambda: answer(QMessageBox.StandardButton.Discard))
        QTimer.singleShot(3000, app.quit)  # a window that never asks closes on the first try
        w.close()

    QTimer.singleShot(500, edit_then_quit)
    from grpo_desktop.cli import main
    report["code"] = main([])
    print(json.dumps(report))
    """
)


def test_a_plain_launch_asks_before_discarding_unsaved_settings(tmp_path):
    env = dict(
        os.environ,
        QT_QPA_PLATFORM="offscreen",
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),  # QSettings of this launch
    )
    out = subprocess.run(
        [sys.executable, "-c", LAUNCH], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # Asked twice (Cancel, then Don't Save), each time with the autosave still on disk.
    assert report["asked"] == [["Save changes?", True], ["Save changes?", True]]
    assert report["after_cancel"] == [True, 21]  # Cancel kept the window and the edit
    assert report["code"] == 0
