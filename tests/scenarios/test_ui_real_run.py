"""The real window on the real engine and a tiny local model: set the model and the dataset in the
panels, press Start, watch N steps arrive in the plots and the inspector, pause, resume, stop;
a bad model path fails with a readable message and leaves the app usable; the scripted
command-line mode runs, screenshots and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QToolButton

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.run.worker import FAILED, PAUSED, RUNNING, STOPPED

B, G, N = 2, 2, 3


def small(cfg):
    """Settings that keep a CPU step well under a second with the tiny model."""
    return cfg.replace(
        algorithm={"prompts_per_step": B, "num_generations": G, "max_completion_length": 8},
        run={
            "max_steps": 200,
            "eval_every": 0,
            "checkpoint_every": 1000,
            "checkpoint_minutes": 0.0,
        },
    )


@pytest.fixture
def window(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(small(demo_config()), settings=settings, probe_device=False)
    w.ask_stop_on_close = lambda: True
    w.session.ask_save_changes = lambda _name: "discard"
    qtbot.addWidget(w)
    w.show()
    yield w
    if w.model.runner.active:
        w.model.stop()
        qtbot.waitUntil(lambda: not w.model.runner.active, timeout=60_000)


def toolbar_button(w: MainWindow, action) -> QToolButton:
    return next(b for b in w.findChildren(QToolButton) if b.defaultAction() is action)


def set_model_and_dataset(w: MainWindow, model_dir: str) -> None:
    w.model_panel.model_box.setEditText(model_dir)
    w.model_panel.model_box.lineEdit().editingFinished.emit()
    ds = w.dataset_panel
    ds.source_box.setCurrentIndex(ds.source_box.findData("arithmetic"))
    ds.source_box.activated.emit(ds.source_box.currentIndex())
    ds.arith_form.editors[("data", "arithmetic_difficulty")].widget.setValue(1)
    ds.prompt_form.editors[("data", "eval_size")].widget.setValue(4)
    assert w.model.config.model.name_or_path == model_dir
    assert w.model.config.data.arithmetic_difficulty == 1 and w.model.config.data.eval_size == 4


def test_real_training_in_the_window(qtbot, window, tiny_model_dir):
    w = window
    set_model_and_dataset(w, tiny_model_dir)
    steps = []
    w.model.step_finished.connect(steps.append)
    qtbot.mouseClick(toolbar_button(w, w.controls.start_action), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(steps) >= N, timeout=120_000)

    with qtbot.waitSignal(w.model.pause_reached, timeout=60_000):
        qtbot.mouseClick(toolbar_button(w, w.controls.pause_action), Qt.MouseButton.LeftButton)
    assert w.model.state == PAUSED
    held = len(steps)
    w.plots.redraw()
    x, _ = w.plots.plots["reward"].series[0].item.getOriginalDataset()
    assert len(x) == held and list(x) == list(range(1, held + 1))
    assert w.inspector.table_model.rowCount() == B * G * held
    assert w.model.history.evals and w.model.history.evals[0]["step"] == 0  # held-out at start
    qtbot.wait(1000)
    assert len(steps) == held  # paused: no step in a second

    qtbot.keyClick(w, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier)  # Ctrl+P resumes
    assert w.model.state == RUNNING
    qtbot.waitUntil(lambda: len(steps) > held, timeout=60_000)
    qtbot.mouseClick(toolbar_button(w, w.controls.stop_action), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.model.state == STOPPED, timeout=60_000)
    assert w.model.history.finished["status"] == "stopped"
    n = w.model.history.num_steps
    assert n == len(steps) and w.inspector.table_model.rowCount() == B * G * n
    assert w.model.history.checkpoints, "a stop saves a checkpoint"
    assert os.path.isfile(os.path.join(w.model.run_dir, "events.jsonl"))


def test_a_bad_model_path_fails_readably_and_the_app_stays_usable(
    qtbot, window, tmp_path, tiny_model_dir
):
    w = window
    set_model_and_dataset(w, str(tmp_path / "no-such-model"))
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == FAILED, timeout=60_000)
    assert w.message_bar.kind == "error"
    assert "Model folder not found" in w.message_bar.message()
    assert "Traceback" not in w.message_bar.message()
    assert w.controls.start_action.isEnabled()
    # Still usable: fix the path and train.
    set_model_and_dataset(w, tiny_model_dir)
    w.model.set_value("run", "max_steps", 1)
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == "finished", timeout=120_000)
    assert w.model.history.num_steps == 1


def test_scripted_mode_runs_screenshots_and_exits_zero(tmp_path, tiny_model_dir):
    cfg = small(demo_config()).replace(
        model={"name_or_path": tiny_model_dir}, data={"arithmetic_difficulty": 1, "eval_size": 4}
    )
    config = tmp_path / "tiny.json"
    config.write_text(cfg.to_json())
    shot = tmp_path / "shot.png"
    env = dict(
        os.environ,
        GRPO_DESKTOP_CONFIG_DIR=str(tmp_path / "config"),
        GRPO_DESKTOP_DATA_DIR=str(tmp_path / "data"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo_desktop",
            "--config",
            str(config),
            "--autostart",
            "--quit-after-steps",
            "2",
            "--screenshot",
            str(shot),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert shot.stat().st_size > 20_000
    runs = list((tmp_path / "data").rglob("events.jsonl"))
    assert len(runs) == 1 and '"status": "stopped"' in runs[0].read_text()
