"""The main window: settings panels on the left, live plots and the rollout inspector in the middle,
the run log below, run controls on top and the device, memory and run state in the status bar.

Everything talks through the `SessionModel`: panels edit its config, the run controls start and
stop its runner, plots and the inspector redraw from its history. The window itself only lays
things out, shows messages (one line of fixed height above the tabs, ui/common/message_area.py:
the most important of the errors, alarms, the run to continue and the welcome, the others
counted; never a raw traceback, and nothing below moves when one comes or goes), decides what Start means
(continue the session's run, or start over after asking), remembers the layout in QSettings,
and on close asks about a run in progress and unsaved changes, then stops the worker and waits
for it without freezing. Files, the title, autosave and crash recovery: `SessionController`.

Try it:  grpo-desktop   (or: grpo-desktop open my-run.grpo)
"""

from __future__ import annotations

import os
import tempfile

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.session.document import SessionDocument, new_session
from grpo_desktop.ui.common.message_area import PRIORITY, MessageArea, WindowMessage
from grpo_desktop.ui.common.tasks import wait_for_all
from grpo_desktop.ui.common.wheel_guard import guard_wheel_in
from grpo_desktop.ui.common.widgets import show_error_details
from grpo_desktop.ui.compare.view import CompareView
from grpo_desktop.ui.export.menu import install_export_action
from grpo_desktop.ui.inspector.view import InspectorView
from grpo_desktop.ui.learn_help import LearnAndHelp
from grpo_desktop.ui.panels.dataset_panel import DatasetPanel
from grpo_desktop.ui.panels.estimate_view import EstimateView
from grpo_desktop.ui.panels.hyper_panel import HyperPanel
from grpo_desktop.ui.panels.model_panel import ModelPanel
from grpo_desktop.ui.panels.reward_panel import RewardPanel
from grpo_desktop.ui.plots.view import PlotsView
from grpo_desktop.ui.run.alarm_banner import AlarmBanners
from grpo_desktop.ui.run.controls import RunControls
from grpo_desktop.ui.run.log_view import LogView
from grpo_desktop.ui.run.system_info import DeviceProbe, describe_device, memory_in_use
from grpo_desktop.ui.run.worker import ACTIVE_STATES, FINAL_STATES, default_train_fn
from grpo_desktop.ui.session.controller import SessionController, untitled_document
from grpo_desktop.ui.session.dialogs import (
    CANCEL,
    NEW_SESSION,
    ask_start_with_failed_checker,
)
from grpo_desktop.ui.session.model import UNTRUSTED_CHECKER, SessionModel
from grpo_desktop.ui.session.resume_banner import ResumeBanner
from grpo_desktop.ui.session.run_folder import RunFolderFollower
from grpo_desktop.ui.try_it.view import TryView
from grpo_desktop.ui.welcome import DISMISS_TIP as WELCOME_DISMISS_TIP
from grpo_desktop.ui.welcome import WelcomePanel
from grpo_desktop.ui.window_fit import PREFERRED_SIZE, dock_width_for, fit_window, keep_on_screen

LAYOUT_VERSION = 1
DEFAULT_SIZE = PREFERRED_SIZE  # clamped to the screen's available area (window_fit)


def _first_document(config: TrainConfig) -> SessionDocument:
    """The untitled session a window starts with (in a temporary folder if the user's data
    folder cannot be written)."""
    try:
        return untitled_document(config)
    except OSError:
        folder = tempfile.mkdtemp(prefix="grpo-desktop-")
        return new_session(os.path.join(folder, "Untitled.grpo"), config, name="Untitled")


