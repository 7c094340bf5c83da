"""The GRPO Lab window as a user meets it: Learn ▸ GRPO Lab (Ctrl+L, and the
toolbar button) opens one Lab window; "Use the lesson's group" then Step shows the lesson's worked
numbers in the tables; Play steps on a timer until Pause; a group with no signal says so; the
signal chart follows its G and p controls; other labs join with add_tab / show_tab."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QLabel, QToolBar

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.lab.answers import HEDGE, RIGHT
from grpo_desktop.ui.lab import LabWindow
from grpo_desktop.ui.main_window import MainWindow
from tests.support.fakes import make_fake_train


@pytest.fixture
def lab(qtbot):
    w = LabWindow()
    qtbot.addWidget(w)
    w.show_tab()
    return w


def texts(table, column: int) -> list[str]:
    return [
        table.item(r, column).text() if table.item(r, column) else ""
        for r in range(table.rowCount())
    ]


def test_the_learn_menu_opens_one_lab_window(qtbot, show_window, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(
        MainWindow(demo_config(), make_fake_train(), settings=settings, probe_device=False)
    )
    learn = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Learn")
    action = next(a for a in learn.actions() if a.text() == "GRPO Lab")
    assert action.shortcut() == QKeySequence("Ctrl+L")
    toolbar = w.findChild(QToolBar, "toolbar.learn")
    assert action in toolbar.actions()
    assert w._lab is None  # made on first use only
    action.trigger()
    lab = w.lab_window()
    assert lab.isVisible() and lab.isWindow() and not lab.isModal()
    assert lab.tab_titles()[:2] == ["One step by hand (17 × 24)", "Which groups teach"]
    lab.close()  # closing hides it; the same window (and its state) comes back
    assert not lab.isVisible()
    action.trigger()
    assert w.lab_window() is lab and lab.isVisible()
    assert w.open_lab("Which groups teach") is lab.signal_chart


def test_the_lessons_group_then_step_shows_the_lessons_numbers(qtbot, lab):
    view = lab.answer_lab
    view.checker_box.setCurrentIndex(1)  # settings the button must put back to the lesson's
    view.g_spin.setValue(8)
    view.beta_spin.setValue(0.2)
    view.step()
    qtbot.mouseClick(view.lesson_button, Qt.MouseButton.LeftButton)
    assert (view.checker, view.g_spin.value(), view.lr_spin.value(), view.beta_spin.value()) == (
        "strict",
        4,
        0.5,
        0.0,
    )
    # before Step: the group's scores and advantages are shown, the update is a preview
    assert "press Step" in view.group_title.text()
    assert texts(view.group_table, 0) == ["408 (right)", "398", "418"]
    assert texts(view.group_table, 1) == ["× 1", "× 2", "× 1"]
    assert texts(view.group_table, 3) == ["+1.732", "−0.577", "−0.577"]
    assert (
        view.stats_line.text() == "mean = (1 + 0 + 0 + 0) ÷ 4 = 0.25     std = √(0.75 ÷ 4) = 0.433"
    )
    assert view.lab.steps == 0
    qtbot.mouseClick(view.step_button, Qt.MouseButton.LeftButton)
    assert view.lab.steps == 1
    assert "step 1: the lesson's group" in view.group_title.text()
    assert texts(view.group_table, 3) == ["+1.732", "−0.577", "−0.577"]
    assert texts(view.group_table, 4)[0] == "pushed up: made more likely"
    table = view.update_table
    assert texts(table, 1)[:3] == [
        "0.5 × +1.732 ÷ 4 = +0.217",
        "0.5 × (−1.155) ÷ 4 = −0.144",
        "0.5 × (−0.577) ÷ 4 = −0.072",
    ]
    assert texts(table, 4) == ["25.0 %", "45.0 %", "25.0 %", "5.0 %"]
    assert texts(table, 5) == ["31.6 % ▲", "39.6 % ▼", "23.7 % ▼", "5.1 % ▲"]
    assert table.isColumnHidden(table.BETA_COLUMN)  # β = 0: no pull to show
    assert "408 31.6 %" in view.status.text()
    # the plot has the start and this step for each answer
    xs, ys = view.plots.curves[RIGHT].getData()
    assert list(xs) == [0, 1] and ys[1] == pytest.approx(31.6, abs=0.05)


def test_play_runs_its_timer_and_pause_stops_it(qtbot, lab):
    view = lab.answer_lab
    view.checker_box.setCurrentIndex(1)  # sloppy
    qtbot.mouseClick(view.play_button, Qt.MouseButton.LeftButton)
    assert view.timer.isActive() and view.play_button.text() == "Pause"
    qtbot.waitUntil(lambda: view.lab.steps >= 3, timeout=5000)
    qtbot.mouseClick(view.play_button, Qt.MouseButton.LeftButton)
    assert not view.timer.isActive() and view.play_button.text() == "Play"
    steps = view.lab.steps
    qtbot.wait(2 * view.timer.interval())
    assert view.lab.steps == steps
    xs, _ys = view.plots.curves[HEDGE].getData()
    assert len(xs) == steps + 1
    # hiding the Lab stops a playing lab
    qtbot.mouseClick(view.play_button, Qt.MouseButton.LeftButton)
    assert view.timer.isActive()
    lab.hide()
    assert not view.timer.isActive() and not view.play_button.isChecked()
    lab.show()
    qtbot.mouseClick(view.reset_button, Qt.MouseButton.LeftButton)
    assert view.lab.steps == 0 and view.group_table.rowCount() == 0
    assert "No group yet" in view.group_line.text()


def test_a_group_without_signal_says_so(qtbot, lab):
    view = lab.answer_lab
    view.g_spin.setValue(2)
    for _ in range(50):  # a group of 2 has no spread 62.5 % of the time at the start
        step = view.step()
        if not step.has_signal:
            break
    assert not step.has_signal
    assert view.no_signal_note.isVisible()
    assert view.no_signal_note.text().startswith("No signal: every answer in this group scored")
    assert set(texts(view.group_table, 4)) == {"no signal: unchanged"}
    assert set(texts(view.update_table, 3)) == {"0"}
    for _ in range(50):
        view.step_button.click()
        if view.last.has_signal:
            break
    assert not view.no_signal_note.isVisible()


def test_beta_shows_its_pull(qtbot, lab):
    view = lab.answer_lab
    view.beta_spin.setValue(0.5)
    view.step()
    assert view.last.kl_grad == pytest.approx((0, 0, 0, 0), abs=1e-12)  # nothing to pull yet
    assert set(texts(view.update_table, view.update_table.BETA_COLUMN)) == {"0"}
    for _ in range(50):  # until a group with signal has moved the model off the start
        if view.lab.kl > 0:
            break
        view.step()
    view.step()
    table = view.update_table
    assert not table.isColumnHidden(table.BETA_COLUMN)
    pulls = [float(t.replace("−", "-")) for t in texts(table, table.BETA_COLUMN)]
    assert any(abs(p) > 1e-4 for p in pulls)
    assert "β pulls every logit back" in view.update_help.text()


def test_the_signal_chart_follows_g_and_p(qtbot, lab):
    chart = lab.show_tab("Which groups teach")
    assert chart is lab.signal_chart and lab.tabs.currentWidget() is chart
    chart.set_p(0.03)
    chart.g_slider.setValue(16)
    assert chart.g_spin.value() == 16
    assert "carries signal 38.6 %" in chart.readout.text()
    row = 16 - 2
    assert [chart.table.item(row, c).text() for c in range(4)] == [
        "16",
        "38.6 %",
        "99.7 %",
        "38.6 %",
    ]
    assert chart.table.item(row, 0).font().bold() and not chart.table.item(0, 0).font().bold()
    chart.p_line.setValue(70.0)  # dragging the line moves p
    assert chart.p_spin.value() == pytest.approx(70.0)
    assert "carries signal 99.7 %" in chart.readout.text()
    xs, ys = chart.curve.getData()
    assert ys[0] == 0.0 and max(ys) == pytest.approx(100.0, abs=0.01)
    chart.table.cellClicked.emit(2, 0)  # a click on the row of G = 4
    assert chart.G == 4


def test_other_labs_join_with_add_tab(qtbot, lab):
    extra = QLabel("another lab")
    index = lab.add_tab(extra, "Reward design")
    assert lab.tabs.widget(index) is extra
    assert lab.show_tab("Reward design") is extra and lab.tabs.currentWidget() is extra
    assert lab.show_tab("no such tab") is extra  # unknown: stays where it is
    assert lab.tab("Reward design") is extra and lab.tab("nope") is None


def test_the_lab_fits_a_small_laptop_screen(qtbot, lab):
    # a 1280×720 screen, less the window frame and a panel: every tab must fit in 1240×660
    hint = lab.minimumSizeHint()
    assert hint.width() <= 1240 and hint.height() <= 660, hint


def test_every_control_has_a_tooltip(qtbot, lab):
    from PySide6.QtWidgets import QAbstractButton, QAbstractSlider, QAbstractSpinBox, QComboBox

    kinds = (QAbstractButton, QAbstractSpinBox, QComboBox, QAbstractSlider)
    for view in (lab.answer_lab, lab.signal_chart):
        found = [w for kind in kinds for w in view.findChildren(kind)]
        controls = [w for w in found if w.isVisibleTo(view)]
        controls = [w for w in controls if not isinstance(w.parent(), QAbstractSpinBox)]
        assert len(controls) >= 3  # the signal chart has G (slider, box) and p
        missing = [w.objectName() or type(w).__name__ for w in controls if not w.toolTip()]
        assert not missing, missing
