"""The Try tab: ask the base model and a checkpoint of the run the same question, side by side.

Type a prompt or pick one of the run's held-out or training problems (its gold answer shown);
Generate (Ctrl+Return) answers it with the base model on the left and the chosen checkpoint on
the right (the newest by default), greedy or sampled, tokens streaming in; Stop (Esc) ends the
decode after the current token. Each answer is scored with the run's rewards, parts shown; the
prompt is built as training built it (the run's system prompt and chat template). The work runs
in `TryRunner`'s thread (worker.py), which keeps the model between Generates until the session
or run changes or training starts. While training runs, Generate is off and a note says why;
before the session has trained, the base model answers alone. A TRL output_dir shown read-only
offers its checkpoint-N folders and final model, with the settings engine/variants/trl_config.py
builds for it. Errors show in the tab's message bar, never as tracebacks.

Reads the session through `SessionModel` only. Does not train, compare many problems (the
Compare tab) or export. Try it: the Try tab; tests/ui/try_it/test_try.py.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.config import ConfigError, TrainConfig
from grpo_desktop.engine.runs.files import config_path
from grpo_desktop.engine.runs.layout import list_checkpoints
from grpo_desktop.engine.variants.trl_config import trl_run_config
from grpo_desktop.engine.variants.trl_models import is_trl_output, trl_models
from grpo_desktop.ui.common.job_thread import job_shortcuts
from grpo_desktop.ui.common.slots import connect_slots
from grpo_desktop.ui.common.widgets import (
    MessageBar,
    note_label,
    rich_tooltip,
    set_note,
    show_error_details,
)
from grpo_desktop.ui.try_it import tips
from grpo_desktop.ui.try_it.decode import DecodeSettings
from grpo_desktop.ui.try_it.pane import AnswerPane
from grpo_desktop.ui.try_it.problems import ProblemPicker
from grpo_desktop.ui.try_it.worker import TryRequest, TryRunner


def run_config(run_dir: str, fallback: TrainConfig) -> TrainConfig:
    """The run's config.json read without torch (the job reads it again and names any damage);
    `fallback` when there is none or it cannot be read."""
    path = config_path(run_dir)
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return TrainConfig.from_json(fh.read())
    except (OSError, ValueError, TypeError, ConfigError):
        return fallback


class TryView(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.runner = TryRunner(self)
        self._shown_once = False
        self._stale = False  # the running job's answers belong to a session no longer shown
        self._tried_run: str | None = None  # the run the last Generate used (its model held)
        self._defaults_for: tuple = ()  # the run's settings the decode boxes started from

        self.message_bar = MessageBar()
        self.note = note_label("info")
        self.picker = ProblemPicker()
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Type a prompt, or pick a problem above…")
        self.prompt.setToolTip(rich_tooltip(tips.PROMPT))
        self.prompt.setTabChangesFocus(True)
        self.prompt.setMaximumHeight(72)

        self.decode = DecodeSettings(model.config.algorithm.max_completion_length)
        self.generate_button = QPushButton("Generate")
        self.generate_button.setToolTip(rich_tooltip(tips.GENERATE, "Ctrl+Return"))
        self.generate_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip(rich_tooltip(tips.STOP, "Esc"))
        self.stop_button.setEnabled(False)

        self.checkpoint_box = QComboBox()
        self.checkpoint_box.setToolTip(rich_tooltip(tips.CHECKPOINT))
        self.base_pane = AnswerPane("Base model")
        self.base_pane.setToolTip(rich_tooltip(tips.BASE_PANE))
        self.trained_pane = AnswerPane("Trained:", self.checkpoint_box)
        self.panes = {"base": self.base_pane, "trained": self.trained_pane}

        ask = QHBoxLayout()
        ask.addWidget(self.prompt, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.generate_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        ask.addLayout(buttons)
        self.decode.first_row.addWidget(self.picker.gold_label)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.base_pane)
        split.addWidget(self.trained_pane)
        split.setChildrenCollapsible(False)
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.message_bar)
        col.addWidget(self.note)
        col.addWidget(self.picker)
        col.addLayout(ask)
        col.addWidget(self.decode)
        col.addWidget(split, 1)

        job_shortcuts(self, self.generate, self.stop)
        self.generate_button.clicked.connect(self.generate)
        self.stop_button.clicked.connect(self.stop)
        self.picker.picked.connect(self._on_picker_picked)
        self.picker.failed.connect(self._on_picker_failed)
        self.prompt.textChanged.connect(self._on_prompt_text_changed)
        self.message_bar.details_requested.connect(self._on_message_bar_details_requested)
        connect_slots(self.runner, self, "status_changed", "text_changed", "answered", "failed",
                      "finished", name="runner")  # fmt: skip
        connect_slots(self.model, self, "state_changed", "session_replaced", "checkpoint_saved",
                      "config_changed", "config_replaced")  # fmt: skip
        self.refresh()

    # ------------------------------------------------------------------ what the run offers

    def run_dir(self) -> str:
        """The run whose models answer: the session's, or a run folder the window shows
        read-only (File ▸ Open Run Folder…: an app run, or a TRL output_dir)."""
        return self.model.read_only_folder or self.model.run_dir

    def trl_notes(self) -> list[str]:
        """What the config of a TRL output shown assumes (engine/variants/trl_config.py); [] otherwise."""
        run_dir = self.run_dir()
        return trl_run_config(run_dir, self.model.config).notes if is_trl_output(run_dir) else []

    def try_config(self) -> TrainConfig:
        """The settings answers are made and scored with: the run's (a TRL output's: built for
        it, engine/variants/trl_config.py), else the session's."""
        run_dir = self.run_dir()
        if is_trl_output(run_dir):
            return trl_run_config(run_dir, self.model.config).config
        return run_config(run_dir, self.model.config)

    def checkpoint_steps(self) -> list[int]:
        run_dir = self.run_dir()
        return [step for step, _ in list_checkpoints(run_dir)] if os.path.isdir(run_dir) else []

    def checkpoints(self) -> list[tuple[str, str]]:
        """(variant key, label) of the run's models, oldest first: its checkpoints, or a TRL
        output's checkpoint-N folders and final model."""
        run_dir = self.run_dir()
        if is_trl_output(run_dir):
            return [(key, label) for key, label, *_ in trl_models(run_dir)]
        return [(f"step-{step}", f"Step {step}") for step in self.checkpoint_steps()]

    def refresh(self, latest: bool = False) -> None:
        """Re-read the run's checkpoints and settings (after a run, a session switch). The
        checkpoint chosen stays chosen, except the newest (it stays the newest) and with
        `latest` (another run: its newest checkpoint, never the step picked in the last)."""
        chosen = self.checkpoint_box.currentData()
        if latest or self.checkpoint_box.currentIndex() == 0:
            chosen = None  # the newest checkpoint (listed first) stays the newest one
        steps = self.checkpoints()
        self.checkpoint_box.blockSignals(True)
        self.checkpoint_box.clear()
        for key, label in reversed(steps):
            latest = " (latest)" if key == steps[-1][0] else ""
            self.checkpoint_box.addItem(f"{label}{latest}", key)
        if not steps:
            self.checkpoint_box.addItem("No checkpoint yet", None)
        index = self.checkpoint_box.findData(chosen) if chosen else -1
        self.checkpoint_box.setCurrentIndex(max(index, 0))
        self.checkpoint_box.blockSignals(False)
        cfg = self.try_config()
        defaults = (cfg.algorithm.max_completion_length, cfg.algorithm.temperature)
        if defaults != self._defaults_for:  # new settings: their defaults, else the user's
            self._defaults_for = defaults
            self.decode.set_defaults(*defaults)
        tags = (cfg.rewards.think_tag, cfg.rewards.answer_tag)
        self.base_pane.tags = self.trained_pane.tags = tags
        if not steps:
            self.trained_pane.clear(tips.NO_CHECKPOINT)
        elif self.trained_pane.status.text() == tips.NO_CHECKPOINT:
            self.trained_pane.clear()  # said before the run saved one: no longer true
        self._update_state()
        if self._shown_once:
            self.picker.list_for(cfg)

    def blocked_reason(self) -> str:
        """Why Generate cannot run now ('' when it can)."""
        if self.model.runner.active:
            return tips.TRAINING
        if not self.prompt.toPlainText().strip():
            return "Type a prompt or pick a problem first."
        return ""

    def _update_state(self) -> None:
        busy = self.runner.busy
        training = self.model.runner.active
        trl = self.trl_notes()
        if training:
            set_note(self.note, tips.TRAINING)
        elif trl:
            set_note(self.note, " ".join(trl))
        elif self.checkpoint_box.currentData() is None:
            set_note(self.note, tips.BASE_ONLY)
        else:
            set_note(self.note, "")
        self.generate_button.setEnabled(not busy and not training)
        self.generate_button.setToolTip(
            rich_tooltip(tips.TRAINING if training else tips.GENERATE, "Ctrl+Return")
        )
        self.stop_button.setEnabled(busy)
        self.checkpoint_box.setEnabled(not busy and self.checkpoint_box.currentData() is not None)

    # ------------------------------------------------------------------ problems

    def pick_problem(self, index: int) -> None:
        """Choose the problem at `index` of the picker (0: your own prompt)."""
        self.picker.pick(index)

    def _on_picker_picked(self, problem: dict | None) -> None:
        if problem is not None:
            self.prompt.blockSignals(True)
            self.prompt.setPlainText(problem["problem"])
            self.prompt.blockSignals(False)

    def _on_picker_failed(self, message: str) -> None:
        self.message_bar.show_message("warning", message)

    def _on_prompt_text_changed(self) -> None:
        picked = self.picker.problem
        if picked is not None and self.prompt.toPlainText() != picked["problem"]:
            self.picker.unpick()  # edited: a typed prompt now, without a gold answer

    # ------------------------------------------------------------------ generating

    def checker_may_run(self, cfg: TrainConfig) -> bool:
        """Whether the try config's custom checker may run: none, trusted, or typed here."""
        source = cfg.rewards.custom_checker
        m = self.model
        return (
            not source.strip()
            or m.trust_store.is_trusted(source)
            or (source == m.config.rewards.custom_checker and m.checker_trusted())
        )

    def generate(self) -> bool:
        """Answer the prompt with the base model and the chosen checkpoint. False (and the
        reason in the message bar) when it cannot run now."""
        if self.runner.busy:
            return False
        reason = self.blocked_reason()
        if reason:
            self.message_bar.show_message("warning", reason)
            return False
        self.message_bar.clear()
        cfg = self.try_config()
        sides = [("base", "base")]
        checkpoint = self.checkpoint_box.currentData()
        if checkpoint is not None:
            sides.append(("trained", checkpoint))
        for side, _ in sides:
            self.panes[side].clear("Waiting…")
        picked = self.picker.problem
        request = TryRequest(
            run_dir=self.run_dir(),
            config=self.model.config,
            problem=self.prompt.toPlainText(),
            gold=picked["answer"] if picked else None,
            settings=self.decode.values(),
            sides=sides,
            run_checker=self.checker_may_run(cfg),
            remote_code=self.model.remote_code_permission(resume=True),
        )
        self._tried_run = request.run_dir
        self.runner.start(request)
        self._update_state()
        return True

    def stop(self) -> None:
        if self.runner.busy:
            self.runner.stop()
            for pane in self.panes.values():
                if not pane.result:
                    pane.show_status("Stopping…")

    def shutdown(self) -> None:
        """Stop any job and free the model (the window closes)."""
        self.picker.stop()
        self.runner.close()

    def _on_runner_status_changed(self, side: str, text: str) -> None:
        if not self._stale:
            self.panes[side].show_status(text)

    def _on_runner_text_changed(self, side: str, texts: list) -> None:
        if not self._stale:
            self.panes[side].show_streaming(texts)

    def _on_runner_answered(self, side: str, result: dict) -> None:
        if self._stale:
            return
        self.panes[side].show_result(result)
        base = self.base_pane.result
        texts = [s["text"] for s in result["samples"]]
        if side == "trained" and base and texts == [s["text"] for s in base["samples"]]:
            pane = self.panes[side]
            pane.show_status(pane.status.text() + " · the same text as the base model")

    def _on_runner_failed(self, message: str, details: str) -> None:
        if self._stale:
            return
        self.message_bar.show_message("error", message, details)
        for pane in self.panes.values():
            if pane.result is None:
                pane.show_status("No answer (see the message above).")

    def _on_runner_finished(self) -> None:
        self._stale = False
        self._update_state()

    def _on_message_bar_details_requested(self, details: str) -> None:
        show_error_details(self, details)

    # ------------------------------------------------------------------ the session

    def _on_model_state_changed(self, _state: str) -> None:
        if self.model.runner.active:
            self.runner.release()  # the trainer needs the memory; reloaded after the run
        self.refresh()

    def _on_model_session_replaced(self) -> None:
        if self.run_dir() == self._tried_run:  # the same run again (a run folder's first read)
            self.refresh()
            return
        self._stale = self.runner.busy  # what it still says is about the other session
        self._tried_run = None
        self.runner.release()
        self.picker.forget()
        for pane in self.panes.values():
            pane.clear()
        self.refresh(latest=True)

    def _on_model_checkpoint_saved(self, _event) -> None:
        self.refresh()

    def _on_model_config_changed(self, section: str, _name: str) -> None:
        if section in ("data", "model", "rewards", "algorithm") and not self.checkpoint_steps():
            self.refresh()  # before any run, the session's settings are the ones tried

    def _on_model_config_replaced(self) -> None:
        if not self.checkpoint_steps():
            self.refresh()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        first, self._shown_once = not self._shown_once, True
        if is_trl_output(self.run_dir()) and not self.runner.busy:
            self.refresh()  # a TRL run followed live logs no checkpoint events (lists problems)
        elif first:
            self.picker.list_for(self.try_config())