class MainWindow(LearnAndHelp, QMainWindow):
    closed = Signal()

    def __init__(
        self,
        config: TrainConfig,
        train_fn=default_train_fn,
        *,
        session: str | None = None,
        settings: QSettings | None = None,
        probe_device: bool = True,
        max_rollout_rows: int | None = None,
    ):
        """A window on a new untitled session holding `config`, or on the session folder
        `session` (when it cannot be opened the message shows over the untitled one)."""
        super().__init__()
        extra = {} if max_rollout_rows is None else {"max_rollout_rows": max_rollout_rows}
        self.model = SessionModel(_first_document(config), train_fn, parent=self, **extra)
        self.settings = settings or QSettings()
        self._close_when_stopped = False
        self._lab = None  # the Lab window, made on first use
        self._help = None  # the Help window, made on first use
        self.setWindowTitle("GRPO Desktop")
        self.setDockNestingEnabled(True)

        self.messages = MessageArea()  # every message of the window, one at a time
        self.message_bar = WindowMessage()
        self.messages.add(self.message_bar, self.message_bar.priority, self.message_bar.clear)
        self.plots = PlotsView(self.model)
        self.inspector = InspectorView(self.model)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.plots, "Training plots")
        self.tabs.addTab(self.inspector, "Rollouts")
        self.try_view = TryView(self.model)
        self.tabs.addTab(self.try_view, "Try")
        self.compare_view = CompareView(self.model)
        self.tabs.addTab(self.compare_view, "Compare")
        central = QWidget()
        col = QVBoxLayout(central)
        col.setContentsMargins(4, 4, 4, 0)
        col.addWidget(self.messages)
        col.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self.model_panel = ModelPanel(self.model)
        self.dataset_panel = DatasetPanel(self.model)
        self.reward_panel = RewardPanel(self.model)
        self.hyper_panel = HyperPanel(self.model)
        self.docks: dict[str, QDockWidget] = {}
        for name, title, panel in (
            ("model", "Model", self.model_panel),
            ("dataset", "Dataset", self.dataset_panel),
            ("reward", "Reward", self.reward_panel),
            ("hyper", "Hyperparameters", self.hyper_panel),
        ):
            self.docks[name] = self._dock(name, title, panel, Qt.DockWidgetArea.LeftDockWidgetArea)
        first = self.docks["model"]
        # "Will it fit?" under the settings tabs; a window that probes nothing of this computer
        # (tests, benchmarks) estimates only when asked (estimate_view.start())
        self.estimate_view = EstimateView(self.model, auto=probe_device)
        left = Qt.DockWidgetArea.LeftDockWidgetArea
        self.docks["estimate"] = self._dock("estimate", "Will it fit?", self.estimate_view, left)
        self.splitDockWidget(first, self.docks["estimate"], Qt.Orientation.Vertical)
        for name in ("dataset", "reward", "hyper"):
            self.tabifyDockWidget(first, self.docks[name])
        first.raise_()
        self.dataset_panel.set_active(False)
        self.docks["dataset"].visibilityChanged.connect(self.dataset_panel.set_active)
        self.log_view = LogView(self.model)
        self.docks["log"] = self._dock(
            "log", "Log", self.log_view, Qt.DockWidgetArea.BottomDockWidgetArea, scroll=False
        )

        self.controls = RunControls(self.model, self)
        toolbar = QToolBar("Run")
        toolbar.setObjectName("toolbar.run")
        toolbar.setMovable(False)
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        toolbar.addActions(self.controls.actions())
        toolbar.addSeparator()
        toolbar.addWidget(self.controls.progress)
        toolbar.addWidget(self.controls.progress_label)
        self.run_summary = QLabel()
        self.run_summary.setContentsMargins(12, 0, 0, 0)
        toolbar.addWidget(self.run_summary)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)
        self.resume_banner = ResumeBanner(
            self.model, self.controls.start_action, self.controls.start_over_action
        )
        self.messages.add(
            self.resume_banner,
            PRIORITY["stopped"],
            dismiss_tip="Hide this until the run's state changes (Run ▸ Continue still works)",
        )
        self.welcome = WelcomePanel(self.settings)
        self.messages.add(
            self.welcome, PRIORITY["welcome"], self.welcome.dismiss, WELCOME_DISMISS_TIP
        )
        self.alarms = AlarmBanners(self.model, self.messages, self)  # one per alarm kind
        self.session = SessionController(self, self.settings)
        self.run_folder = RunFolderFollower(self)  # File ▸ Open Run Folder…: read-only, followed
        self.messages.add(
            self.run_folder.banner,
            PRIORITY["folder"],
            self.run_folder.dismiss_banner,
            "Hide this note (the folder is still followed; its Close stops that)",
        )
        self.state_label = QLabel()
        self.device_label = QLabel("Checking the device…")
        self.memory_label = QLabel()
        for w in (self.device_label, self.memory_label):
            w.setContentsMargins(8, 0, 8, 0)
        self.statusBar().addWidget(self.state_label, 1)
        self.statusBar().addPermanentWidget(self.device_label)
        self.statusBar().addPermanentWidget(self.memory_label)
        self._build_menus()

        self.controls.start_requested.connect(self.start_run)
        self.controls.start_over_requested.connect(self.start_over)
        self.model.state_changed.connect(self._on_model_state_changed)
        self.model.run_started.connect(self._on_model_run_started)
        self.model.step_finished.connect(self._on_model_step_finished)
        self.model.pause_reached.connect(self._on_model_step_finished)
        self.model.eval_finished.connect(self._on_model_eval_finished)
        self.model.log_added.connect(self._on_model_log_added)
        self.model.alert_raised.connect(self._on_model_alert_raised)
        self.model.run_finished.connect(self._on_model_run_finished)
        self.model.step_focused.connect(self._on_model_step_focused)
        self.model.lab_requested.connect(self._on_model_lab_requested)
        self.model.device_info_changed.connect(self._on_model_device_info_changed)
        self.model.config_changed.connect(self._on_model_config_changed)
        self.model.session_replaced.connect(self._on_model_session_replaced)
        self.message_bar.details_requested.connect(self._on_message_bar_details_requested)
        self.memory_timer = QTimer(self, interval=2000)
        self.memory_timer.timeout.connect(self._on_memory_timer_timeout)
        self.memory_timer.start()
        self._on_memory_timer_timeout()
        self.probe = DeviceProbe(self)
        self.probe.probed.connect(self.model.set_device_info)
        if probe_device:
            self.probe.start()
        for dock in self.docks.values():  # the wheel edits a field only once it has focus
            guard_wheel_in(dock)
        self._fit_to_screen()
        self._restore_layout()
        self._on_model_state_changed(self.model.state)
        if session:
            self.session.open_session(session)

    def _dock(
        self, name: str, title: str, widget: QWidget, area, scroll: bool = True
    ) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock.{name}")
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
            | QDockWidget.DockWidgetFeature.DockWidgetClosable
        )
        if scroll:
            area_widget = QScrollArea()
            area_widget.setWidgetResizable(True)
            area_widget.setFrameShape(QScrollArea.Shape.NoFrame)
            area_widget.setWidget(widget)
            dock.setWidget(area_widget)
            dock.setMinimumWidth(380)
        else:
            dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.session.fill_menu(file_menu)
        file_menu.addSeparator()
        self.export_action = install_export_action(self, file_menu)  # ui/export/
        file_menu.addAction("Export History as CSV…", lambda: self.plots.export_history_csv())
        file_menu.addSeparator()
        quit_action = file_menu.addAction("Quit", self.close)
        quit_action.setShortcut("Ctrl+Q")
        run_menu = bar.addMenu("&Run")
        run_menu.addActions(self.controls.actions())
        run_menu.addSeparator()
        run_menu.addAction(self.controls.start_over_action)
        view = bar.addMenu("&View")
        for dock in self.docks.values():
            view.addAction(dock.toggleViewAction())
        view.addSeparator()
        view.addAction(
            "Show advanced settings", lambda: self.hyper_panel.set_advanced_visible(True)
        )
        view.addAction("Reset layout", self.reset_layout)
        self._build_learn_and_help_menus(bar)

    # ------------------------------------------------------------------ run

    def start_run(self, fresh: bool = False) -> bool:
        """Start training: continue the session's run when it can be continued (unless `fresh`),
        else start from step 0 — asking first when that would replace a run. Shows why not."""
        if self.model.running:
            return False
        if self.model.read_only:  # a run folder watched (ui/session/run_folder.py)
            self.show_message("error", self.model.start()[0])
            return False
        if not self.model.checker_trusted():
            self.show_message("error", UNTRUSTED_CHECKER)
            self.docks["reward"].show()
            self.docks["reward"].raise_()
            return False
        failed_test = self.model.failed_checker_test()
        if failed_test is not None and not ask_start_with_failed_checker(self, *failed_test):
            self.docks["reward"].show()
            self.docks["reward"].raise_()
            return False
        blocker = self.dataset_panel.start_blocker()
        if blocker:  # the Dataset panel already shows that this data cannot train
            self.show_message("error", f"Cannot start: {blocker}")
            self.docks["dataset"].show()
            self.docks["dataset"].raise_()
            return False
        blocker = self.model_panel.start_blocker()
        if blocker:  # a hub id not cached while offline: the run would fail after a minute
            self.show_message("error", f"Cannot start: {blocker}")
            self.docks["model"].show()
            self.docks["model"].raise_()
            return False
        resume = not fresh and self.model.can_continue()
        if not self.session.check_model_code(self.model.doc.path, resume):
            return False  # the model's own code stays off: nothing that would run it starts
        state = self.model.run_state()
        if not resume and state.has_steps:
            answer = self.session.ask_start_over(state.last_step)
            if answer == CANCEL:
                return False
            if answer == NEW_SESSION and not self.session.new_session(self.model.config):
                return False
        problems = self.model.start(resume=resume)
        if problems:
            self.show_message(
                "error", "Fix these settings before starting:\n• " + "\n• ".join(problems)
            )
            return False
        self.message_bar.clear()
        for text in self.model.warnings():
            self.show_message("warning", text)
        return True

    def start_over(self) -> bool:
        """Train again from step 0 (asks before replacing the session's run)."""
        return self.start_run(fresh=True)

    def show_message(self, kind: str, text: str, details: str = "") -> None:
        if kind == "warning" and self.message_bar.kind == "error":
            return  # an error stays visible until dismissed
        self.message_bar.show_message(kind, text, details)

    def _on_model_state_changed(self, state: str) -> None:
        self.state_label.setText(self.controls.state_text())
        if state in FINAL_STATES and self.model.device_info:
            self.device_label.setText(describe_device(self.model.device_info))
        elif self.controls.device_text():  # "Paused on cpu" while paused, not "Training on"
            self.device_label.setText(self.controls.device_text())
        if state in FINAL_STATES and self._close_when_stopped:
            QTimer.singleShot(0, self.close)

    def _on_model_run_started(self, event) -> None:
        self.welcome.fold()
        self.device_label.setText(f"Training on {event.device}")
        self.run_summary.setText(_short_model_name(event.model))
        self.state_label.setText(self.controls.state_text())

    def _on_model_session_replaced(self) -> None:
        run = self.model.history.run
        self.run_summary.setText(_short_model_name(run.get("model", "")) if run else "")
        evals = self.model.history.evals if run else []
        if evals:  # a reopened run shows its last held-out accuracy, as it did when it ran
            last = evals[-1]
            self.run_summary.setText(
                f"{self.run_summary.text()} · held-out accuracy {last['accuracy']:.0%} "
                f"(step {last['step']})"
            )
        self.state_label.setText(self.controls.state_text())

    def _on_model_step_finished(self, *_args) -> None:
        self.state_label.setText(self.controls.state_text())

    def _on_model_eval_finished(self, event) -> None:
        self.run_summary.setText(
            f"{_short_model_name(self.model.history.run.get('model', '')) if self.model.history.run else ''}"
            f" · held-out accuracy {event.accuracy:.0%} (step {event.step})"
        )

    def _on_model_log_added(self, event) -> None:
        if event.level == "warning":
            self.show_message("warning", event.message)
        else:
            self.statusBar().showMessage(event.message.split(". ")[0].rstrip(".") + ".", 15_000)

    def _on_model_alert_raised(self, event) -> None:
        # The banner says it all (run/alarm_banner.py); the status bar repeats it in a line.
        self.statusBar().showMessage(f"Alert at step {event.step}: {event.message}", 30_000)

    def _on_model_run_finished(self, event) -> None:
        if event.status == "failed":
            self.show_message("error", f"The run failed. {event.message}", event.error or "")

    def _on_model_config_changed(self, *_args) -> None:
        if self.model.running:
            self.statusBar().showMessage(
                "The running training keeps its settings; changes apply to the next run.", 8000
            )

    def _on_model_step_focused(self, _step: int) -> None:
        self.tabs.setCurrentWidget(self.inspector)

    def _on_model_device_info_changed(self, info: dict) -> None:
        if not self.model.running:
            self.device_label.setText(describe_device(info))

    def _on_memory_timer_timeout(self) -> None:
        self.memory_label.setText(memory_in_use())
        self.state_label.setText(self.controls.state_text())

    def _on_message_bar_details_requested(self, details: str) -> None:
        show_error_details(self, details)

    # ------------------------------------------------------------------ files

    def open_config(self, path: str) -> bool:
        """Import the settings in a JSON file (asks before its checker code may run)."""
        return self.session.open_config(path)

    # ------------------------------------------------------------------ layout and closing

    def _restore_layout(self) -> None:
        if self.settings.value("layout/version", 0, type=int) != LAYOUT_VERSION:
            return
        geometry = self.settings.value("layout/geometry")
        state = self.settings.value("layout/state")
        if geometry is not None:
            self.restoreGeometry(geometry)
            keep_on_screen(self)  # saved on a larger screen: pulled back inside this one
        if state is not None:
            self.restoreState(state, LAYOUT_VERSION)
        self.plots.smoothing.setValue(self.settings.value("plots/smoothing", 0, type=int))

    def save_layout(self) -> None:
        self.settings.setValue("layout/version", LAYOUT_VERSION)
        self.settings.setValue("layout/geometry", self.saveGeometry())
        self.settings.setValue("layout/state", self.saveState(LAYOUT_VERSION))
        self.settings.setValue("plots/smoothing", self.plots.smoothing.value())
        self.settings.sync()

    def reset_layout(self) -> None:
        for name, dock in self.docks.items():
            dock.setFloating(False)
            dock.show()
            area = (
                Qt.DockWidgetArea.BottomDockWidgetArea
                if name == "log"
                else Qt.DockWidgetArea.LeftDockWidgetArea
            )
            self.addDockWidget(area, dock)
        self.splitDockWidget(self.docks["model"], self.docks["estimate"], Qt.Orientation.Vertical)
        for name in ("dataset", "reward", "hyper"):
            self.tabifyDockWidget(self.docks["model"], self.docks[name])
        self.docks["model"].raise_()
        self.run_folder.apply_layout()  # a TRL run shown read-only keeps its settings hidden
        self._fit_to_screen()

    def _fit_to_screen(self) -> None:
        """The first-launch size: DEFAULT_SIZE where the screen allows, else its available area."""
        rect = fit_window(self, DEFAULT_SIZE)
        width = rect.width() if rect is not None else DEFAULT_SIZE[0]
        height = rect.height() if rect is not None else DEFAULT_SIZE[1]
        self.resizeDocks([self.docks["model"]], [dock_width_for(width)], Qt.Orientation.Horizontal)
        log_height = 120 if height >= 860 else 90
        self.resizeDocks([self.docks["log"]], [log_height], Qt.Orientation.Vertical)

    def ask_stop_on_close(self) -> bool:
        """Whether to stop the run and quit (asked when closing during a run)."""
        answer = QMessageBox.question(
            self,
            "Stop training and quit?",
            "A run is in progress. Quitting finishes the current step, saves a checkpoint and "
            "stops the run. Quit now?",
        )
        return answer == QMessageBox.StandardButton.Yes

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self.model.running:
            if self._close_when_stopped or self.ask_stop_on_close():
                self._close_when_stopped = True
                self.model.stop()
                self.statusBar().showMessage(
                    "Stopping: finishing the step and saving, then quitting…"
                )
                self.setEnabled(False)
            event.ignore()
            return
        self.setEnabled(True)
        self._close_when_stopped = False
        if not self.session.maybe_save_changes():
            event.ignore()
            return
        self.model.runner.wait()
        self.try_view.shutdown()
        self.compare_view.shutdown()
        self.probe.stop()
        self.estimate_view.stop()
        self.memory_timer.stop()
        self.run_folder.stop()
        self.plots.timer.stop()
        self.save_layout()
        self.session.window_closed()
        wait_for_all()
        event.accept()
        self.closed.emit()


def _short_model_name(path: str) -> str:
    parts = path.rstrip("/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 else path


__all__ = ["ACTIVE_STATES", "MainWindow"]
