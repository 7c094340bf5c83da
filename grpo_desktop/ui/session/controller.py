"""Sessions in the window: the File menu (New, Open, Open Recent, Save, Save As, Close), the title
with its unsaved-changes mark, autosave of edits, crash markers and recovery, and the trust
questions for code that came from elsewhere: a custom checker, and a model's own code
(model.trust_remote_code, asked on opening and again before Start or Continue).

A window always holds a session: at launch an untitled one in the user's data folder, so
training always has a run folder; Save on it acts as Save As (which copies the run). Edits are
autosaved to `session.autosave.json` two seconds after the last change (never over
session.json); opening a session with a newer autosave asks whether to restore it. A window
holding a session leaves a crash marker, which a clean close removes; the next launch offers to
reopen the sessions of windows that died. Untitled sessions without a run are deleted when
closed. A new session starts from the default settings (the built-in demo), never from the
edits of the session left behind (the user may just have answered Don't Save to them). Recent
files live in QSettings and list only sessions the user named (an untitled one is offered by
crash recovery, never in Open Recent); the window layout of a session lives in its `layout`.

Every question goes through an `ask_*` method so tests (and scripted runs) can answer it.
Try it: tests/ui/session/test_session.py, tests/ui/session/test_unsaved.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time

from PySide6.QtCore import QByteArray, QObject, QStandardPaths, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu

from grpo_desktop.engine.config import ConfigError, TrainConfig, load_config
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session import recovery
from grpo_desktop.session.document import (
    SUFFIX,
    SessionDocument,
    SessionError,
    load_session,
    new_session,
)
from grpo_desktop.session.fsio import atomic_write_text
from grpo_desktop.ui.run.worker import ACTIVE_STATES
from grpo_desktop.ui.session import dialogs as dialogs
from grpo_desktop.ui.session.model import UNTRUSTED_CHECKER, UNTRUSTED_MODEL_CODE
from grpo_desktop.ui.session.remote_code_dialog import RemoteCodeDialog

AUTOSAVE_MS = 2000
MAX_RECENT = 10
LAYOUT_VERSION = 1
UNTITLED = "Untitled"
RECENT_KEY = "sessions/recent"
BUSY = "Stop the run first: {what} while it trains would leave its run folder half-copied."


def untitled_document(config: TrainConfig) -> SessionDocument:
    """A new, untitled session in the user's data folder holding `config`."""
    return new_session(recovery.untitled_path(), config, name=UNTITLED)


def ensure_suffix(path: str) -> str:
    path = os.path.abspath(path.rstrip("/\\"))
    return path if path.endswith(SUFFIX) else path + SUFFIX


def never_named(path: str) -> bool:
    """Whether `path` is an untitled session the user never saved under a name of their own."""
    return os.path.dirname(os.path.abspath(path)) == os.path.join(recovery.data_dir(), "untitled")


def _recovery_label(path: str) -> str:
    """How a crashed session is listed: its name and folder, or when an untitled one started."""
    if never_named(path):
        try:
            started = time.strftime("%a %d %b %H:%M", time.localtime(os.path.getctime(path)))
        except OSError:
            started = "?"
        return f"Untitled session (never saved), started {started}"
    base = os.path.basename(path)
    name = base[: -len(SUFFIX)] if base.endswith(SUFFIX) else base
    return f"{name}   —   {os.path.dirname(path)}"


