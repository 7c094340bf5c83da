"""A first window: run the built-in demo with Start / Pause / Stop and watch the reward rise.

A deliberately small window until the full GUI (panels, plots, rollout inspector) lands: it shows
the run state, a live reward plot, the held-out accuracy and a log of what the engine reports.
"""

from __future__ import annotations

import os
import sys
import tempfile

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.worker import (
    PAUSED,
    RUNNING,
    STARTING,
    STOPPING,
    TrainingRunner,
    default_train_fn,
)


class MainWindow(QMainWindow):
    def __init__(self, config, train_fn=default_train_fn, run_dir: str | None = None):
        super().__init__()
        import pyqtgraph as pg

        self.config = config
        self.run_dir = run_dir or tempfile.mkdtemp(prefix="grpo-desktop-run-")
        self.runner = TrainingRunner(train_fn, self)
        self.runner.state_changed.connect(self._on_runner_state_changed)
        self.runner.event_received.connect(self._on_runner_event_received)
        self.steps: list[int] = []
        self.rewards: list[float] = []
        self._dirty = False

        self.setWindowTitle("GRPO Desktop — demo")
        self.start_button = QPushButton("Start")
        self.start_button.setToolTip("Start training (Ctrl+R)")
        self.pause_button = QPushButton("Pause")
        self.pause_button.setToolTip("Pause between steps / resume (Ctrl+P)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Finish the current step, save a checkpoint and stop (Ctrl+.)")
        self.state_label = QLabel("Ready: press Start to train the demo.")
        self.progress = QProgressBar()
        self.progress.setFormat("step %v / %m")
        self.plot = pg.PlotWidget(title="Mean reward per step")
        self.plot.setLabel("bottom", "step")
        self.plot.setLabel("left", "reward")
        self.curve = self.plot.plot([], [], pen=pg.mkPen("#2a7ae2", width=2))
        self.log = QPlainTextEdit(readOnly=True)
        self.log.setMaximumBlockCount(2000)

        buttons = QHBoxLayout()
        for w in (self.start_button, self.pause_button, self.stop_button):
            buttons.addWidget(w)
        buttons.addWidget(self.progress, 1)
        layout = QVBoxLayout()
        layout.addLayout(buttons)
        layout.addWidget(self.state_label)
        layout.addWidget(self.plot, 3)
        layout.addWidget(self.log, 1)
        central = QWidget()
        central.setLayout(layout)
        self.setCentralWidget(central)
        self.resize(900, 640)

        self.start_button.clicked.connect(self._on_start_clicked)
        self.pause_button.clicked.connect(self._on_pause_clicked)
        self.stop_button.clicked.connect(self.runner.stop)
        QShortcut(QKeySequence("Ctrl+R"), self, self._on_start_clicked)
        QShortcut(QKeySequence("Ctrl+P"), self, self._on_pause_clicked)
        QShortcut(QKeySequence("Ctrl+."), self, self.runner.stop)
        self.redraw_timer = QTimer(self, interval=100, timeout=self._redraw)
        self.redraw_timer.start()
        self._on_runner_state_changed("idle")

    def _on_start_clicked(self) -> None:
        if not self.runner.active:
            self.steps.clear()
            self.rewards.clear()
            self._dirty = True
            self.runner.start(
                self.config, os.path.join(self.run_dir, f"run-{os.getpid()}-{id(self)}")
            )

    def _on_pause_clicked(self) -> None:
        if self.runner.state == PAUSED:
            self.runner.resume()
        else:
            self.runner.pause()

    def _on_runner_state_changed(self, state: str) -> None:
        active = state in (STARTING, RUNNING, PAUSED, STOPPING)
        self.start_button.setEnabled(not active)
        self.pause_button.setEnabled(state in (RUNNING, PAUSED))
        self.pause_button.setText("Resume" if state == PAUSED else "Pause")
        self.stop_button.setEnabled(state in (STARTING, RUNNING, PAUSED))
        self.statusBar().showMessage(f"State: {state}")

    def _on_runner_event_received(self, event) -> None:
        kind = event.type
        if kind == "run_started":
            self.progress.setRange(0, event.total_steps)
            self.progress.setValue(event.start_step)
            self._append(f"Training {event.model} on {event.device}.")
        elif kind == "step":
            self.steps.append(event.step)
            self.rewards.append(event.metrics.get("reward") or 0.0)
            self.progress.setValue(event.step)
            self._dirty = True
        elif kind == "eval":
            self.state_label.setText(
                f"Held-out accuracy at step {event.step}: {event.accuracy:.0%} "
                f"(answers in the right format: {event.format_rate:.0%})"
            )
        elif kind == "log":
            self._append(f"{event.level}: {event.message}")
        elif kind == "run_finished":
            self._append(f"Run {event.status}: {event.message}")

    def _append(self, text: str) -> None:
        self.log.appendPlainText(text)

    def _redraw(self) -> None:
        if self._dirty:
            self.curve.setData(self.steps, self.rewards)
            self._dirty = False

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self.runner.active:
            self.runner.stop()
            self.runner.wait()
        event.accept()


def run_app(demo: bool = True) -> int:
    from grpo_desktop.engine.demo import demo_config

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("GRPO Desktop")
    window = MainWindow(demo_config())
    window.show()
    window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    return app.exec()
