"""File ▸ Open Run Folder… on a TRL output_dir: the real window shows it read-only and follows it.

On tests/fixtures/trl_run (a real 3-step TRL 1.16 run, see its README): the plots' curves hold
its steps and TRL's values, the Rollouts tab its rows, the health alarm computed on it shows as
a banner, Start and the settings are off, and a banner says what is open. A folder TRL is still
writing (the fixture copied into it file by file, in TRL's order) shows up live through the
follower's QTimer; a parquet file cut short is skipped without a crash and read once whole. The
CLI opens it in a subprocess (`grpo-desktop --screenshot FILE open DIR`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFileDialog

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import RunStarted
from grpo_desktop.session.trl_state import read_state, step_metrics
from grpo_desktop.ui.main_window import MainWindow
from tests.support.dialogs import when_modal
from tests.support.fakes import event_log, fake_events, make_fake_train
from tests.support.paths import FIXTURES, SUPPORT

FIXTURE = os.path.join(FIXTURES, "trl_run")
STEPS, ROWS = 3, 6


@pytest.fixture
def window(show_window, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(demo_config(), make_fake_train(), settings=settings, probe_device=False)
    return show_window(w)


def read_in(qtbot, w: MainWindow) -> None:
    """Wait for the follower's background poll and the events it read to be added."""
    qtbot.waitUntil(lambda: not w.run_folder.loading, timeout=10_000)


def plotted(w: MainWindow, plot: str = "reward") -> tuple[list, list]:
    w.plots.redraw()
    x, y = w.plots.plots[plot].series[0].item.getOriginalDataset()
    return ([], []) if x is None else (list(x), list(y))


