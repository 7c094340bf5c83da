"""Continue training on the real engine and a tiny local model: train a few steps, stop, lose the
newest checkpoint and the end of the log (as a crash would), reopen the session in a new window
and press Continue: the steps after the checkpoint are redone, the run goes on to the end, and
the history — in the window and in events.jsonl — holds each step once."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.runs.checkpoint import list_checkpoints
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.run.worker import FINISHED, STOPPED

TOTAL = 6


def tiny(model_dir: str):
    return demo_config().replace(
        model={"name_or_path": model_dir},
        data={"arithmetic_difficulty": 1, "eval_size": 0},
        algorithm={
            "prompts_per_step": 2,
            "num_generations": 2,
            "max_completion_length": 8,
            "lr_scheduler": "linear",
        },
        run={"max_steps": TOTAL, "eval_every": 0, "checkpoint_every": 2, "keep_checkpoints": 3},
    )


@pytest.fixture
def make_window(show_window, tmp_path):
    def make(config) -> MainWindow:
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        return show_window(MainWindow(config, settings=settings, probe_device=False))

    return make


def _crash_after_the_last_checkpoint(run_dir: str) -> tuple[int, int]:
    """Make the run look killed: drop its run_finished line and its newest checkpoint.
    Returns (last logged step, step of the checkpoint left)."""
    events = os.path.join(run_dir, "events.jsonl")
    with open(events) as fh:
        lines = [line for line in fh if '"type": "run_finished"' not in line]
    with open(events, "w") as fh:
        fh.writelines(lines)
    saved = list_checkpoints(run_dir)
    shutil.rmtree(saved[-1][1])
    last = max(json.loads(line)["step"] for line in lines if '"type": "step"' in line)
    return last, saved[-2][0]


@pytest.mark.timeout(300)
def test_continue_training_after_reopening(qtbot, make_window, tmp_path, tiny_model_dir):
    w = make_window(tiny(tiny_model_dir))
    w.controls.start_action.trigger()
    # Stopped by the engine after step 3, as Stop does between steps: pressing Stop once the
    # window has seen step 3 raced the tiny model, which could finish all 6 steps first.
    w.model.runner.stop_after(3)
    qtbot.waitUntil(lambda: w.model.state == STOPPED, timeout=120_000)
    assert w.controls.start_action.text() == "Continue"  # right away, in the same window
    path = str(tmp_path / "resumable.grpo")
    assert w.session.save_as(path)
    w.close()
    last, kept = _crash_after_the_last_checkpoint(os.path.join(path, "run"))
    assert 2 <= kept < last < TOTAL

    again = make_window(demo_config())
    assert again.session.open_session(path)
    assert again.model.history.num_steps == last  # plots reopen as they were, no retraining
    assert again.model.run_state().status == "interrupted"
    assert again.controls.start_action.text() == "Continue"
    banner = again.resume_banner
    assert not banner.isHidden()
    assert (
        f"checkpoint at step {kept}" in banner.text.text() and "interrupted" in banner.text.text()
    )
    new_steps = []
    again.model.step_finished.connect(new_steps.append)
    banner.continue_button.click()
    qtbot.waitUntil(lambda: again.model.state == FINISHED, timeout=120_000)

    assert new_steps == list(range(kept + 1, TOTAL + 1))  # steps after the checkpoint, redone
    history = again.model.history
    assert list(history.steps) == list(range(1, TOTAL + 1))  # each step once
    lr = history.metric("learning_rate")
    assert np.all(np.diff(lr) < 0)  # the linear schedule carried on, it did not restart
    with open(again.model.doc.events_path) as fh:
        logged = [json.loads(line) for line in fh]
    assert [e["step"] for e in logged if e["type"] == "step"] == list(range(1, TOTAL + 1))
    assert [e["start_step"] for e in logged if e["type"] == "run_started"] == [0, kept]
    assert again.resume_banner.isHidden() and again.controls.start_action.text() == "Start"
