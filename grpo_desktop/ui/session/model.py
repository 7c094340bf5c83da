"""The central model the window is built around: the session being edited, its run and history.

Panels edit the config only through `set_value` / `set_config` / `apply_preset` /
`apply_starter` and redraw on `config_changed` / `config_replaced`; they never talk to each other
or to the worker. The run controls call `start` / `pause` / `resume` / `stop`. Events from the
training thread are appended to the Qt-free `RunHistory` (session layer) and re-emitted as typed
signals; plots redraw from the history on their own timer.

It holds one `SessionDocument` at a time: training writes into its run folder, `load_document`
swaps in another session with the history replayed from its events.jsonl (`session_replaced`),
and `dirty` says whether the config differs from what was last saved. It also knows whether the
custom checker may run: code typed here may, code that came in a file only once the user
trusted it (`TrustStore`, by content hash). Not here: file dialogs, menus, autosave timers
(`SessionController`) or layout. Try it: tests/ui/session/test_session.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from grpo_desktop.engine.config import (
    PRESETS,
    TrainConfig,
    preset,
    small_model_starter,
    validate,
    warnings,
)
from grpo_desktop.engine.models.remote_code import ModelCode, RemoteCodePermission, code_to_trust
from grpo_desktop.engine.rewards.worked_example import example_warnings
from grpo_desktop.session.document import (
    SessionDocument,
    SessionError,
    check_run_inside,
    save_session,
)
from grpo_desktop.session.fsio import SaveError
from grpo_desktop.session.history import RunHistory
from grpo_desktop.session.rollouts import DEFAULT_MAX_ROWS
from grpo_desktop.session.run_state import RunState, can_continue, clear_run, run_state
from grpo_desktop.session.trust import TrustStore
from grpo_desktop.ui.run.worker import ACTIVE_STATES, IDLE, TrainingRunner, default_train_fn

UNTRUSTED_CHECKER = (
    "This checker came with the session and has not been trusted: review the code in the Reward "
    "panel, then press Trust and enable (or remove the checker)."
)
UNTRUSTED_MODEL_CODE = (
    "The model's own Python code (model.trust_remote_code) has not been trusted, so nothing "
    "runs it: the Dataset preview uses the plain prompt template, and Start asks again. To "
    "train without it, turn off Trust remote code in the Model panel."
)


def load_history(doc: SessionDocument, max_rollout_rows: int = DEFAULT_MAX_ROWS) -> RunHistory:
    """The run's history replayed from its events.jsonl (empty when it has none)."""
    if not doc.has_run():
        return RunHistory(max_rollout_rows, events_path=doc.events_path)
    try:
        return RunHistory.from_events_file(doc.events_path, max_rollout_rows)
    except OSError as exc:
        raise SessionError(f"Cannot read {doc.events_path}: {exc.strerror}.") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise SessionError(
            f"The run's history {doc.events_path} is damaged ({exc}) and cannot be read. Nothing "
            "was changed."
        ) from None


