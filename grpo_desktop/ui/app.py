"""Application entry: the QApplication and the main window, and a scripted mode for smoke checks.

    grpo-desktop                                   the window on the built-in demo
    grpo-desktop open my-run.grpo                  the window on a saved session
    grpo-desktop --config my.json                  the window on saved settings
    grpo-desktop --demo --autostart --quit-after-steps 3 --screenshot shot.png

A plain launch offers to reopen the sessions of windows that crashed. Scripted mode starts the
run at once, stops it gracefully after N steps, saves a screenshot of the window once the run has
ended, and quits with 0 (1 when the run failed, 2 when it could not start); it asks nothing
(unsaved changes are discarded, checker code not trusted before stays off, no crash
recovery; a model's own code not trusted before is refused, and the run does not start: exit 2).
Startup imports no torch: the engine loads in the training thread.
"""

from __future__ import annotations

import os
import sys

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication

from grpo_desktop.ui.compat import drop_platform_noise
from grpo_desktop.ui.run.worker import FAILED, FINAL_STATES
from grpo_desktop.ui.session.dialogs import DISCARD
from grpo_desktop.ui.x_display import startup_problem

# The training thread runs Python code most of the time (sampling small models is dominated by
# interpreter overhead), and every Qt callback into Python must win the GIL from it: a switch
# interval of 1 ms instead of 5 ms bounds each wait (bench/README.md, gui_latency.py).
GIL_SWITCH_INTERVAL_S = 0.001


class ScriptedRun(QObject):
    """Drives the window for --autostart / --quit-after-steps / --screenshot. It answers the
    unsaved-changes question with "discard", so it is installed only in scripted mode."""

    def __init__(
        self, window, app, autostart: bool, quit_after: int | None, screenshot: str | None
    ):
        super().__init__(window)
        self.window, self.app = window, app
        self.quit_after, self.screenshot = quit_after, screenshot
        self.exit_code = 0
        window.session.ask_save_changes = lambda _name: DISCARD  # a smoke check asks nothing
        model = window.model
        model.step_finished.connect(self._on_model_step_finished)
        model.state_changed.connect(self._on_model_state_changed)
        if autostart and (quit_after is None or quit_after > 0):
            QTimer.singleShot(0, self._start)
        elif quit_after is not None or screenshot:
            QTimer.singleShot(500, self._finish)

    def _start(self) -> None:
        started = self.window.start_run()
        if started and self.quit_after is not None:
            self.window.model.runner.stop_after(self.quit_after)
        if not started:
            print(
                f"grpo-desktop: could not start: {self.window.message_bar.message()}",
                file=sys.stderr,
            )
            self.exit_code = 2
            self._finish()

    def _on_model_step_finished(self, step: int) -> None:
        if self.quit_after is not None and self.window.model.history.num_steps >= self.quit_after:
            self.window.model.stop()

    def _on_model_state_changed(self, state: str) -> None:
        if state in FINAL_STATES and (self.quit_after is not None or self.screenshot):
            if state == FAILED:
                print(
                    f"grpo-desktop: the run failed: {self.window.message_bar.message()}",
                    file=sys.stderr,
                )
                self.exit_code = 1
            QTimer.singleShot(300, self._finish)

    def _finish(self) -> None:
        if self.window.run_folder.loading:  # a run folder still being read in: wait for it
            QTimer.singleShot(100, self._finish)
            return
        if self.screenshot:
            self.window.plots.redraw()
            self.app.processEvents()
            self.window.grab().save(self.screenshot)
        self.window.close()
        self.app.exit(self.exit_code)


_REFUSED_ORIGINS: set[str] = set()  # where scripted mode has already said it refuses model code


def _refuse_model_code(codes: list, origin: str) -> bool:
    """Scripted mode's answer to the trust question for a model's own code: no, said once on
    stderr (a script has nobody to read the dialog, and waiting for an answer hangs it)."""
    if origin not in _REFUSED_ORIGINS:
        _REFUSED_ORIGINS.add(origin)
        where = "; ".join(code.describe() for code in codes)
        print(
            f"grpo-desktop: {origin} would run the model's own Python code ({where}), which has "
            "not been trusted, and a scripted run (--autostart, --quit-after-steps, --screenshot) "
            "asks nothing, so it does not run. Trust it once in the window (open the session "
            "without those options), or train headless with `grpo-desktop train SESSION "
            "--trust-remote-code`.",
            file=sys.stderr,
        )
    return False


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: from /proc; elsewhere None)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime


def _report_launch_time() -> None:
    """Printed once the window is shown and the event loop has run: process start to window."""
    age = process_age_s()
    if age is not None:
        print(f"grpo-desktop: window shown {age:.2f} s after the process started", flush=True)


def create_main_window(demo: bool = True, config=None, **kwargs):
    """The main window on `config` (default: the built-in demo's settings) in a new untitled
    session, or on `session=PATH` (a QApplication must exist)."""
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.ui.main_window import MainWindow

    app = QApplication.instance()
    if app is not None and not app.applicationName().startswith("GRPO"):
        app.setApplicationName("GRPO Desktop")
        app.setOrganizationName("GRPO Desktop")
    return MainWindow(config or demo_config(), **kwargs)


def run_app(
    config_path: str | None = None,
    *,
    session_path: str | None = None,
    demo: bool = True,
    autostart: bool = False,
    quit_after_steps: int | None = None,
    screenshot: str | None = None,
) -> int:
    """Open the window (on the demo, the settings in `config_path` or the session folder
    `session_path`) and run the app."""
    from grpo_desktop.engine.config import ConfigError, load_config

    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    drop_platform_noise()
    if QApplication.instance() is None:
        problem = startup_problem()  # no display, missing xcb libraries: else Qt aborts (134)
        if problem:
            print(f"grpo-desktop: {problem}", file=sys.stderr)
            return 2
    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("GRPO Desktop")
    app.setOrganizationName("GRPO Desktop")
    scripted = autostart or quit_after_steps is not None or bool(screenshot)
    config, problem = None, ""
    if config_path:
        try:
            config = load_config(config_path)
        except ConfigError as exc:
            problem = str(exc)
            print(f"grpo-desktop: {problem}", file=sys.stderr)
            if autostart:
                return 2
    window = create_main_window(demo, config)
    if scripted:  # never wait on a question: untrusted checker code stays off (start fails, 2)
        window.session.ask_trust = lambda _source, _origin: False
        window.session.ask_model_code = _refuse_model_code  # and so does a model's own code
    if problem:
        window.show_message("error", problem)
    elif config_path:
        window.session.check_trust(config_path)
    if session_path and not window.session.open_session(session_path):
        print(f"grpo-desktop: {window.message_bar.message()}", file=sys.stderr)
        if autostart:
            return 2
    if screenshot:
        window.reset_layout()  # a reproducible picture, whatever layout the user saved
    window.show()
    if not scripted and not session_path:
        QTimer.singleShot(0, window.session.offer_crash_recovery)
    if scripted:  # the launch time, for the README's claim (bench/launch_time.py)
        QTimer.singleShot(0, _report_launch_time)
    # Only a scripted run answers questions itself; a plain launch asks the user (unsaved changes).
    script = ScriptedRun(window, app, autostart, quit_after_steps, screenshot) if scripted else None
    code = app.exec()
    return (script.exit_code if script is not None else 0) or code
