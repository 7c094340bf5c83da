"""No stale state on the Training plots (issue 27 §3): the hover readout and the cursor line go
once the mouse leaves the plots, and another session (opened, or File ▸ New) starts on fresh
axes, not on the previous session's ranges or zoom.

A real MainWindow; the sessions' run folders hold fake runs' events.jsonl, written as a run
writes them (tests/support/fakes.py)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, QSettings, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import RunFinished, RunStarted
from grpo_desktop.session.document import new_session
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.plots.view import EMPTY_HINT, HOVER_HINT
from tests.support.fakes import event_log, fake_events

B, G = 2, 4


def config(steps: int):
    return demo_config().replace(
        run={"max_steps": steps}, algorithm={"prompts_per_step": B, "num_generations": G}
    )


def session_with_run(tmp_path, name: str, steps: int) -> str:
    """A session whose run has `steps` steps of fake_events (KL grows 0.01 a step)."""
    cfg = config(steps)
    doc = new_session(str(tmp_path / f"{name}.grpo"), cfg)
    with event_log(doc.run_dir) as emit:
        emit(RunStarted(name, cfg.to_dict(), 0, steps, "cpu", "fake", 10, 1))
        for s in range(1, steps + 1):
            for event in fake_events(s, steps, B, G):
                emit(event)
        emit(RunFinished("completed", steps, "completed", None))
    return doc.path


@pytest.fixture
def window(show_window, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(config(3), settings=settings, probe_device=False))
    w.resize(1366, 768)
    w.tabs.setCurrentWidget(w.plots)
    return w


def _drawn_x(sp) -> list:
    x = sp.series[0].item.getOriginalDataset()[0]
    return [] if x is None else list(x)


def drawn(qtbot, w, steps: int) -> None:
    """Wait until the plots show a history of `steps` steps."""
    qtbot.waitUntil(lambda: w.plots.history.num_steps == steps, timeout=5000)
    qtbot.waitUntil(
        lambda: len(_drawn_x(w.plots.plots["kl"])) == steps,
        timeout=5000,
    )
    qtbot.wait(150)  # a few redraw ticks: the y ranges follow the curves


def view_point(w, name: str, x: float, y: float) -> QPoint:
    """Where the point (step x, value y) of a plot is, in the canvas viewport's pixels."""
    vb = w.plots.plots[name].plot.vb
    return w.plots.canvas.mapFromScene(vb.mapViewToScene(QPointF(x, y)))


def test_hover_readout_and_cursor_go_when_the_mouse_leaves(qtbot, window, tmp_path):
    w = window
    assert w.session.open_session(session_with_run(tmp_path, "run", 5))
    drawn(qtbot, w, 5)
    viewport = w.plots.canvas.viewport()
    qtbot.mouseMove(viewport, view_point(w, "kl", 3.1, 0.03))
    qtbot.waitUntil(lambda: w.plots.plots["kl"].cursor.isVisible(), timeout=3000)
    assert w.plots.readout.text().startswith("<b>Step 3</b> · KL")
    assert all(sp.cursor.isVisible() for sp in w.plots.plots.values())
    QApplication.sendEvent(viewport, QEvent(QEvent.Type.Leave))  # the mouse leaves the plots
    assert w.plots.readout.text() == HOVER_HINT
    assert not any(sp.cursor.isVisible() for sp in w.plots.plots.values())


def test_another_session_starts_on_fresh_axes(qtbot, window, tmp_path):
    w = window
    assert w.session.open_session(session_with_run(tmp_path, "long", 40))
    drawn(qtbot, w, 40)
    kl = w.plots.plots["kl"].plot.vb
    assert kl.viewRange()[1][1] >= 0.4  # KL reaches 0.40 at step 40
    # The user zooms into the KL plot with the wheel: it stops following the run.
    pos = QPointF(view_point(w, "kl", 20, 0.2))
    wheel = QWheelEvent(
        pos,
        QPointF(w.plots.canvas.viewport().mapToGlobal(pos.toPoint())),
        QPoint(0, 0),
        QPoint(0, 480),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(w.plots.canvas.viewport(), wheel)
    qtbot.waitUntil(lambda: w.plots.fit_button.isEnabled(), timeout=3000)
    zoomed = [list(r) for r in kl.viewRange()]
    assert zoomed[0][1] - zoomed[0][0] < 30
    # Another session, three steps long: its axes fit it, nothing of the zoom or the old range.
    assert w.session.open_session(session_with_run(tmp_path, "short", 3))
    drawn(qtbot, w, 3)
    (x0, x1), (y0, y1) = kl.viewRange()
    assert x0 < 1 and 3 < x1 < 15  # steps 1..3 with a little room, not 40 steps
    assert 0.03 <= y1 < 0.1 and y0 <= 0.01  # KL 0.01..0.03, not the zoomed or old 0..0.4
    assert not w.plots.fit_button.isEnabled() and w.plots.follow
    # File ▸ New: no run, the empty plots' 0..10 steps and no leftover y range.
    assert w.session.new_session()
    qtbot.waitUntil(lambda: w.plots.history.num_steps == 0, timeout=3000)
    qtbot.wait(150)
    (x0, x1), (y0, y1) = kl.viewRange()
    assert (x0, x1) == pytest.approx((0, 10)) and (y0, y1) == pytest.approx((0, 1))
    assert w.plots.readout.text() == EMPTY_HINT
