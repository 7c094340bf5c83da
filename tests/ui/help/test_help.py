"""The Help window in the app: F1 opens it, the "?" in a plot's title and an alarm banner's "What
does this mean?" open their entries (clicked, as a user does), F1 over a plot or in a banner opens
that one's entry, the search box filters the list, links between entries and to the Lab work.

One window for the module (building it is most of the cost); each test starts from Help hidden."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QMouseEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import Alert
from grpo_desktop.ui.help import topics as T
from grpo_desktop.ui.main_window import MainWindow


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    app = QApplication.instance() or QApplication([])
    settings = QSettings(
        str(tmp_path_factory.mktemp("help") / "settings.ini"), QSettings.Format.IniFormat
    )
    w = MainWindow(demo_config(), settings=settings, probe_device=False)
    w.ask_stop_on_close = lambda: True
    w.session.ask_save_changes = lambda _name: "discard"
    w.show()
    QTest.qWaitForWindowExposed(w)
    yield w
    if w._help is not None:
        w._help.close()
    w.close()
    w.deleteLater()
    app.processEvents()


@pytest.fixture
def w(window, qtbot):
    if window._help is not None:
        window._help.hide()
    window.activateWindow()
    window.setFocus()
    return window


def _title_link_point(view, name: str) -> QPoint:
    """Where the "?" of plot `name`'s title is, in the canvas viewport's pixels."""
    plot = view.plots[name].plot if name in view.plots else view.hist_plot
    item = plot.titleLabel.item
    layout = item.document().documentLayout()
    rect = item.boundingRect()
    for x in range(int(rect.width())):
        p = QPointF(x, rect.height() / 2)
        if layout.anchorAt(p).startswith("help:"):
            return view.canvas.mapFromScene(item.mapToScene(p + QPointF(2, 0)))
    raise AssertionError(f"no help link in the title of {name}")


def test_f1_opens_help_and_the_menu_has_help_and_about(w, qtbot):
    QTest.keyClick(w, Qt.Key.Key_F1)
    help_window = w._help
    assert help_window is not None and help_window.isVisible()
    assert help_window.windowTitle() == "GRPO Desktop Help"
    assert help_window.current == T.HOME  # nothing under the mouse or in focus has its own entry
    menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Help")
    assert [a.text() for a in menu.actions()] == ["GRPO Desktop Help", "About GRPO Desktop"]


def test_every_plot_has_an_entry_and_its_title_link_opens_it(w, qtbot):
    view = w.plots
    names = [*view.plots, "hist"]
    assert {T.plot_anchor(n) for n in names} == {
        t.anchor for t in T.TOPICS.values() if t.section == "Training plots"
    }
    assert set(view.help_links.plots) == {T.plot_anchor(n) for n in names}
    assert view.plots["reward"].plot.titleLabel.text.startswith("Reward")  # the title unchanged
    for name in ("reward", "hist", "grad_norm"):
        QTest.mouseClick(
            view.canvas.viewport(), Qt.MouseButton.LeftButton, pos=_title_link_point(view, name)
        )
        qtbot.waitUntil(lambda: w._help is not None and w._help.isVisible(), timeout=2000)
        assert w._help.current == T.plot_anchor(name)
        assert T.topic(T.plot_anchor(name)).title in w._help.browser.toPlainText()
        assert w.model.history.num_steps == 0  # the click did not also ask for a step
        w._help.hide()


def test_alarm_banner_link_and_f1_in_the_banner_open_the_kind(w, qtbot):
    w.model._on_runner_event_received(
        Alert(4, "no_signal", "warning", "Every group scored the same.", "Use easier problems.")
    )
    banner = w.alarms.banner("no_signal")
    qtbot.waitUntil(banner.isVisible, timeout=2000)
    link = banner.help_link
    assert link.text().endswith("What does this mean?</a>")
    QTest.mouseClick(link, Qt.MouseButton.LeftButton, pos=link.rect().center())
    qtbot.waitUntil(lambda: w._help is not None and w._help.isVisible(), timeout=2000)
    assert w._help.current == "alarm-no_signal"
    assert "No learning signal" in w._help.browser.toPlainText()
    w._help.hide()
    w.activateWindow()
    banner.dismiss_button.setFocus()
    QTest.keyClick(banner.dismiss_button, Qt.Key.Key_F1)
    qtbot.waitUntil(w._help.isVisible, timeout=2000)
    assert w._help.current == "alarm-no_signal"
    w.alarms.dismiss("no_signal")


def test_f1_over_a_plot_opens_that_plot(w, qtbot):
    view = w.plots
    canvas = view.canvas
    centre = canvas.mapFromScene(view.plots["entropy"].plot.sceneBoundingRect().center())
    move = QMouseEvent(
        QEvent.Type.MouseMove,
        QPointF(centre),
        QPointF(canvas.viewport().mapToGlobal(centre)),
        Qt.MouseButton.NoButton,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(canvas.viewport(), move)  # the mouse over the Entropy plot
    qtbot.waitUntil(lambda: view.help_anchor() == "plot-entropy", timeout=2000)
    canvas.setFocus()
    QTest.keyClick(canvas.viewport(), Qt.Key.Key_F1)
    qtbot.waitUntil(lambda: w._help is not None and w._help.isVisible(), timeout=2000)
    assert w._help.current == "plot-entropy"
    QApplication.sendEvent(canvas.viewport(), QEvent(QEvent.Type.Leave))
    assert view.help_anchor() is None  # the mouse left the plots: F1 no longer means Entropy


def test_a_saved_plot_has_no_help_link_and_the_title_keeps_it(w, tmp_path):
    view = w.plots
    path = view.export_plot(view.plots["kl"].plot, "KL", "svg", str(tmp_path / "kl.svg"))
    with open(path, encoding="utf-8") as f:
        svg = f.read()
    assert ">KL" in svg and "\xa0?\xa0" not in svg  # the title as text, without the "?"
    assert "help:plot-kl" in view.plots["kl"].plot.titleLabel.item.toHtml()  # back after saving


def test_search_links_back_and_the_lab(w, qtbot):
    h = w.open_help("first-run")
    QTest.keyClicks(h.search_box, "advantage")
    listed = h.listed_anchors()
    assert listed[0] == "advantage" and len(listed) < len(T.TOPICS)  # best first
    assert h.tree.topLevelItem(0).text(0) == f"{len(listed)} entries found"
    assert "lora" not in listed
    QTest.keyClick(h.search_box, Qt.Key.Key_Return)  # opens the best hit
    assert h.current == "advantage"
    h.search_box.clear()
    assert len(h.listed_anchors()) == len(T.TOPICS)
    h.browser.anchorClicked.emit(QUrl("#group"))  # what QTextBrowser emits for a clicked link
    assert h.current == "group" and "Group" in h.browser.toPlainText()
    h.back_button.click()
    assert h.current == "advantage"
    h.browser.anchorClicked.emit(QUrl("lab:answer"))
    lab = w._lab
    assert lab is not None and lab.isVisible()
    assert lab.tabs.tabText(lab.tabs.currentIndex()) == T.LAB_TABS["answer"]
    assert set(T.LAB_TABS.values()) <= set(lab.tab_titles())  # every lab: link has its tab
    lab.hide()
    h.open_topic("no-such-entry")
    assert "No entry" in h.browser.toPlainText()
