"""File ▸ Open Run Folder…: a TRL output_dir, or one of the app's own run folders, shown read-only
and followed while it is written.

`RunFolderFollower.open(path)` puts the window on a new untitled session (asking about unsaved
changes first), hands the model an empty history marked read-only (`SessionModel.show_run_folder`),
reads the folder at once (session/run_folder.py: steps, logged completions, the health alarms
computed on it) and then polls it every `POLL_MS`. A poll reads only what changed, but the first
reads every completions file, so polls run in the background (ui/common/tasks.py), one at a time,
and their events go through `SessionModel.apply_event` on the GUI thread in slices of
`APPLY_SLICE_S`, as a live run's do; `loading` says a poll is under way. While it is shown a
banner says what is open, Start and the settings panels are disabled (hidden for a TRL run,
whose settings are not this window's), and the title names the folder. Opening or starting
another session, or the banner's Close, ends it. Never writes into the folder.

Try it: tests/ui/session/test_trl_run.py (timings: bench/README.md, "The app's own timings").
"""

from __future__ import annotations

import os
import time
from collections import deque

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QFileDialog, QFrame, QHBoxLayout, QPushButton

from grpo_desktop.engine.config import ConfigError, load_config
from grpo_desktop.engine.runs.files import config_path
from grpo_desktop.session.history import RunHistory
from grpo_desktop.session.run_folder import APP, KIND_NAMES, TRL, open_reader, run_folder_kind
from grpo_desktop.ui.common.message_area import ElidedLabel
from grpo_desktop.ui.common.tasks import BackgroundTasks

POLL_MS = 5000
APPLY_SLICE_S = 0.04  # events added per event-loop turn (a 1,000-step run: 2,000 events)
TRAINED_WITH = {TRL: "trained with TRL", APP: "trained with GRPO Desktop"}
SETTINGS_DOCKS = ("model", "dataset", "reward", "hyper", "estimate")
_STYLE = (
    "ReadOnlyBanner { background: #eef3e8; border: 1px solid #4a7a2a; border-radius: 4px; }"
    " ReadOnlyBanner QLabel { color: #233d12; }"
)