class SessionModel(QObject):
    config_changed = Signal(str, str)  # section, field
    config_replaced = Signal()  # many fields changed at once (preset, opened file)
    session_replaced = Signal()  # another session was loaded: config, history and run
    dirty_changed = Signal(bool)  # the config now differs (or no longer) from the saved one
    trust_changed = Signal(bool)  # whether the custom checker may run
    device_info_changed = Signal(object)  # dict from the device probe
    state_changed = Signal(str)  # run state: idle, starting, running, paused, ...
    pause_reached = Signal()  # the engine finished its step and now waits
    run_started = Signal(object)  # RunStarted
    rollouts_added = Signal(int, list)  # step, steps dropped from memory
    step_finished = Signal(int)  # step (metrics are in history)
    eval_finished = Signal(object)  # EvalResult
    log_added = Signal(object)  # LogMessage
    alert_raised = Signal(object)  # Alert (checker failures, health alarms)
    checkpoint_saved = Signal(object)  # CheckpointSaved
    run_finished = Signal(object)  # RunFinished
    step_focused = Signal(int)  # a plot asked to show this step's rollouts
    lab_requested = Signal(int, int)  # step, group (-1: the whole step) to open in the Lab

    def __init__(
        self,
        doc: SessionDocument,
        train_fn: Callable = default_train_fn,
        max_rollout_rows: int = DEFAULT_MAX_ROWS,
        trust_store: TrustStore | None = None,
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self.doc = doc
        self.config = _copy(doc.config)
        self._checker_test: tuple[str, int, int, str] | None = None  # see record_checker_test
        self.max_rollout_rows = max_rollout_rows
        self.history = load_history(doc, max_rollout_rows)
        self.trust_store = trust_store or TrustStore()
        self._saved = doc.config.to_dict()
        self._dirty = False
        self._typed_checker: str | None = None  # checker code the user wrote in this window
        self._trusted = self.checker_trusted()
        self.device_info: dict[str, Any] = {}
        self.read_only = ""  # what the window shows read-only (show_run_folder); "" otherwise
        self.read_only_folder = ""  # the run folder it shows then (its models: Try, Compare)
        self.runner = TrainingRunner(train_fn, self)
        self.runner.state_changed.connect(self._on_runner_state_changed)
        self.runner.event_received.connect(self._on_runner_event_received)
        self.runner.pause_reached.connect(self.pause_reached)

    # ------------------------------------------------------------------ config

    def value(self, section: str, name: str) -> Any:
        return getattr(getattr(self.config, section), name)

    def set_value(self, section: str, name: str, value: Any) -> None:
        """Change one field; emits config_changed when the value is new."""
        obj = getattr(self.config, section)
        if getattr(obj, name) == value and type(getattr(obj, name)) is type(value):
            return
        setattr(obj, name, value)
        self._after_edit()
        self.config_changed.emit(section, name)

    def set_config(self, config: TrainConfig) -> None:
        self.config = _copy(config)
        self._after_edit()
        self.config_replaced.emit()

    def write_checker(self, source: str) -> None:
        """The user typed checker code in this window: it may run (they wrote it here)."""
        self._typed_checker = source
        self.set_value("rewards", "custom_checker", source)
        self._update_trust()

    def _after_edit(self) -> None:
        self._update_dirty()
        self._update_trust()

    # ------------------------------------------------------------------ saved state and trust

    @property
    def dirty(self) -> bool:
        """Whether the config differs from the one last saved in session.json."""
        return self._dirty

    def _update_dirty(self) -> None:
        dirty = self.config.to_dict() != self._saved
        if dirty != self._dirty:
            self._dirty = dirty
            self.dirty_changed.emit(dirty)

    def save(self, path: str | None = None, layout: dict | None = None) -> None:
        """Write session.json with the current config (to `path`: Save As, the run copied
        along). Raises SessionError or SaveError with a message for the user."""
        doc = self.doc
        config = _copy(self.config)
        saved = save_session(
            SessionDocument(
                doc.path, config, doc.name, dict(layout or doc.layout), doc.created,
                doc.modified, doc.run, doc.trained,
            ),
            path,
        )  # fmt: skip
        self.remember_typed_checker()
        if saved.path != doc.path:  # Save As: the history now lives in the copy
            self.history.rollouts.events_path = saved.events_path
        self.doc = saved
        self._saved = config.to_dict()
        self._update_dirty()

    def checker_trusted(self) -> bool:
        """Whether the current custom checker may run: empty, typed here, or trusted before."""
        source = self.config.rewards.custom_checker
        return source == self._typed_checker or self.trust_store.is_trusted(source)

    def record_checker_test(self, source: str, failed: int, total: int, first_error: str) -> None:
        """Remember the outcome of the Reward panel's Test checker for this exact source, so
        Start can ask before a run with a checker that just failed its test."""
        self._checker_test = (source, failed, total, first_error)

    def failed_checker_test(self) -> tuple[int, int, str] | None:
        """(failed, total, first error) when the custom checker in use failed its last test
        (any sample, or loading); None when it passed, was not tested, or is not used."""
        r = self.config.rewards
        test = self._checker_test
        if not r.custom_checker.strip() or r.custom_weight <= 0 or test is None:
            return None
        source, failed, total, first = test
        return (failed, total, first) if source == r.custom_checker and failed else None

    def trust_checker(self) -> None:
        """The user reviewed the checker code and accepts it (remembered by its hash)."""
        self.trust_store.trust(self.config.rewards.custom_checker)
        self._update_trust()

    def remember_typed_checker(self) -> None:
        """Code typed here is trusted from now on, also when the session is reopened."""
        source = self.config.rewards.custom_checker
        if source.strip() and source == self._typed_checker:
            self.trust_store.trust(source)

    def model_code(self, resume: bool = False) -> list[ModelCode]:
        """The model's own code that loading it (with `resume`, from one of the run's
        checkpoints) would run; empty unless model.trust_remote_code is on."""
        m = self.config.model
        run_dir = self.doc.run_dir if resume else None
        return code_to_trust(m.name_or_path, m.trust_remote_code, run_dir)

    def untrusted_model_code(self, resume: bool = False) -> list[ModelCode]:
        return self.trust_store.untrusted_code(self.model_code(resume))

    def trust_model_code(self, codes: list[ModelCode]) -> None:
        """The user read this model code in the trust question and accepts it."""
        self.trust_store.trust_code(codes)

    def remote_code_permission(self, resume: bool = False) -> RemoteCodePermission | None:
        """What the engine's loaders need to run the model's own code; None when there is none
        or it is not trusted (they then refuse to run it)."""
        codes = self.model_code(resume)
        return self.trust_store.permission(codes) if codes else None

    def _update_trust(self) -> None:
        trusted = self.checker_trusted()
        if trusted != self._trusted:
            self._trusted = trusted
            self.trust_changed.emit(trusted)

    def load_document(self, doc: SessionDocument, config: TrainConfig | None = None) -> None:
        """Switch to another session (its history replayed from disk); `config` replaces the
        saved config (unsaved edits restored from an autosave). Raises SessionError and keeps
        the current session when the run's history cannot be read."""
        if self.runner.active:
            raise SessionError("Stop the run before switching sessions.")
        history = load_history(doc, self.max_rollout_rows)
        self.doc, self.history = doc, history
        self.read_only = self.read_only_folder = ""
        self._saved = doc.config.to_dict()
        self._typed_checker = None
        self.config = _copy(config or doc.config)
        self._after_edit()
        self.config_replaced.emit()
        self.session_replaced.emit()

    def show_run_folder(self, history: RunHistory, description: str, folder: str = "") -> None:
        """Show a run that is not this session's, read-only (ui/session/run_folder.py): its
        history replaces this one's, Start is refused, and `apply_event` feeds what it logs
        next. Opening or starting another session ends it."""
        if self.runner.active:
            raise SessionError("Stop the run before opening another run folder.")
        self.history, self.read_only, self.read_only_folder = history, description, folder
        self.session_replaced.emit()

    def apply_event(self, event) -> None:
        """Append an event to the history and emit its signal, as for the run's own events."""
        self._on_runner_event_received(event)

    def apply_preset(self, name: str) -> None:
        self.set_config(preset(name, self.config))

    def apply_starter(self) -> None:
        """The small-model starter's settings (engine/config/starters.py) in one replace."""
        self.set_config(small_model_starter(self.config))

    def matching_preset(self) -> str | None:
        """The preset whose algorithm settings the config has, if any."""
        algo = self.config.algorithm
        for name, values in PRESETS.items():
            if all(getattr(algo, k) == v for k, v in values["algorithm"].items()):
                return name
        return None

    def problems(self) -> list[str]:
        return validate(self.config)

    def warnings(self) -> list[str]:
        return [*warnings(self.config), *example_warnings(self.config)]

    def set_device_info(self, info: dict[str, Any]) -> None:
        self.device_info = dict(info)
        self.device_info_changed.emit(self.device_info)

    # ------------------------------------------------------------------ run

    @property
    def state(self) -> str:
        return self.runner.state

    @property
    def running(self) -> bool:
        return self.runner.state in ACTIVE_STATES

    @property
    def run_dir(self) -> str:
        return self.doc.run_dir

    def run_state(self) -> RunState:
        return run_state(self.history, self.doc.run_dir)

    def can_continue(self) -> bool:
        """Whether Start continues the session's run (see session.run_state)."""
        if self.read_only:
            return False
        return not self.running and can_continue(self.run_state(), self.config.run.max_steps)

    def start(self, resume: bool = False) -> list[str]:
        """Start training in the session's run folder with a copy of the config (continuing from
        its last checkpoint with `resume`, else replacing what the folder held); returns the
        problems that prevent it. Saves session.json first, so the session on disk names the
        run and the settings it was started with."""
        if self.runner.active:
            return ["A run is already in progress."]
        if self.read_only:
            return [
                f"This window shows {self.read_only} read-only, so it cannot train. Close it "
                "(Close on its banner, or File ▸ Close Session) to train here."
            ]
        if not self.checker_trusted():
            return [UNTRUSTED_CHECKER]
        if self.untrusted_model_code(resume):
            return [UNTRUSTED_MODEL_CODE]
        problems = self.problems()
        if problems:
            return problems
        config = _copy(self.config)
        run_dir = self.doc.run_dir
        try:
            check_run_inside(self.doc)  # it was when opened; a symlink may have changed since
            if not resume:
                clear_run(run_dir)
            os.makedirs(run_dir, exist_ok=True)
            self.doc.trained = True
            self.save()
        except (OSError, SessionError) as exc:
            return [str(exc) if isinstance(exc, (SaveError, SessionError)) else _os_message(exc)]
        if not resume:
            self.history.clear()
        self.history.rollouts.events_path = self.doc.events_path
        self.runner.start(config, run_dir, resume, self.remote_code_permission(resume))
        return []

    def pause(self) -> None:
        self.runner.pause()

    def resume(self) -> None:
        self.runner.resume()

    def stop(self) -> None:
        self.runner.stop()

    def focus_step(self, step: int) -> None:
        self.step_focused.emit(int(step))

    def open_in_lab(self, step: int, group: int | None = None) -> None:
        """Ask for a step's rollouts (one group, or all with None) in the reward-design Lab."""
        self.lab_requested.emit(int(step), -1 if group is None else int(group))

    @Slot(str)
    def _on_runner_state_changed(self, state: str) -> None:
        self.state_changed.emit(state)

    @Slot(object)
    def _on_runner_event_received(self, event) -> None:
        kind = event.type
        if kind == "rollouts":
            dropped = self.history.rollouts.add(event.step, event.full_rows())
            self.history.version += 1
            self.rollouts_added.emit(event.step, dropped)
            return
        self.history.append(event)
        signal = {
            "run_started": self.run_started,
            "eval": self.eval_finished,
            "log": self.log_added,
            "alert": self.alert_raised,
            "checkpoint": self.checkpoint_saved,
            "run_finished": self.run_finished,
        }.get(kind)
        if kind == "step":
            self.step_finished.emit(event.step)
        elif signal is not None:
            signal.emit(event)


def _copy(config: TrainConfig) -> TrainConfig:
    return TrainConfig.from_dict(config.to_dict())


def _os_message(exc: OSError) -> str:
    return f"Cannot write the run folder: {exc.strerror or exc}."


__all__ = ["IDLE", "SessionModel"]
