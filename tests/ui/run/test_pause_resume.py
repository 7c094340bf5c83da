"""Pause and Resume as the user sees them (issue 27 §3): once paused, the toolbar button reads
Resume with the play icon and the status bar says Paused (nowhere "Training"); after Resume the
button is Pause with the pause icon again and the status bar says Training.

A fake train function (tests/support/fakes.py) run by the window's real worker."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QStyle, QToolBar

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.main_window import MainWindow
from tests.support.fakes import make_fake_train


@pytest.fixture
def window(show_window, tmp_path):
    cfg = demo_config().replace(
        run={"max_steps": 40}, algorithm={"prompts_per_step": 2, "num_generations": 4}
    )
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    return show_window(
        MainWindow(cfg, make_fake_train(delay=0.1), settings=settings, probe_device=False)
    )


def same_icon(icon, pixmap: QStyle.StandardPixmap, style) -> bool:
    want = style.standardIcon(pixmap).pixmap(16, 16).toImage()
    return icon.pixmap(16, 16).toImage() == want


def pause_button(w):
    for bar in w.findChildren(QToolBar):
        button = bar.widgetForAction(w.controls.pause_action)
        if button is not None:
            return button
    raise AssertionError("no Pause button in the toolbar")


def status_texts(w) -> str:
    return " | ".join((w.state_label.text(), w.device_label.text(), w.statusBar().currentMessage()))


def test_pause_shows_resume_and_paused_then_resume_shows_pause_and_training(qtbot, window):
    w = window
    style = w.style()
    play, pause = QStyle.StandardPixmap.SP_MediaPlay, QStyle.StandardPixmap.SP_MediaPause
    assert not same_icon(w.controls.pause_action.icon(), play, style)  # the two icons differ
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.history.last_step >= 1, timeout=10_000)
    button = pause_button(w)
    assert button.text() == "Pause" and same_icon(button.icon(), pause, style)
    assert w.state_label.text() == "Training"
    assert w.device_label.text() == "Training on cpu (fake)"

    button.click()
    qtbot.waitUntil(lambda: w.controls.paused_at is not None, timeout=10_000)
    assert button.text() == "Resume" and same_icon(button.icon(), play, style)
    assert "Resume" in button.toolTip()
    paused = w.controls.paused_at
    assert w.state_label.text() == f"Paused after step {paused}"
    assert w.device_label.text() == "Paused on cpu (fake)"
    assert "Training" not in status_texts(w)
    qtbot.wait(2100)  # the memory timer refreshes the status bar every 2 s: still paused
    assert w.state_label.text().startswith("Paused") and "Training" not in status_texts(w)

    button.click()
    qtbot.waitUntil(lambda: w.model.history.last_step > paused, timeout=5000)
    assert button.text() == "Pause" and same_icon(button.icon(), pause, style)
    assert w.state_label.text() == "Training"
    assert w.device_label.text() == "Training on cpu (fake)"
    assert "Paused" not in status_texts(w)

    w.controls.stop_action.trigger()
    qtbot.waitUntil(lambda: not w.model.runner.active, timeout=10_000)
    assert "Training" not in w.device_label.text()  # ended: "Last run on cpu (fake)"
