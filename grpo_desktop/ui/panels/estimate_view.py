"""The "Will it fit?" estimate under the settings: before Start, the chosen model's parameter
count (trainable / total), its estimated peak memory split into weights, training state,
activations, logits and the sampling KV cache against this computer's free GPU memory or RAM,
and a rough time per step (on the CPU a range from an idle computer to its load now); when it
will not fit (or only just), the engine's advice, each with an Apply button that makes that
change in the session (`SessionModel.set_value`, as a form field); for a small pretrained model
whose settings differ from the starter (engine/config/starters.py), that recommendation with its
own Apply.

The numbers come from `engine.estimate.fit.estimate_run` (the model's config.json on PyTorch's
meta device: nothing downloaded or loaded), run in a child process (`estimate_process.py`: no
torch and no CUDA context in this one) against the device the window's probe found, 300 ms after
the last edit of a setting it depends on; a newer request supersedes an older one; an error is a
one-line note. While a run is in progress it keeps the estimate of the run's settings, and under
the estimate's time it shows what the run's steps really take (the median of the last
MEASURED_STEPS), kept after the run until a setting the estimate depends on changes: the estimate
is made at one moment (at Start, while the run's model loads and the machine is busy), the
measurement is the run itself. It computes nothing while hidden, nor before `start()` when made
with `auto=False` (tests, benches).

What it does not do: measure anything itself, or keep Start from starting (it advises).
Try it: the panel under the settings; tests/ui/panels/test_estimate.py.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.config import (
    SMALL_MODEL_STARTER,
    STARTER_LABEL,
    TrainConfig,
    starter_summary,
)
from grpo_desktop.engine.estimate.timing import machine_load, others_load
from grpo_desktop.ui.common.widgets import note_label, rich_tooltip, set_note, wrapped_label
from grpo_desktop.ui.panels import estimate_text as say
from grpo_desktop.ui.panels.estimate_bar import MemoryBar, part_colour
from grpo_desktop.ui.panels.estimate_process import EstimateProcess, device_facts
from grpo_desktop.ui.panels.estimate_text import PART_HELP, PARTS
from grpo_desktop.ui.run.worker import ACTIVE_STATES

DELAY_MS = 300
MAX_SHARE = 0.5  # of the window's middle height: the settings above keep the rest
FIT_TRIES, FIT_RETRY_MS = 3, 50  # the dock's height: checked after each layout pass
QWIDGETSIZE_MAX = 16_777_215
IGNORED_SECTIONS = ("rewards", "run")  # the checker, steps and logging change no memory
NO_MODEL = "—  Choose a model to see whether it fits."
FIRST = "Estimating… (the first estimate reads the model's code: a few seconds)"


MEASURED_STEPS = 10  # the measured time per step is the median of this many last steps


def config_key(cfg: TrainConfig) -> str:
    """The settings an estimate depends on, as one comparable string."""
    data = {k: v for k, v in cfg.to_dict().items() if k not in IGNORED_SECTIONS}
    # the reward settings the small-model starter recommends change its advice, not the memory
    data["starter"] = {k: getattr(cfg.rewards, k) for k in SMALL_MODEL_STARTER.get("rewards", {})}
    return json.dumps(data, sort_keys=True, default=str)


class EstimateView(QWidget):
    """The estimate of the session's current settings (see the module docstring)."""

    estimate_shown = Signal()  # a new result or error is on screen

    def __init__(
        self,
        model,
        parent: QWidget | None = None,
        *,
        auto: bool = True,
        free_bytes: int | None = None,
        delay_ms: int = DELAY_MS,
    ):
        super().__init__(parent)
        self.model = model
        self.auto = auto
        self.free_bytes = free_bytes  # None: the device's (the probe's for a GPU)
        self.device = device_facts(model.device_info)  # None: the child finds it
        self._await_probe = auto and self.device is None  # a window that probes: its answer
        self.estimator = EstimateProcess(self)
        self.estimator.answered.connect(self._on_estimator_answered)
        self._own_estimator = True
        self.result: dict | None = None
        self.error = ""
        self._shown_key: str | None = None  # the settings of what is on screen
        self._run_key: str | None = None  # the settings of the run in progress
        self._measured_key: str | None = None  # the settings the measured step time is for
        self._stale = True
        self._fit_tries = 0
        self._dock_hooked = False
        self.timer = QTimer(self, singleShot=True, interval=delay_ms)
        self.timer.timeout.connect(self._on_timer_timeout)

        self.summary = wrapped_label()
        self.busy_label = QLabel("updating…")
        self.busy_label.setStyleSheet("color: palette(placeholder-text);")
        self.busy_label.hide()
        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addWidget(self.busy_label, 0, Qt.AlignmentFlag.AlignTop)
        self.bar = MemoryBar()
        self.verdict = wrapped_label()
        self.legend = QWidget()
        grid = QGridLayout(self.legend)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(1)
        self.part_labels: dict[str, QLabel] = {}
        for i, (key, _label, _help) in enumerate(PARTS):
            label = QLabel()
            label.setObjectName(f"estimate.{key}")
            self.part_labels[key] = label
            grid.addWidget(label, i // 2, i % 2)
        self.time_label = wrapped_label(muted=True)
        self.advice_box = QWidget()
        self.advice_rows = QVBoxLayout(self.advice_box)
        self.advice_rows.setContentsMargins(0, 2, 0, 0)
        self.advice_rows.setSpacing(2)
        self.advice_labels: list[QLabel] = []
        self.advice_buttons: list[QPushButton] = []
        self.note = note_label("warning")
        self.run_note = wrapped_label(muted=True)
        self.run_note.setText(
            "The estimate of the running settings; changes are estimated when the run ends."
        )
        self.run_note.hide()
        self.measured_label = wrapped_label(muted=True)
        self.measured_label.setObjectName("estimate.measured")
        self.measured_label.setToolTip(
            "What this run's steps really took on this computer. The estimate above was made "
            "before the run: from the settings and a short measurement of this computer's speed."
        )
        self.measured_label.hide()
        self.details = [self.bar, self.verdict, self.legend, self.time_label, self.advice_box]

        col = QVBoxLayout(self)
        col.setContentsMargins(8, 4, 8, 6)
        col.setSpacing(3)
        col.addLayout(top)
        for w in self.details:
            col.addWidget(w)
            if w is self.time_label:
                col.addWidget(self.measured_label)
        for w in (self.note, self.run_note):
            col.addWidget(w)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

        model.config_changed.connect(self._on_model_config_changed)
        model.config_replaced.connect(self._on_model_config_replaced)
        # (a loaded session also says config_replaced)
        model.device_info_changed.connect(self._on_model_device_info_changed)
        model.state_changed.connect(self._on_model_state_changed)
        model.step_finished.connect(self._on_model_step_finished)
        model.session_replaced.connect(self._forget_measured)
        self._show_nothing(NO_MODEL if not self._model_name() else "Not estimated yet.")

    # ------------------------------------------------------------------ when to estimate

    def start(self, free_bytes: int | None = None) -> None:
        """Estimate from now on (a view made with auto=False), against `free_bytes` of free
        memory when given instead of what the device reports (the constructor's otherwise)."""
        self.auto = True
        self.set_free_bytes(self.free_bytes if free_bytes is None else free_bytes)

    def set_free_bytes(self, free_bytes: int | None) -> None:
        """Estimate against this much free memory (None: what the device reports)."""
        self.free_bytes = free_bytes
        self._stale = True
        self.schedule()

    def stop(self) -> None:
        """End the estimate's child process (the window closes; a shared one is let go)."""
        self.timer.stop()
        if self._own_estimator:
            self.estimator.stop()
        else:  # let it go, and keep an own one (not started) in its place
            self.estimator.cancel()
            self.estimator.answered.disconnect(self._on_estimator_answered)
            self.estimator, self._own_estimator = EstimateProcess(self), True
            self.estimator.answered.connect(self._on_estimator_answered)

    def share_estimator(self, estimator: EstimateProcess) -> None:
        """Estimate with `estimator`, which outlives this view (tests: one child for many
        windows); call before the first estimate."""
        self.estimator.stop()
        self.estimator.answered.disconnect(self._on_estimator_answered)
        self.estimator, self._own_estimator = estimator, False
        estimator.cancel()
        estimator.answered.connect(self._on_estimator_answered)

    def schedule(self) -> None:
        """Estimate the current settings DELAY_MS from now (unless hidden, off or a run is
        going)."""
        if self._run_key is not None:
            self.run_note.setVisible(config_key(self.model.config) != self._run_key)
            return
        if not self.auto or not self.isVisible() or self._await_probe:
            self._stale = True
            if self._await_probe and self.result is None and self._model_name():
                self.summary.setText(FIRST)
            return
        if not self._model_name():
            self.timer.stop()
            self.estimator.cancel()
            self.result, self.error, self._shown_key = None, "", None
            self.busy_label.hide()
            self._show_nothing(NO_MODEL)
            return
        if self.result is None and not self.error:
            self.summary.setText(FIRST)
        self.busy_label.show()
        self.timer.start()

    def pending(self) -> bool:
        """Whether an estimate is scheduled or being computed."""
        return self.timer.isActive() or self.estimator.busy()

    def shown_for_current_settings(self) -> bool:
        """Whether what is on screen is the estimate (or error) of the current settings."""
        return not self.pending() and self._shown_key == config_key(self.model.config)

    def _model_name(self) -> str:
        return str(self.model.config.model.name_or_path or "").strip()

    def _on_model_config_changed(self, section: str, name: str) -> None:
        if section not in IGNORED_SECTIONS or name in SMALL_MODEL_STARTER.get(section, {}):
            self._stale = True
            self._sync_measured()
            self.schedule()

    def _on_model_config_replaced(self, *_args) -> None:
        self._stale = True
        self._sync_measured()
        self.schedule()

    def _on_model_step_finished(self, _step: int) -> None:
        """The run's real time per step, under the estimate's (a run of these settings only)."""
        if self._run_key is None:
            return
        measured = self.model.history.median_step_time(MEASURED_STEPS)
        if measured is None:
            return
        self._measured_key = self._run_key
        median, n = measured
        value = f"{median:.2f} s" if median < 10 else say.seconds_text(median)
        last = "the last step" if n == 1 else f"the median of the last {n}"
        self.measured_label.setText(f"Measured in this run: {value} per step ({last})")
        self._sync_measured()

    def _sync_measured(self) -> None:
        """The measured time shows while its run goes on (like the estimate of the running
        settings) and afterwards while the settings are that run's."""
        key = self._measured_key
        self.measured_label.setVisible(
            key is not None and (self._run_key is not None or key == config_key(self.model.config))
        )

    def _forget_measured(self, *_args) -> None:
        """Another session: nothing of this one's runs applies."""
        self._measured_key = None
        self.measured_label.hide()

    def _on_model_device_info_changed(self, info: dict) -> None:
        if info.get("probed"):
            self.device, self._await_probe = device_facts(info), False
            self._stale = True
            self.schedule()

    def _on_model_state_changed(self, state: str) -> None:
        if state in ACTIVE_STATES:
            if self._run_key is None:  # a run just started, with the current settings
                self._run_key = config_key(self.model.config)
                if self.auto and self._model_name() and self._shown_key != self._run_key:
                    self.timer.stop()
                    self._submit()  # now, before the run's model takes the memory
            return
        if self._run_key is not None:
            self._run_key = None
            self.run_note.hide()
            self._sync_measured()
            if self._stale or self._shown_key != config_key(self.model.config):
                self.schedule()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self._stale:
            self.schedule()

    def _on_timer_timeout(self) -> None:
        if self._run_key is None and self.isVisible():
            self._submit()

    def _submit(self) -> None:
        cfg = TrainConfig.from_dict(self.model.config.to_dict())
        key = config_key(cfg)
        self._stale = False
        self.busy_label.show()
        payload = {"config": cfg.to_dict(), "free_bytes": self.free_bytes, "device": self.device}
        self.estimator.request(payload, key)

    def _on_estimator_answered(self, key: str, result: Any, error: str | None) -> None:
        self.busy_label.setVisible(self.timer.isActive())
        self._shown_key = key
        if error is not None:
            self.result, self.error = None, say.one_line(RuntimeError(error))
            self._show_nothing("")
            self.summary.hide()
            set_note(self.note, f"No estimate: {self.error}")
            self.note.setToolTip(rich_tooltip(error))
        else:
            self.result, self.error = result, ""
            if self._run_key is not None:  # timed beside this app's own run: it was busy
                self._count_own_run(result)
            self._show(result)
        if self._run_key is not None:
            self.run_note.setVisible(key != config_key(self.model.config))
        self._fit_tries = 0
        QTimer.singleShot(0, self, self._fit_height)  # once the new rows are laid out
        self.estimate_shown.emit()

    def _load_of_others(self) -> tuple[float, int] | None:
        """The load average now, less this app's own run (which uses every core) while it
        trains: a range up to "busy" would count the run as a program slowing itself."""
        load = machine_load()
        if self._run_key is None or load is None:
            return load
        return others_load(load, load[1])

    def _count_own_run(self, result: dict) -> None:
        """An estimate whose CPU speed was timed while this app's run trained: the timing
        shared the cores with the run, so its load counts at least the run's threads."""
        device = result.get("device")
        measured = device.get("speed_load") if isinstance(device, dict) else None
        if measured and device.get("kind") == "cpu":
            load, cores = measured
            device["speed_load"] = (max(float(load), float(cores)), cores)

    # ------------------------------------------------------------------ showing it

    def _show_nothing(self, text: str) -> None:
        self.summary.setText(text)
        self.summary.setToolTip("")
        self.summary.show()
        for w in self.details:
            w.hide()
        set_note(self.note, "")
        self._fill_advice([])

    def _show(self, r: dict) -> None:
        text, tip = say.summary(r)
        self.summary.setText(text)
        self.summary.setToolTip(rich_tooltip(tip))
        self.summary.show()
        text, lines = say.verdict(r)
        self.verdict.setText(text)
        self.verdict.setToolTip(rich_tooltip(*lines))
        status, free = say.status_of(r), r.get("device", {}).get("free_bytes")
        self.bar.set_parts(say.peak_parts(r), free, status)
        for key, text, at_peak, extra in say.legend(r):
            swatch = part_colour(status, key).name()
            text = f"<span style='color:{swatch}'>■</span> {text}"
            if not at_peak:  # the other phase's: freed before the peak
                text = f"<span style='color:#80868b'>{text}</span>"
            self.part_labels[key].setText(text)
            self.part_labels[key].setToolTip(rich_tooltip(PART_HELP[key], *extra))
        beside_run = self._run_key is not None
        text, lines = say.time_line(r, self._load_of_others(), beside_run)  # a CPU's load varies
        self.time_label.setText(text)
        self.time_label.setToolTip(rich_tooltip(say.TIME_HELP, *lines))
        for w in self.details:
            w.show()
        set_note(self.note, "")
        self._fill_advice(say.advice(r) + say.starter(r))

    def _fill_advice(self, advice: list[dict]) -> None:
        while self.advice_rows.count():
            row = self.advice_rows.takeAt(0).layout()
            while row is not None and row.count():
                row.takeAt(0).widget().deleteLater()
        self.advice_labels, self.advice_buttons = [], []
        for item in advice:
            row = QHBoxLayout()
            label = wrapped_label(f"• {item.get('text', '')}")
            label.setTextFormat(Qt.TextFormat.PlainText)
            if item is (self.result or {}).get("starter"):  # why each of the starter's settings
                label.setToolTip(rich_tooltip(f"{STARTER_LABEL}:", *starter_summary().splitlines()))
            self.advice_labels.append(label)
            row.addWidget(label, 1)
            change = item.get("change")
            if isinstance(change, dict) and change:
                button = QPushButton("Apply")
                many = sum(len(fields) for fields in change.values()) > 1
                button.setToolTip(
                    rich_tooltip(
                        f"Change the setting{'s' if many else ''}: " + say.describe_change(change)
                    )
                )
                button.clicked.connect(partial(self._apply, change))
                self.advice_buttons.append(button)
                row.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
            self.advice_rows.addLayout(row)
        self.advice_box.setVisible(bool(advice))

    def _apply(self, change: dict) -> None:
        """Make one advice's change through the session model, as the form fields do."""
        for section, fields in change.items():
            for name, value in fields.items():
                self.model.set_value(section, name, value)

    # ------------------------------------------------------------------ fitting the dock

    def _fit_height(self) -> None:
        """Make the dock holding this view as tall as the content needs at its width, at most
        MAX_SHARE of the window's middle (a dock does not grow by itself when advice rows
        appear: it squeezes them; past the cap the dock's scroll area scrolls)."""
        dock = self.parentWidget()
        while dock is not None and not isinstance(dock, QDockWidget):
            dock = dock.parentWidget()
        window = dock.parentWidget() if dock is not None else None
        if not isinstance(window, QMainWindow) or dock.isFloating() or self._fit_tries >= FIT_TRIES:
            return
        if not self._dock_hooked:  # a reset or moved layout gives the dock another height
            self._dock_hooked = True
            dock.dockLocationChanged.connect(self._on_dock_dock_location_changed)
        layout = self.layout()
        layout.activate()
        need = layout.totalHeightForWidth(max(self.width(), 200))
        room = self.parentWidget().height()  # the scroll area's viewport (or the dock's inside)
        cap = int(MAX_SHARE * window.centralWidget().height())
        target = min(need, cap) if cap > 0 else need
        if need > 0 and not target <= room <= target + 3:
            self._fit_tries += 1  # look again once laid out
            height = target + 2 + dock.height() - room  # plus the title bar and frame
            if height <= 0 or room <= 0 or not window.isVisible():
                # not laid out yet (a hidden window or one shown mid-teardown reports the
                # dock and its inside out of step): look again after the next layout pass
                QTimer.singleShot(FIT_RETRY_MS, self, self._fit_height)
                return
            height = max(dock.minimumSizeHint().height(), height)
            # resizeDocks lands only part of the way in a column of tabbed docks: pin the
            # height for one layout pass, then let the user drag the splitter again
            dock.setFixedHeight(height)
            QTimer.singleShot(FIT_RETRY_MS, self, partial(self._release, dock))

    def _release(self, dock: QDockWidget) -> None:
        dock.setMinimumHeight(0)
        dock.setMaximumHeight(QWIDGETSIZE_MAX)
        QTimer.singleShot(0, self, self._fit_height)  # check it held

    def _on_dock_dock_location_changed(self, *_args) -> None:
        self._fit_tries = 0
        QTimer.singleShot(0, self, self._fit_height)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._fit_tries = 0
            QTimer.singleShot(0, self, self._fit_height)  # narrower: advice wraps to more lines


__all__ = ["EstimateView", "config_key"]