class ReadOnlyBanner(QFrame):
    """In the message area while a run folder is shown: what it is, that it is followed, Close
    (the area's × only hides this note)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setStyleSheet(_STYLE)
        self.text = ElidedLabel()
        self.close_button = QPushButton("Close")
        self.close_button.setToolTip("Stop following this folder; the window returns to the demo")
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 2, 6, 2)
        row.addWidget(self.text, 1)
        row.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignVCenter)
        self.hide()


class RunFolderFollower(QObject):
    """Open a run folder read-only in `window` and follow it; see the module docstring."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window, self.model = window, window.model
        self.reader = None
        self.folder = ""
        self.kind = ""
        self._hidden: list = []  # the settings docks hidden while a TRL run is shown
        self.timer = QTimer(self, interval=POLL_MS)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.tasks = BackgroundTasks(self)
        self._queue: deque = deque()  # events read, not yet added to the history
        self._first = False  # the next poll is the first of this folder
        self._apply_timer = QTimer(self, interval=0)
        self._apply_timer.timeout.connect(self._on_apply_timer_timeout)
        self.banner = ReadOnlyBanner()
        self._banner_dismissed = False  # the message area's × on it, until another folder opens
        self.banner.close_button.clicked.connect(self._on_banner_close_clicked)
        self.model.session_replaced.connect(self._on_model_session_replaced)

    @staticmethod
    def recognises(path: str) -> bool:
        """Whether `path` is a run folder this opens (not a session bundle)."""
        return run_folder_kind(path) is not None

    def choose_path(self) -> str:
        return QFileDialog.getExistingDirectory(
            self.window,
            "Open a run folder (a TRL output_dir, or a GRPO Desktop run)",
            self.window.session._last_dir(),
        )

    def open_dialog(self) -> None:
        path = self.choose_path()
        if path:
            self.open(path)

    def open(self, path: str) -> bool:
        """Show the run folder at `path` read-only and follow it; errors are shown and the
        current session stays."""
        path = os.path.abspath(path.rstrip("/\\") or path)
        try:
            reader = open_reader(path)
        except ValueError as exc:
            self.window.show_message("error", str(exc))
            return False
        kind = run_folder_kind(path)
        config = None
        if kind == APP:  # the settings it was trained with, shown in the (disabled) panels
            try:
                config = load_config(config_path(path))
            except (ConfigError, OSError):
                config = None
        if not self.window.session.new_session(config):
            return False  # refused (a run in progress) or cancelled; the message is shown
        self.stop()
        what = f"{KIND_NAMES[kind]} in {path}"
        self.model.show_run_folder(self._history(reader, kind), what, path)
        self.reader, self.folder, self.kind = reader, path, kind
        self._banner_dismissed = False
        self._first = True
        self.model.doc.name = f"{os.path.basename(path)} (read-only)"
        self.window.session.update_title()
        self.window.session._add_recent(path)
        self._set_settings_enabled(False)
        self.window.welcome.fold()  # its "press Start" is not for a run watched read-only
        self.poll()
        self.timer.start()
        self._update_banner()
        return True

    def _history(self, reader, kind: str) -> RunHistory:
        history = RunHistory(self.model.max_rollout_rows, events_path=reader.events_path)
        if kind == TRL:  # steps beyond the memory bound are paged from the parquet files
            history.rollouts.loader = reader.step_rows
        return history

    def poll(self) -> None:
        """Read what the folder gained since the last poll, in the background, into the window.
        One poll at a time, and none is dropped (its reader has moved past what it read). The
        first builds the whole history in the background and shows it at once, as opening a
        session does (adding a long run's steps one by one would redraw the inspector per step)."""
        reader = self.reader
        if reader is None or self.tasks.busy("poll"):
            return
        if self._first:
            history = self._history(reader, self.kind)

            def read_all():
                events = reader.poll()
                for event in events:
                    history.append(event)
                return events, history

            job, done = read_all, self._on_first_poll_done
        else:
            job, done = reader.poll, self._on_poll_done
        self.tasks.submit("poll", job, lambda result, error: done(reader, result, error))

    def _on_first_poll_done(self, reader, result, error) -> None:
        if reader is not self.reader or error is not None:
            self._on_poll_done(reader, None, error)
            return
        self._first = False
        events, history = result
        self.model.show_run_folder(history, self.model.read_only, self.folder)
        for event in events:  # what the message bar says of a live run's logs
            if event.type == "log" and event.level == "warning":
                self.window.show_message("warning", event.message)
        self._update_banner()

    @property
    def loading(self) -> bool:
        """Whether a poll is being read or its events are still being added."""
        return self.reader is not None and (self.tasks.busy("poll") or bool(self._queue))

    def _on_poll_done(self, reader, events, error) -> None:
        if reader is not self.reader:
            return  # the window shows something else since
        if isinstance(error, OSError):  # the mount went away: say so, try again next time
            self.window.statusBar().showMessage(
                f"Cannot read {self.folder}: {error.strerror or error}. Trying again in "
                f"{POLL_MS // 1000} s.",
                POLL_MS,
            )
            return
        if error is not None:
            self.window.show_message(
                "error", f"Reading {self.folder} failed: {error}. Close it and open it again."
            )
            self.timer.stop()
            return
        self._queue.extend(events)
        self._apply_timer.start()

    def _on_apply_timer_timeout(self) -> None:
        """Add queued events for at most APPLY_SLICE_S, then let the window breathe."""
        t0 = time.perf_counter()
        while self._queue and time.perf_counter() - t0 < APPLY_SLICE_S:
            self.model.apply_event(self._queue.popleft())
        if not self._queue:
            self._apply_timer.stop()
            self._update_banner()

    def stop(self) -> None:
        """Stop following (the window shows another session now)."""
        self.timer.stop()
        self.tasks.cancel("poll")
        self._apply_timer.stop()
        self._queue.clear()
        if self.reader is not None:
            self._set_settings_enabled(True)
        self.reader, self.folder, self.kind = None, "", ""
        self._first = False
        self.banner.hide()

    def _update_banner(self) -> None:
        h = self.model.history
        every = f"every {POLL_MS // 1000} s"
        if self.loading and not h.num_steps:
            state = "reading it…"
        elif h.finished is not None:
            state = f"finished after step {h.last_step}; still checked {every}"
        else:
            of = f" of {h.total_steps}" if h.total_steps else ""
            state = f"following it live ({every}), step {h.last_step}{of} so far"
        self.banner.text.setText(
            f"<b>Read-only:</b> {self.model.read_only}, {state}. Start and the settings are "
            "off: this window only watches it."
        )
        if not self._banner_dismissed:
            self.banner.show()
        self.window.device_label.setText(f"Read-only · {TRAINED_WITH[self.kind]}")

    def _set_settings_enabled(self, enabled: bool) -> None:
        """Settings panels off while read-only; for a TRL run also hidden (they hold this
        window's settings, not the run's), and shown again afterwards."""
        for name in SETTINGS_DOCKS:
            dock = self.window.docks.get(name)
            if dock is None:
                continue
            dock.widget().setEnabled(enabled)
            if not enabled and self.kind == TRL and not dock.isHidden():
                self._hidden.append(dock)
                dock.hide()
        if enabled:
            for dock in self._hidden:
                dock.show()
            self._hidden = []

    def apply_layout(self) -> None:
        """After View ▸ Reset layout: a TRL run's settings panels stay hidden."""
        if self.reader is not None and self.kind == TRL:
            self._set_settings_enabled(False)

    def _on_timer_timeout(self) -> None:
        self.poll()

    def dismiss_banner(self) -> None:
        """The message area's ×: hide the note (the folder is still followed) until the next."""
        self._banner_dismissed = True
        self.banner.hide()

    def _on_banner_close_clicked(self) -> None:
        self.window.session.close_session()

    def _on_model_session_replaced(self) -> None:
        if not self.model.read_only:
            self.stop()