def _copy(name: str, dest: str) -> None:
    target = os.path.join(dest, name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(os.path.join(FIXTURE, name), target)


def test_open_run_folder_shows_the_trl_run_read_only(qtbot, window):
    w = window
    when_modal(QFileDialog, lambda d: (d.selectFile(FIXTURE), d.accept()))
    w.session.open_run_action.trigger()  # File ▸ Open Run Folder…, answered like a user
    read_in(qtbot, w)
    assert w.run_folder.folder == FIXTURE
    # The plots: every step, with the values TRL logged.
    logged = step_metrics(read_state(os.path.join(FIXTURE, "trainer_state.json")))
    x, y = plotted(w)
    assert x == [1.0, 2.0, 3.0] and y == [logged[s]["reward"] for s in (1, 2, 3)]
    assert plotted(w, "loss")[1] == [logged[s]["loss"] for s in (1, 2, 3)]
    # The Rollouts tab: the latest step's rows, every step's when asked.
    qtbot.waitUntil(lambda: w.inspector.table.model().rowCount() == ROWS, timeout=5000)
    w.inspector.mode_box.setCurrentIndex(w.inspector.mode_box.findData("all"))
    qtbot.waitUntil(lambda: w.inspector.table.model().rowCount() == STEPS * ROWS, timeout=5000)
    # The health alarm computed on it (every answer cut off, 3 steps running).
    assert w.alarms.kinds() == ["truncation"]
    # Read-only: the banner, Start off (and refused), the settings hidden, the title.
    assert w.run_folder.banner in w.messages.messages()  # one of the messages, after the alarm
    text = w.run_folder.banner.text.text()
    assert "Read-only:" in text and f"a TRL run in {FIXTURE}" in text and "every 5 s" in text
    assert not w.controls.start_action.isEnabled()
    assert not w.controls.start_over_action.isEnabled()
    assert not w.start_run() and not w.model.runner.active
    assert (
        w.message_bar.kind == "error" and "read-only, so it cannot train" in w.message_bar.message()
    )
    assert w.docks["model"].isHidden() and w.docks["hyper"].isHidden()
    assert "trl_run (read-only)" in w.windowTitle()
    assert not w.welcome.isVisible()  # its "press Start" would not apply
    log = w.log_view.toPlainText()
    assert f"Reading a TRL run in {FIXTURE} (read-only): trl_run, 3 of 3 steps" in log
    assert "Step 3: 100% of the answers at step 3 hit the length limit" in log
    assert w.controls.progress_label.text() == "step 3 / 3 · finished"
    # Close: back to an ordinary session that can train.
    w.run_folder.banner.close_button.click()
    assert not w.model.read_only and not w.run_folder.banner.isVisible()
    assert not w.run_folder.timer.isActive()
    assert w.controls.start_action.isEnabled() and not w.docks["model"].isHidden()
    assert plotted(w) == ([], [])


def test_a_run_being_written_shows_up_live(qtbot, window, tmp_path):
    w = window
    run = str(tmp_path / "trl-out")
    # TRL has logged steps 1-2 and saved checkpoint-2; step 3's parquet is being written.
    for name in (
        "completions/completions_00001.parquet",
        "completions/completions_00002.parquet",
        "checkpoint-2/trainer_state.json",
    ):
        _copy(name, run)
    whole = Path(FIXTURE, "completions", "completions_00003.parquet").read_bytes()
    third = os.path.join(run, "completions", "completions_00003.parquet")
    with open(third, "wb") as fh:
        fh.write(whole[:1000])
    assert w.session.open_session(run)  # what `grpo-desktop open DIR` calls
    read_in(qtbot, w)
    assert plotted(w)[0] == [1.0, 2.0]
    assert "following it live" in w.run_folder.banner.text.text()
    assert w.message_bar.kind == ""  # a file being written is no error
    w.run_folder.timer.setInterval(50)  # the real timer, polling faster than 5 s
    with open(third, "wb") as fh:
        fh.write(whole)
    _copy("checkpoint-3/trainer_state.json", run)
    qtbot.waitUntil(lambda: plotted(w)[0] == [1.0, 2.0, 3.0], timeout=5000)
    w.inspector.mode_box.setCurrentIndex(w.inspector.mode_box.findData("all"))
    qtbot.waitUntil(lambda: w.inspector.table.model().rowCount() == STEPS * ROWS, timeout=5000)
    _copy("trainer_state.json", run)
    qtbot.waitUntil(
        lambda: "finished after step 3" in w.run_folder.banner.text.text(), timeout=5000
    )
    # Nothing was written into the folder.
    assert sorted(os.listdir(run)) == [
        "checkpoint-2",
        "checkpoint-3",
        "completions",
        "trainer_state.json",
    ]


def test_an_app_run_folder_opens_read_only_with_its_settings(qtbot, window, tmp_path):
    w = window
    run = str(tmp_path / "runs" / "mine")  # as `grpo-desktop train --out runs/mine` writes it
    config = demo_config().replace(run={"max_steps": 3}, algorithm={"learning_rate": 3e-4})
    os.makedirs(run)
    Path(run, "config.json").write_text(config.to_json())
    with event_log(run) as emit:
        emit(RunStarted("r", config.to_dict(), 0, 3, "cpu", "demo-model", 10, 1))
        for event in fake_events(1, 3) + fake_events(2, 3):
            emit(event)
    assert w.session.open_session(run)
    read_in(qtbot, w)
    assert plotted(w)[0] == [1.0, 2.0]
    assert f"a GRPO Desktop run in {run}" in w.run_folder.banner.text.text()
    # Its own settings, shown but not editable.
    assert w.model.config.algorithm.learning_rate == 3e-4
    assert not w.docks["hyper"].isHidden() and not w.hyper_panel.isEnabled()
    with event_log(run) as emit:
        for event in fake_events(3, 3):
            emit(event)
    w.run_folder.poll()  # what the timer does every 5 s
    read_in(qtbot, w)
    assert plotted(w)[0] == [1.0, 2.0, 3.0]


def test_a_folder_that_is_no_run_says_what_to_choose(window, tmp_path):
    w = window
    empty = tmp_path / "nothing"
    empty.mkdir()
    assert not w.run_folder.open(str(empty))
    assert w.message_bar.kind == "error"
    assert "is not a run folder" in w.message_bar.message()
    assert not w.model.read_only


def test_the_cli_opens_a_trl_run(tmp_path):
    # One launch: `open DIR` shows the run, --autostart is refused (exit 2, the reason on
    # stderr) and --screenshot still saves the window.
    shot = tmp_path / "trl.png"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "--autostart", "--screenshot", str(shot)]
        + ["open", FIXTURE],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert proc.returncode == 2, proc.stderr
    assert f"a TRL run in {FIXTURE} read-only, so it cannot train" in proc.stderr
    assert shot.stat().st_size > 10_000


@pytest.mark.slow
def test_a_real_trl_run_opens_in_the_window(qtbot, window, tmp_path):
    """TRL itself (tests/support/trl_tiny_run.py: GRPOTrainer on the tiny local model, completion logging
    on), then its output_dir opened: N steps in the plots, N × 6 rows in the Rollouts tab."""
    out = str(tmp_path / "trl-out")
    steps = 2
    subprocess.run(
        [sys.executable, os.path.join(SUPPORT, "trl_tiny_run.py"), out, "--steps", str(steps)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    w = window
    assert w.session.open_session(out)
    read_in(qtbot, w)
    logged = step_metrics(read_state(os.path.join(out, "trainer_state.json")))
    assert plotted(w) == ([1.0, 2.0], [logged[s]["reward"] for s in (1, 2)])
    w.inspector.mode_box.setCurrentIndex(w.inspector.mode_box.findData("all"))
    qtbot.waitUntil(lambda: w.inspector.table.model().rowCount() == steps * ROWS, timeout=5000)
    assert "finished after step 2" in w.run_folder.banner.text.text()
