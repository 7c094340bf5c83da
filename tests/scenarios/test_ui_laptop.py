"""The window on a laptop screen: it fits the screen's available area at first launch,
the plots keep a readable height and scroll, the settings column scrolls; a real window on a
1366×768 and a 1280×720 offscreen screen (Qt's offscreen platform reads the screen size from a
config file), in a subprocess so the test session's own screen stays as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PySide6.QtCore import QRect

from grpo_desktop.ui.window_fit import contained, dock_width_for, fit_rect

PROBE = r"""
import json, sys
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv)
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.main_window import MainWindow
settings = QSettings(sys.argv[1], QSettings.Format.IniFormat)
w = MainWindow(demo_config(), settings=settings, probe_device=False)
w.ask_stop_on_close = lambda: True
w.session.ask_save_changes = lambda _name: "discard"
w.show()
for _ in range(5):
    app.processEvents()
screen = app.primaryScreen().availableGeometry()
g = w.frameGeometry()
dock = w.docks["model"].widget()
reward_dock = w.docks["reward"].widget()
print(json.dumps({
    "screen": [screen.x(), screen.y(), screen.width(), screen.height()],
    "window": [g.x(), g.y(), g.width(), g.height()],
    "plot_viewport_h": w.plots.scroll.viewport().height(),
    "canvas_h": w.plots.canvas.height(),
    "row_h": w.plots.plots["reward"].plot.height(),
    "dock_scrolls": type(dock).__name__,
    "reward_scroll_max": reward_dock.verticalScrollBar().maximum(),
}))
w.save_layout()
w.close()
"""


def _screen_config(tmp_path, w: int, h: int) -> str:
    path = tmp_path / f"screen-{w}x{h}.json"
    screen = {"name": "laptop", "x": 0, "y": 0, "width": w, "height": h}
    path.write_text(json.dumps({"screens": [{**screen, "logicalDpi": 96, "dpr": 1}]}))
    return str(path)


def _probe(tmp_path, w: int, h: int, settings: str) -> dict:
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={_screen_config(tmp_path, w, h)}")
    out = subprocess.run(
        [sys.executable, "-c", PROBE, settings],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fit_rect_keeps_the_preferred_size_where_it_fits_and_clamps_it_where_not():
    big = QRect(0, 0, 1920, 1080)
    assert fit_rect((1400, 900), big) == QRect(260, 90, 1400, 900)
    laptop = QRect(0, 0, 1366, 738)  # 1366×768 less a 30 px panel
    assert fit_rect((1400, 900), laptop) == QRect(0, 0, 1366, 738)
    offset = QRect(1920, 30, 1280, 690)  # a second screen to the right, panel on top
    assert fit_rect((1400, 900), offset) == QRect(1920, 30, 1280, 690)
    assert fit_rect((1400, 900), offset, margin=10) == QRect(1930, 40, 1260, 670)


def test_a_window_saved_on_a_big_screen_is_pulled_inside_a_small_one():
    assert contained(QRect(500, 300, 1400, 900), QRect(0, 0, 1366, 768)) == QRect(0, 0, 1366, 768)
    assert contained(QRect(900, 500, 800, 600), QRect(0, 0, 1366, 768)) == QRect(566, 168, 800, 600)


def test_the_settings_column_is_narrower_on_a_small_laptop():
    assert dock_width_for(1920) == 430
    assert dock_width_for(1366) == 409
    assert dock_width_for(1280) == 384


@pytest.mark.parametrize("size", [(1366, 768), (1280, 720)])
def test_a_real_window_fits_the_laptop_screen_and_its_plots_stay_readable(tmp_path, size):
    info = _probe(tmp_path, *size, str(tmp_path / "settings.ini"))
    sx, sy, sw, sh = info["screen"]
    x, y, w, h = info["window"]
    assert (sw, sh) == size
    assert sx <= x and sy <= y and x + w <= sx + sw and y + h <= sy + sh, info
    # Four rows of plots at least 150 px each (the grid scrolls when the window is smaller).
    assert info["canvas_h"] >= 4 * 150 > info["plot_viewport_h"], info
    assert info["row_h"] >= 120, info  # the plot itself, between the spacing
    assert info["dock_scrolls"] == "QScrollArea"
    # Reopened with the layout it saved: still on the screen.
    again = _probe(tmp_path, *size, str(tmp_path / "settings.ini"))
    x, y, w, h = again["window"]
    assert x + w <= sx + sw and y + h <= sy + sh, again


def test_a_layout_saved_on_a_big_screen_reopens_inside_a_laptop_screen(tmp_path):
    settings = str(tmp_path / "settings.ini")
    _probe(tmp_path, 1920, 1080, settings)
    info = _probe(tmp_path, 1280, 720, settings)
    x, y, w, h = info["window"]
    assert x >= 0 and y >= 0 and x + w <= 1280 and y + h <= 720, info


# ---------------------------------------------------------------- the wheel over number fields


def _wheel(widget, dy: int = -120) -> None:
    """A real wheel notch over the middle of `widget` (negative: towards the user)."""
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    local = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(
        local,
        QPointF(widget.mapToGlobal(local.toPoint())),
        QPoint(0, 0),
        QPoint(0, dy),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def test_the_wheel_scrolls_the_panel_over_an_unfocused_weight_and_edits_a_focused_one(
    qtbot, tmp_path, show_window
):
    from PySide6.QtCore import QSettings

    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.ui.main_window import MainWindow

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(demo_config(), settings=settings, probe_device=False))
    w.resize(1280, 600)
    w.docks["reward"].raise_()
    qtbot.waitExposed(w)
    spin = w.reward_panel.accuracy.spin
    area = w.docks["reward"].widget()
    bar = area.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    before, weight, config = bar.value(), spin.value(), w.model.config
    w.model_panel.setFocus()
    _wheel(spin)
    assert spin.value() == weight and w.model.config == config
    assert bar.value() > before  # the panel scrolled instead
    _wheel(w.reward_panel.accuracy.slider)
    assert spin.value() == weight
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    _wheel(spin)  # focused: the wheel steps it down by one step (0.05)
    assert spin.value() == pytest.approx(weight - 0.05)


def test_every_number_and_choice_field_of_the_settings_panels_waits_for_focus(
    tmp_path, show_window
):
    from PySide6.QtCore import QSettings, Qt

    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.ui.common.wheel_guard import GUARDED
    from grpo_desktop.ui.main_window import MainWindow

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(demo_config(), settings=settings, probe_device=False))
    fields = [x for d in w.docks.values() for x in d.findChildren(GUARDED[0])]
    fields += [x for d in w.docks.values() for x in d.findChildren(GUARDED[1])]
    assert len(fields) > 15
    assert all(x.focusPolicy() == Qt.FocusPolicy.StrongFocus for x in fields)
    combo = w.model_panel.quant_combo
    index = combo.currentIndex()
    w.model_panel.setFocus()
    _wheel(combo, dy=-120)
    assert combo.currentIndex() == index


CHECKER_PROBE = r"""
import json, sys
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv)
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.common.tasks import wait_for_all
w = MainWindow(demo_config(), settings=QSettings(sys.argv[1], QSettings.Format.IniFormat),
               probe_device=False)
