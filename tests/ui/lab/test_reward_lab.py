"""The reward-design Lab in the window (ui/lab/reward_lab.py): its built-in group and verdicts,
"Open in Lab" from the rollout inspector, the custom checker behind trust, and "Use these
settings" as a normal, unsaved edit of the session.

The real rollouts are the recorded demo step of tests/engine/lab/test_lab_rewards.py (64 rows, 8 groups).
"""

from __future__ import annotations

import os
import shutil

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QContextMenuEvent
from PySide6.QtWidgets import QApplication

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.session.document import new_session
from grpo_desktop.session.trust import TrustStore
from grpo_desktop.ui.lab.reward_lab import TITLE, RewardLabView
from grpo_desktop.ui.session.model import SessionModel
from tests.support.paths import FIXTURES

FIXTURE = os.path.join(FIXTURES, "lab_step", "events.jsonl")


def _run_config() -> TrainConfig:
    import json

    with open(FIXTURE, encoding="utf-8") as f:
        run = json.loads(f.readline())
    assert run["type"] == "run_started"
    return TrainConfig.from_dict(run["config"])


def _session(tmp_path):
    """A session whose run folder holds the recorded real step."""
    doc = new_session(str(tmp_path / "lab.grpo"), _run_config())
    os.makedirs(doc.run_dir)
    shutil.copy(FIXTURE, doc.events_path)
    return doc


def _notes(view) -> list[str]:
    return [n.text() for n in view.verdict_notes if not n.isHidden()]


def test_the_builtin_group_scores_live_and_names_each_failure(qtbot):
    view = RewardLabView()
    qtbot.addWidget(view)
    view.show()
    assert view.table.rowCount() == 8 and view.step is None
    assert len(_notes(view)) == 1 and _notes(view)[0].startswith("<b>Healthy.</b>")
    adv = view.table.column("Advantage")
    assert view.table.item(0, adv).text() == "↑ +1.078"  # (1.2 − 0.625) / 0.5333
    assert view.table.item(6, adv).text() == "↓ -1.172"
    assert "0.625" in view.baseline_label.text()
    view.format.spin.setValue(1.0)  # format ≥ accuracy
    assert [t.split("</b>")[0] for t in _notes(view)] == ["<b>Reward hacking."]
    view.format.spin.setValue(0.2)
    view.length_norm.setChecked(True)
    assert "moves 6.6× as much" in _notes(view)[0]
    view.length_norm.setChecked(False)
    view.g_spin.setValue(2)
    assert view.table.rowCount() == 2 and _notes(view)[0].startswith("<b>No signal.</b>")
    assert "β = 0.04" in view.kl_label.text() and "no KL to measure" in view.kl_label.text()


@pytest.fixture
def window(show_window, tmp_path):
    from grpo_desktop.ui.main_window import MainWindow

    doc = _session(tmp_path)
    TrustStore().trust(doc.config.rewards.custom_checker)  # the user trusted it before
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(doc.config, settings=settings, probe_device=False))
    assert w.session.open_session(doc.path)
    return w


def test_open_in_lab_from_the_inspectors_context_menu_brings_that_groups_rows(qtbot, window):
    w = window
    w.inspector.show_step(1)
    table = w.inspector.table
    rows = w.model.history.rollouts.get(1)
    k = next(i for i in range(table.model().rowCount()) if table.model().index(i, 1).data() == "3")
    rect = table.visualRect(table.model().index(k, 2))
    where = rect.center()  # a right click on the row, as the platform delivers it
    event = QContextMenuEvent(
        QContextMenuEvent.Reason.Mouse, where, table.viewport().mapToGlobal(where)
    )
    QApplication.sendEvent(table.viewport(), event)
    menu = QApplication.activePopupWidget()
    assert [a.text() for a in menu.actions()] == [
        "Open group 3 in the Lab",  # numbered as the inspector's Group column
        "Open all of step 1 in the Lab",
    ]
    action = menu.actions()[0]
    action.trigger()
    menu.close()
    lab = w.lab_window()
    view = lab.tab(TITLE)
    assert lab.isVisible() and lab.tabs.currentWidget() is view
    assert view.step == 1 and view.focus == 3
    group = [r for r in rows if r["group"] == 3]
    shown = view.result.group_rows(3)
    assert [r.rollout.completion for r in shown] == [r["completion"] for r in group]
    assert view.table.rowCount() == 8
    # With the run's settings the Lab gives back the run's own rewards and advantages.
    assert [r.reward for r in shown] == pytest.approx([r["reward"] for r in group], abs=1e-12)
    assert [r.advantage for r in shown] == pytest.approx([r["advantage"] for r in group], 1e-9)
    # The button opens the selected row's group too.
    table.selectRow(0)
    first = table.model().index(0, 1).data()
    w.inspector.lab_button.click()
    assert view.focus == int(first)


def test_use_these_settings_edits_the_session_like_a_form(qtbot, window):
    w = window
    w.model.open_in_lab(1)
    view = w.lab_window().tab(TITLE)
    assert view.focus is None and view.table.rowCount() == 64
    assert not w.model.dirty
    view.format.spin.setValue(0.5)
    view.checker_mode.setCurrentText("lenient")
    view.scale_box.setCurrentText("none")
    view.std_box.setCurrentText("sample")
    assert w.model.config.rewards.format_weight == 0.2  # nothing copied yet
    view.use_button.click()
    r, a = w.model.config.rewards, w.model.config.algorithm
    assert (r.format_weight, r.answer_checker) == (0.5, "lenient")
    assert (a.scale_rewards, a.std_type) == ("none", "sample")
    assert w.model.dirty and w.isWindowModified()
    assert w.reward_panel.format.value() == 0.5


def test_an_edited_checker_reruns_in_the_sandbox_only_when_trusted(qtbot, tmp_path):
    doc = _session(tmp_path)
    model = SessionModel(doc)
    assert not model.checker_trusted()  # came with the session, never trusted
    view = RewardLabView(model)
    qtbot.addWidget(view)
    view.show()
    assert view.open_step(1)
    box = view.checker_box
    assert box.isVisibleTo(view) and box.editor.isReadOnly() and not box.note.isHidden()
    # The run's recorded checker scores are used; nothing runs.
    assert view.lab._process is None and not view.result.custom_pending
    model.trust_checker()
    assert not box.editor.isReadOnly()
    source = "def check(completion, answer, prompt):\n    return 1.0 if '<think>' in completion else 0.0\n"
    box.editor.setPlainText(source)
    qtbot.waitUntil(lambda: "Ran your checker 64 times" in box.status.text(), timeout=20_000)
    rows = model.history.rollouts.get(1)
    assert [r.parts["custom"] for r in view.result.rows] == [
        1.0 if "<think>" in r["completion"] else 0.0 for r in rows
    ]
    view.accuracy.spin.setValue(0.5)  # re-weighting uses the cached results: no new calls
    assert view.lab.run_checker(source) == 0 and not view.result.custom_pending
    view.lab.close()
