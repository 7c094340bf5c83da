"""Qt guards and window fixtures for the tests that show windows (tests/ui, tests/cli,
tests/scenarios import them into their conftest): any Qt warning and any QThread left running
fail the test; `show_window` shows a MainWindow whose questions are answered for the test.
Imports Qt only once a test has loaded it."""

from __future__ import annotations

import gc
import sys

import pytest

# Said by Qt's offscreen platform plugin itself whenever a top-level window is shown; it is about
# the headless test platform, not about anything the app does.
QT_PLATFORM_NOISE = (
    "This plugin does not support propagateSizeHints()",
    # the offscreen platform cannot raise a window that is shown already, or grab the keyboard
    # for a popup menu (a context menu in the tests)
    "This plugin does not support raise()",
    "This plugin does not support grabbing the keyboard",
)


@pytest.fixture(autouse=True)
def _qt_strict(request):
    """Qt warnings fail the test (a message handler collects them), and so does a QThread still
    running at the end of the test (checked for every test once Qt is loaded)."""
    if "PySide6.QtCore" not in sys.modules:
        yield
        return
    from PySide6.QtCore import QtMsgType, qInstallMessageHandler

    problems: list[str] = []
    previous = None

    def handler(kind, context, message):
        serious = kind not in (QtMsgType.QtDebugMsg, QtMsgType.QtInfoMsg)
        if serious and not any(noise in message for noise in QT_PLATFORM_NOISE):
            problems.append(f"{kind.name}: {message}")
        if previous is not None:
            previous(kind, context, message)

    previous = qInstallMessageHandler(handler)
    try:
        yield
    finally:
        name = request.node.module.__name__
        leaked = _running_qthreads(
            deep=".ui." in name or name.rsplit(".", 1)[-1].startswith("test_ui_")
        )
        qInstallMessageHandler(previous)
    if leaked:
        pytest.fail(f"the test left {len(leaked)} QThread(s) running: {leaked}")
    if problems:
        pytest.fail("Qt warnings during the test:\n" + "\n".join(problems))


def _running_qthreads(deep: bool) -> list[str]:
    """Names of QThreads still running; background jobs get a few seconds to finish first.
    `deep` also scans every live QThread wrapper (slower, so only for the UI tests)."""
    found = []
    if "grpo_desktop.ui.common.tasks" in sys.modules:
        from grpo_desktop.ui.common import tasks

        if not tasks.wait_for_all(10_000):
            found.append(f"{tasks.active_jobs()} background job(s)")
    if "grpo_desktop.ui.run.worker" in sys.modules:
        from grpo_desktop.ui.run.worker import live_threads

        for thread in live_threads():
            found.append(thread.objectName() or "training thread")
    if deep:
        from PySide6.QtCore import QThread

        for obj in gc.get_objects():
            try:
                running = issubclass(type(obj), QThread) and obj.isRunning()
            except RuntimeError:  # the C++ object is already deleted
                running = False
            if running:
                name = obj.objectName() or repr(obj)
                if name not in found:
                    found.append(name)
                obj.quit()  # so that the next test is not blamed for this one's thread
                obj.wait(2000)
    return found


@pytest.fixture
def show_window(qtbot):
    """Show a MainWindow for a test: `show_window(w)` answers its "stop the run?" and "save
    changes?" questions (no modal dialogs in tests), shows it and returns it; after the test any
    run still going is stopped and waited for."""
    windows = []

    def show(w):
        w.ask_stop_on_close = lambda: True
        w.session.ask_save_changes = lambda _name: "discard"
        qtbot.addWidget(w)
        w.show()
        windows.append(w)
        return w

    yield show
    for w in windows:
        if w.model.runner.active:
            w.model.stop()
            qtbot.waitUntil(lambda w=w: not w.model.runner.active, timeout=60_000)