w.session.ask_save_changes = lambda _name: "discard"
w.show()
w.docks["reward"].raise_()
panel = w.reward_panel
panel.editor.setPlainText(
    "def check(completion, answer, prompt):\n"
    "    raise ValueError('this checker fails on every sample with a long, long message')\n"
)
panel.test_checker()
while not panel.test_button.isEnabled():
    app.processEvents()
for _ in range(5):
    app.processEvents()
area = w.docks["reward"].widget()
button = panel.test_button
right = button.mapTo(area.viewport(), button.rect().topRight()).x()
print(json.dumps({
    "status": panel.test_status.text(),
    "h_scroll_max": area.horizontalScrollBar().maximum(),
    "button_right": right,
    "viewport_w": area.viewport().width(),
}))
wait_for_all()
w.close()
"""


def test_after_a_checker_test_the_reward_panel_keeps_test_checker_in_view(tmp_path):
    screen = _screen_config(tmp_path, 1280, 720)
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={screen}")
    out = subprocess.run(
        [sys.executable, "-c", CHECKER_PROBE, str(tmp_path / "s.ini")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert "failed" in info["status"], info
    assert info["h_scroll_max"] == 0, info  # nothing wider than the panel
    assert 0 < info["button_right"] <= info["viewport_w"], info