class SessionController(QObject):
    """File actions and session bookkeeping for one MainWindow (see the module docstring)."""

    def __init__(self, window, settings):
        super().__init__(window)
        self.window, self.model, self.settings = window, window.model, settings
        self.autosave_timer = QTimer(self, singleShot=True, interval=AUTOSAVE_MS)
        self.autosave_timer.timeout.connect(self._on_autosave_timer_timeout)
        self.new_action = self._action("&New Session", "Ctrl+N", self.new_session)
        self.new_action.setStatusTip("A new session with the default settings and no run yet")
        self.open_action = self._action("&Open Session…", "Ctrl+O", self.open_dialog)
        self.open_run_action = self._action(
            "Open Run &Folder…", "Ctrl+Shift+O", lambda: self.window.run_folder.open_dialog()
        )
        self.open_run_action.setStatusTip(
            "Watch a TRL output_dir or a GRPO Desktop run folder read-only, live while it trains"
        )
        self.save_action = self._action("&Save", "Ctrl+S", self.save)
        self.save_as_action = self._action("Save &As…", "Ctrl+Shift+S", self.save_as)
        self.close_action = self._action("&Close Session", "Ctrl+W", self.close_session)
        self.close_action.setStatusTip("Close this session; the window returns to the demo")
        self.recent_menu = QMenu("Open &Recent", window)
        self.recent_menu.aboutToShow.connect(self.rebuild_recent_menu)
        self.model.dirty_changed.connect(self._on_model_dirty_changed)
        self.model.config_changed.connect(self._on_model_config_changed)
        self.model.config_replaced.connect(self._on_model_config_changed)
        self.model.state_changed.connect(self._on_model_state_changed)
        self.model.run_started.connect(self._on_model_run_started)
        self.model.trust_changed.connect(self._on_model_trust_changed)
        self._mark_open(self.model.doc)
        self.update_title()

    def _action(self, text: str, shortcut: str, slot) -> QAction:
        action = QAction(text, self.window)
        action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(lambda _checked=False: slot())
        return action

    def fill_menu(self, menu: QMenu) -> None:
        menu.addActions([self.new_action, self.open_action, self.open_run_action])
        menu.addMenu(self.recent_menu)
        menu.addSeparator()
        menu.addActions([self.save_action, self.save_as_action, self.close_action])
        menu.addSeparator()
        menu.addAction("Import Settings…", self.import_settings_dialog)
        menu.addAction("Export Settings…", self.export_settings_dialog)

    # ------------------------------------------------------------------ questions (replaceable)

    def ask_save_changes(self, name: str) -> str:
        return dialogs.ask_save_changes(self.window, name)

    def ask_restore_autosave(self, name: str, when: str) -> bool:
        return dialogs.ask_restore_autosave(self.window, name, when)

    def ask_trust(self, source: str, origin: str) -> bool:
        return dialogs.TrustDialog(source, origin, self.window).exec() == 1

    def ask_model_code(self, codes: list, origin: str) -> bool:
        return RemoteCodeDialog(codes, origin, self.window).exec() == 1

    def ask_reopen(self, paths: list[str]) -> str | None:
        box = dialogs.RecoveryDialog([(_recovery_label(p), p) for p in paths], self.window)
        return box.chosen() if box.exec() == 1 else None

    def ask_start_over(self, steps: int) -> str:
        return dialogs.ask_start_over(self.window, steps)

    def choose_open_path(self) -> str:
        return QFileDialog.getExistingDirectory(
            self.window, "Open a session (a folder ending in .grpo)", self._last_dir()
        )

    def choose_save_path(self) -> str:
        name = "" if self._untitled() else self.model.doc.name
        path, _ = QFileDialog.getSaveFileName(
            self.window,
            "Save session as",
            os.path.join(self._last_dir(), name or "my-run"),
            f"GRPO Desktop sessions (*{SUFFIX})",
        )
        return path

    # ------------------------------------------------------------------ title and state

    def update_title(self) -> None:
        doc = self.model.doc
        self.window.setWindowTitle(f"{doc.name}[*] — GRPO Desktop")
        self.window.setWindowModified(self.model.dirty)
        self.window.setWindowFilePath("" if self._untitled() else doc.path)

    def _untitled(self, doc: SessionDocument | None = None) -> bool:
        return recovery.is_untitled(doc or self.model.doc)

    def _on_model_dirty_changed(self, _dirty: bool) -> None:
        self.update_title()

    def _on_model_state_changed(self, state: str) -> None:
        idle = state not in ACTIVE_STATES
        for action in (
            self.new_action, self.open_action, self.open_run_action, self.save_as_action,
            self.close_action,
        ):  # fmt: skip
            action.setEnabled(idle)
        self.recent_menu.setEnabled(idle)

    def _on_model_trust_changed(self, trusted: bool) -> None:
        if trusted and UNTRUSTED_CHECKER in self.window.message_bar.message():
            self.window.message_bar.clear()

    def _on_model_run_started(self, _event) -> None:
        recovery.discard_autosave(self.model.doc)  # starting saved session.json
        self._add_recent(self.model.doc.path)  # (not an untitled one: see _add_recent)

    # ------------------------------------------------------------------ autosave of edits

    def _on_model_config_changed(self, *_args) -> None:
        if self.model.dirty:
            self.autosave_timer.start()
        else:
            self.autosave_timer.stop()
            recovery.discard_autosave(self.model.doc)

    def _on_autosave_timer_timeout(self) -> None:
        if not self.model.dirty:
            return
        doc = self.model.doc
        draft = SessionDocument(
            doc.path, self.model.config, doc.name, doc.layout, doc.created, doc.modified,
            doc.run, doc.trained,
        )  # fmt: skip
        try:
            recovery.write_autosave(draft)
            self.model.remember_typed_checker()
        except OSError as exc:
            self.window.statusBar().showMessage(f"Autosave failed: {exc}", 10_000)

    # ------------------------------------------------------------------ opening

    def open_dialog(self) -> None:
        path = self.choose_open_path()
        if path:
            self.open_session(path)

    def open_session(self, path: str, *, after_crash: bool = False) -> bool:
        """Open the session at `path`; errors are shown and the current session stays."""
        if self.model.running:
            self.window.show_message("error", BUSY.format(what="switching sessions"))
            return False
        path = os.path.abspath(path)
        if path == self.model.doc.path:
            return True
        if self.window.run_folder.recognises(path):  # a TRL or app run folder: read-only
            return self.window.run_folder.open(path)
        try:
            doc = load_session(path)
        except SessionError as exc:
            self.window.show_message("error", str(exc))
            return False
        if not self.maybe_save_changes():
            return False
        config, restored = None, ""
        auto = recovery.newer_autosave(doc.path)
        if auto is not None and auto.config != doc.config:
            when = time.strftime("%a %d %b %H:%M", time.localtime(auto.modified))
            if after_crash or self.ask_restore_autosave(doc.name, when):
                config, restored = auto.config, when
            else:
                recovery.discard_autosave(doc)
        if not self._switch_to(doc, config):
            return False
        if restored:
            self.window.show_message(
                "info", f"Restored the unsaved changes from {restored}. Save to keep them."
            )
        self.check_trust(path)
        self.check_model_code(path)
        return True

    def check_model_code(self, origin: str, resume: bool = False) -> bool:
        """Ask before the model's own code (model.trust_remote_code; with `resume`, also its
        run's checkpoints') may run; True when it may or there is none."""
        codes = self.model.untrusted_model_code(resume)
        if not codes:
            return True
        if self.ask_model_code(codes, origin):
            self.model.trust_model_code(codes)
            return True
        self.window.show_message("warning", UNTRUSTED_MODEL_CODE)
        return False

    def check_trust(self, origin: str) -> bool:
        """Ask before checker code from `origin` may run; True when it may."""
        if self.model.checker_trusted():
            return True
        if self.ask_trust(self.model.config.rewards.custom_checker, origin):
            self.model.trust_checker()
            return True
        self.window.show_message("warning", UNTRUSTED_CHECKER)
        self.window.docks["reward"].raise_()
        return False

    def _switch_to(self, doc: SessionDocument, config: TrainConfig | None = None) -> bool:
        old = self.model.doc
        self.model.remember_typed_checker()
        try:
            self.model.load_document(doc, config)
        except SessionError as exc:
            self.window.show_message("error", str(exc))
            return False
        self.autosave_timer.stop()
        self._release(old)
        self._mark_open(doc)
        self.restore_layout(doc.layout)
        if not self._untitled(doc):
            self._add_recent(doc.path)
        self.window.message_bar.clear()
        self.update_title()
        if config is not None:
            self.autosave_timer.start()
        return True

    def new_session(self, config: TrainConfig | None = None) -> bool:
        """A new untitled session holding `config` (default: the default settings, the built-in
        demo; never the current ones, which may be edits the user just chose not to save)."""
        if self.model.running:
            self.window.show_message("error", BUSY.format(what="starting a new session"))
            return False
        if not self.maybe_save_changes():
            return False
        try:
            doc = untitled_document(config if config is not None else demo_config())
        except OSError as exc:
            self.window.show_message("error", f"Cannot create a new session: {exc}")
            return False
        return self._switch_to(doc)

    def close_session(self) -> bool:
        """Close this session; the window goes back to an untitled one on the built-in demo."""
        return self.new_session(demo_config())

    # ------------------------------------------------------------------ saving

    def maybe_save_changes(self) -> bool:
        """Before the session goes away: ask about unsaved changes; False means cancel."""
        if not self.model.dirty:
            return True
        answer = self.ask_save_changes(self.model.doc.name)
        if answer == dialogs.SAVE:
            return self.save()
        if answer == dialogs.DISCARD:
            self.autosave_timer.stop()
            recovery.discard_autosave(self.model.doc)
            return True
        return False

    def save(self) -> bool:
        if self._untitled():
            return self.save_as()
        try:
            self.model.save(layout=self.layout())
        except (SessionError, OSError) as exc:
            self.window.show_message("error", str(exc))
            return False
        self._after_save()
        return True

    def save_as(self, path: str | None = None) -> bool:
        if self.model.running:
            self.window.show_message("error", BUSY.format(what="Save As (it copies the run)"))
            return False
        path = path or self.choose_save_path()
        if not path:
            return False
        path = ensure_suffix(path)
        old = self.model.doc
        try:
            self.model.save(path, layout=self.layout())
        except (SessionError, OSError) as exc:
            self.window.show_message("error", str(exc))
            return False
        self.settings.setValue("sessions/last_dir", os.path.dirname(path))
        self._release(old, saved_elsewhere=True)
        self._mark_open(self.model.doc)
        self._after_save()
        return True

    def _after_save(self) -> None:
        self.autosave_timer.stop()
        recovery.discard_autosave(self.model.doc)
        self._add_recent(self.model.doc.path)
        self.update_title()
        self.window.statusBar().showMessage(f"Saved {self.model.doc.path}", 5000)

    # ------------------------------------------------------------------ settings files

    def open_config(self, path: str) -> bool:
        """Import settings from a JSON file into this session (asks about checker code)."""
        try:
            config = load_config(path)
        except ConfigError as exc:
            self.window.show_message("error", str(exc))
            return False
        self.model.set_config(config)
        self.check_trust(path)
        self.check_model_code(path)
        return True

    def import_settings_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.window, "Import settings", self._last_dir(), "Settings (*.json)"
        )
        if path:
            self.open_config(path)

    def export_settings_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self.window, "Export settings", "grpo-settings.json", "Settings (*.json)"
        )
        if path:
            try:
                atomic_write_text(path, self.model.config.to_json())
            except OSError as exc:
                self.window.show_message("error", str(exc))

    # ------------------------------------------------------------------ markers, recovery, close

    def _mark_open(self, doc: SessionDocument) -> None:
        with contextlib.suppress(OSError):
            recovery.mark_open(doc.path)

    def _release(self, doc: SessionDocument, saved_elsewhere: bool = False) -> None:
        """The window lets go of `doc`: its marker goes; an untitled one without a run (or one
        just saved elsewhere, run copied) is deleted."""
        recovery.mark_closed(doc.path)
        if saved_elsewhere:
            recovery.discard_autosave(doc)
        if self._untitled(doc) and (saved_elsewhere or not doc.has_run()):
            shutil.rmtree(doc.path, ignore_errors=True)
            self._remove_recent(doc.path)

    def window_closed(self) -> None:
        """A clean close: no crash marker left behind."""
        self.autosave_timer.stop()
        self._release(self.model.doc)

    def offer_crash_recovery(self) -> bool:
        """At launch: offer to reopen the sessions of windows that died; True if one was."""
        paths = [p for p in recovery.crashed_sessions() if p != self.model.doc.path]
        if not paths:
            return False
        chosen = self.ask_reopen(paths)
        for path in paths:
            recovery.mark_closed(path)
            self._add_recent(path)
        return bool(chosen) and self.open_session(chosen, after_crash=True)

    # ------------------------------------------------------------------ recent files

    def recent_paths(self) -> list[str]:
        """The sessions of Open Recent, newest first: those still there that the user named
        (lists written by older versions may hold untitled ones; they are left out)."""
        value = self.settings.value(RECENT_KEY, [])
        paths = [value] if isinstance(value, str) else list(value or [])
        return [p for p in paths if os.path.isdir(p) and not never_named(p)]

    def _add_recent(self, path: str) -> None:
        if never_named(path):
            return  # Open Recent would fill up with "Untitled-…" (issue 27 §4)
        paths = [path] + [p for p in self.recent_paths() if p != path]
        self.settings.setValue(RECENT_KEY, paths[:MAX_RECENT])

    def _remove_recent(self, path: str) -> None:
        self.settings.setValue(RECENT_KEY, [p for p in self.recent_paths() if p != path])

    def rebuild_recent_menu(self) -> None:
        menu = self.recent_menu
        menu.clear()
        paths = self.recent_paths()
        for path in paths:
            name = os.path.basename(path)
            action = menu.addAction(f"{name}   —   {os.path.dirname(path)}")
            action.setData(path)
            action.triggered.connect(lambda _checked=False, p=path: self.open_session(p))
        if not paths:
            menu.addAction("No recent sessions").setEnabled(False)
        menu.addSeparator()
        menu.addAction("Clear Recent", lambda: self.settings.setValue(RECENT_KEY, []))

    def _last_dir(self) -> str:
        return self.settings.value("sessions/last_dir", "") or QStandardPaths.writableLocation(
            QStandardPaths.StandardLocation.DocumentsLocation
        )

    # ------------------------------------------------------------------ layout in the session

    def layout(self) -> dict:
        """The window layout stored in the session: dock state, splitter, smoothing, tab."""
        w = self.window
        return {
            "version": LAYOUT_VERSION,
            "window_state": w.saveState(LAYOUT_VERSION).toBase64().data().decode("ascii"),
            "inspector_splitter": w.inspector.splitter.sizes(),
            "smoothing": w.plots.smoothing.value(),
            "tab": w.tabs.currentIndex(),
        }

    def restore_layout(self, layout: dict) -> None:
        if not isinstance(layout, dict) or layout.get("version") != LAYOUT_VERSION:
            return
        w = self.window
        with contextlib.suppress(TypeError, ValueError):
            state = QByteArray.fromBase64(str(layout.get("window_state", "")).encode("ascii"))
            if not state.isEmpty():
                w.restoreState(state, LAYOUT_VERSION)
            sizes = [int(s) for s in layout.get("inspector_splitter") or []]
            if len(sizes) == 2:
                w.inspector.splitter.setSizes(sizes)
            w.plots.smoothing.setValue(int(layout.get("smoothing", w.plots.smoothing.value())))
            w.tabs.setCurrentIndex(int(layout.get("tab", 0)))
