"""Damaged files in the window: opening a session.json with a field
of the wrong type or not in UTF-8, a run whose events.jsonl has a broken line, or settings that
are not UTF-8 or empty shows a message naming the file and the problem, and the window stays up
on the session it had. The corpus is tests/fixtures/bad_inputs/ (see its README). The last test
launches the app as `grpo-desktop open BAD` / `--config BAD` does, in a subprocess: before, the
first exited with a traceback and the second crashed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.main_window import MainWindow
from tests.support.fakes import make_fake_train
from tests.support.paths import FIXTURES

CORPUS = os.path.join(FIXTURES, "bad_inputs")
SESSIONS = {
    "created_is_text": "'created' must be a number",
    "modified_is_list": "'modified' must be a number",
    "name_is_object": "'name' must be text",
    "run_is_number": "'run' must be text",
    "trained_is_text": "'trained' must be true or false",
    "layout_is_list": "'layout' must be an object",
    "not_utf8": "is not UTF-8 text (line 4 has the byte 0xe9)",
    "bad_event_line": "line 3 is not valid JSON at column 29",
}


@pytest.fixture
def corpus(tmp_path):
    shutil.copytree(CORPUS, tmp_path / "bad_inputs")
    return tmp_path / "bad_inputs"


@pytest.fixture
def window(qtbot, show_window, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)

    def make(**kwargs) -> MainWindow:
        cfg = demo_config().replace(run={"max_steps": 2})
        return show_window(
            MainWindow(cfg, make_fake_train(), settings=settings, probe_device=False, **kwargs)
        )

    return make


@pytest.mark.parametrize("name", list(SESSIONS))
def test_opening_a_damaged_session_shows_the_message_and_keeps_the_window(
    qtbot, window, corpus, name
):
    bundle = corpus / "sessions" / f"{name}.grpo"
    w = window()
    before = w.model.doc.path
    assert not w.session.open_session(str(bundle))
    message = w.message_bar.message()
    assert w.message_bar.kind == "error" and SESSIONS[name] in message
    assert str(bundle) in message and "Traceback" not in message
    assert w.isVisible() and w.model.doc.path == before
    assert w.session.new_session()  # still usable


def test_a_window_asked_to_open_a_damaged_session_opens_on_an_untitled_one(qtbot, window, corpus):
    bundle = corpus / "sessions" / "created_is_text.grpo"
    w = window(session=str(bundle))
    assert w.isVisible() and "'created' must be a number" in w.message_bar.message()
    assert w.model.doc.path != str(bundle)


@pytest.mark.parametrize(
    "name, words", [("not_utf8", "is not UTF-8 text (line 28"), ("empty", "is empty")]
)
def test_importing_damaged_settings_shows_the_message_and_keeps_the_settings(
    qtbot, window, corpus, name, words
):
    w = window()
    saved = w.model.config.to_dict()
    path = str(corpus / "settings" / f"{name}.json")
    assert not w.session.open_config(path)
    assert w.message_bar.kind == "error" and words in w.message_bar.message()
    assert path in w.message_bar.message()
    assert w.model.config.to_dict() == saved and w.isVisible()


# `grpo-desktop ARGS` as launched (cli.main -> run_app); a timer reads what the window shows.
LAUNCH = textwrap.dedent(
    """
    import json, sys
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication
    from grpo_desktop.ui.main_window import MainWindow

    app = QApplication(sys.argv)
    seen = {}

    def look():
        w = next(w for w in app.topLevelWidgets() if isinstance(w, MainWindow))
        seen.update(visible=w.isVisible(), kind=w.message_bar.kind, text=w.message_bar.message())
        w.close()

    QTimer.singleShot(1000, look)
    from grpo_desktop.cli import main
    seen["code"] = main(json.loads(sys.argv[1]))
    print(json.dumps(seen))
    """
)


@pytest.mark.parametrize(
    "args, words",
    [
        (["open", "sessions/not_utf8.grpo"], "is not UTF-8 text (line 4"),
        (["open", "sessions/created_is_text.grpo"], "'created' must be a number"),
        (["--config", "settings/not_utf8.json"], "is not UTF-8 text (line 28"),
    ],
)
def test_a_plain_launch_on_a_damaged_file_stays_up_and_shows_the_message(
    corpus, tmp_path, args, words
):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    out = subprocess.run(
        [sys.executable, "-c", LAUNCH, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(corpus),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["visible"] and seen["kind"] == "error" and words in seen["text"], seen
    assert seen["code"] == 0
