"""Issue 27 §3: the settings docks fit their width. At a laptop's 1366 × 768 and a maximised
1920 × 1080 window no settings tab has a horizontal scroll bar (the Hyperparameters preset row
and the Dataset source box used to widen them), with the advanced settings shown too, and the
batch line wraps instead of being cut."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication, QScrollArea

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.main_window import MainWindow

SETTINGS = ("model", "dataset", "reward", "hyper", "estimate")


@pytest.fixture
def window(show_window, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    return show_window(MainWindow(demo_config(), settings=settings, probe_device=False))


def _settle() -> None:
    for _ in range(5):
        QApplication.processEvents()


def _overflowing(w: MainWindow) -> list[str]:
    """The settings tabs whose scroll areas (the dock's, and any inside it) scroll sideways."""
    wide = []
    for name in SETTINGS:
        dock = w.docks[name]
        dock.show()
        dock.raise_()
        _settle()
        areas = [dock.widget(), *dock.widget().findChildren(QScrollArea)]
        for area in areas:
            bar = area.horizontalScrollBar()
            if area.isVisible() and (bar.isVisible() or bar.maximum() > 0):
                wide.append(f"{name}: {bar.maximum()} px too wide")
    return wide


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_no_settings_tab_scrolls_sideways(window, size):
    window.resize(*size)
    _settle()
    assert _overflowing(window) == []
    window.hyper_panel.set_advanced_visible(True)
    assert _overflowing(window) == []


def test_other_data_sources_fit_too(window):
    window.resize(1366, 768)
    for source in ("file", "hub", "task"):
        window.model.set_value("data", "source", source)
        assert _overflowing(window) == [], source


def test_the_batch_line_wraps_inside_the_panel(window):
    window.resize(1366, 768)
    window.docks["hyper"].raise_()
    window.model.set_value("algorithm", "max_completion_length", 123456)
    _settle()
    label = window.hyper_panel.batch_label
    assert "123,456 tokens" in label.text() or "123456 tokens" in label.text()
    assert label.wordWrap()
    viewport = window.docks["hyper"].widget().viewport()
    assert label.geometry().right() < viewport.width()
