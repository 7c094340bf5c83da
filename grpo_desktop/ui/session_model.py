"""The central model the window is built around: the config being edited, the run, its history.

Panels edit the config only through `set_value` / `set_config` / `apply_preset` and redraw on
`config_changed` / `config_replaced`; they never talk to each other or to the worker. The run
controls call `start` / `pause` / `resume` / `stop`. Events from the training thread are appended
to the Qt-free `RunHistory` (session layer) and re-emitted as typed signals; plots redraw from the
history on their own timer.

What this is not: persistence (a later session document saves config + history) or layout.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from grpo_desktop.engine.config import PRESETS, TrainConfig, preset, validate, warnings
from grpo_desktop.session.history import RunHistory
from grpo_desktop.session.rollouts import DEFAULT_MAX_ROWS
from grpo_desktop.ui.worker import ACTIVE_STATES, IDLE, TrainingRunner, default_train_fn


class SessionModel(QObject):
    config_changed = Signal(str, str)  # section, field
    config_replaced = Signal()  # many fields changed at once (preset, opened file)
    device_info_changed = Signal(object)  # dict from the device probe
    state_changed = Signal(str)  # run state: idle, starting, running, paused, ...
    pause_reached = Signal()  # the engine finished its step and now waits
    run_started = Signal(object)  # RunStarted
    rollouts_added = Signal(int, list)  # step, steps dropped from memory
    step_finished = Signal(int)  # step (metrics are in history)
    eval_finished = Signal(object)  # EvalResult
    log_added = Signal(object)  # LogMessage
    checkpoint_saved = Signal(object)  # CheckpointSaved
    run_finished = Signal(object)  # RunFinished
    step_focused = Signal(int)  # a plot asked to show this step's rollouts

    def __init__(
        self,
        config: TrainConfig,
        train_fn: Callable = default_train_fn,
        runs_dir: str | None = None,
        max_rollout_rows: int = DEFAULT_MAX_ROWS,
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self.config = config
        self.runs_dir = runs_dir
        self.run_dir: str | None = None
        self.history = RunHistory(max_rollout_rows)
        self.device_info: dict[str, Any] = {}
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
        self.config_changed.emit(section, name)

    def set_config(self, config: TrainConfig) -> None:
        self.config = TrainConfig.from_dict(config.to_dict())
        self.config_replaced.emit()

    def apply_preset(self, name: str) -> None:
        self.set_config(preset(name, self.config))

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
        return warnings(self.config)

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

    def start(self) -> list[str]:
        """Start a run with a copy of the config; returns the problems that prevent it."""
        if self.runner.active:
            return ["A run is already in progress."]
        problems = self.problems()
        if problems:
            return problems
        config = TrainConfig.from_dict(self.config.to_dict())
        self.run_dir = self._new_run_dir()
        self.history.clear()
        self.history.rollouts.events_path = (
            os.path.join(self.run_dir, "events.jsonl") if self.run_dir else None
        )
        self.runner.start(config, self.run_dir)
        return []

    def _new_run_dir(self) -> str | None:
        if not self.runs_dir:
            return None
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path, n = os.path.join(self.runs_dir, f"run-{stamp}"), 1
        while os.path.exists(path):
            n += 1
            path = os.path.join(self.runs_dir, f"run-{stamp}-{n}")
        return path

    def pause(self) -> None:
        self.runner.pause()

    def resume(self) -> None:
        self.runner.resume()

    def stop(self) -> None:
        self.runner.stop()

    def focus_step(self, step: int) -> None:
        self.step_focused.emit(int(step))

    @Slot(str)
    def _on_runner_state_changed(self, state: str) -> None:
        self.state_changed.emit(state)

    @Slot(object)
    def _on_runner_event_received(self, event) -> None:
        kind = event.type
        if kind == "rollouts":
            dropped = self.history.rollouts.add(event.step, event.rows)
            self.history.version += 1
            self.rollouts_added.emit(event.step, dropped)
            return
        self.history.append(event)
        signal = {
            "run_started": self.run_started,
            "eval": self.eval_finished,
            "log": self.log_added,
            "checkpoint": self.checkpoint_saved,
            "run_finished": self.run_finished,
        }.get(kind)
        if kind == "step":
            self.step_finished.emit(event.step)
        elif signal is not None:
            signal.emit(event)


__all__ = ["IDLE", "SessionModel"]
