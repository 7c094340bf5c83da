"""The rollout inspector on an answer whose custom checker failed (issue 27 §1): it says the
total is unknown because the checker failed, so the answer has no advantage and stays out of
its group's mean and spread; and *Open in Lab* gives back the engine's rewards and advantages.

The step is tests/support/checker_group.py's group, scored by the engine's own code and written
to a session's run folder as a run writes events.jsonl.
"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QSettings, Qt

from grpo_desktop.engine.events import Rollouts, RunFinished, RunStarted, StepMetrics
from grpo_desktop.session.document import new_session
from grpo_desktop.session.trust import TrustStore
from grpo_desktop.ui.lab.reward_lab import TITLE
from tests.support import checker_group as cg
from tests.support.fakes import event_log


@pytest.fixture
def window(show_window, tmp_path):
    from grpo_desktop.ui.main_window import MainWindow

    config = cg.config()
    doc = new_session(str(tmp_path / "checker.grpo"), config)
    rows, metrics, _ = cg.engine_step()
    stored = [{k: v for k, v in r.items() if k != "prompt"} for r in rows]  # prompts once
    with event_log(doc.run_dir) as emit:
        emit(RunStarted("r", config.to_dict(), 0, 1, "cpu", "tiny", 10, 1))
        emit(Rollouts(1, stored, [cg.PROMPT]))
        emit(StepMetrics(1, 1, metrics, {}, elapsed=0.1))
        emit(RunFinished("completed", 1, "completed at 1", None))
    assert os.path.exists(doc.events_path)
    TrustStore().trust(config.rewards.custom_checker)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(config, settings=settings, probe_device=False))
    assert w.session.open_session(doc.path)
    return w


def _view_row(ins, completion: str) -> int:
    col = ins.table_model.column("Completion")
    view = ins.filters.view_model
    return next(r for r in range(view.rowCount()) if view.index(r, col).data() == completion)


def test_a_failed_checker_on_a_right_answer_reads_unknown_and_the_lab_agrees(qtbot, window):
    w = window
    ins = w.inspector
    ins.show_step(1)
    assert ins.visible_rows() == cg.G
    k = _view_row(ins, cg.COMPLETIONS[2])  # the right answer the checker raised on
    view = ins.filters.view_model
    adv_col, reward_col = ins.table_model.column("Advantage"), ins.table_model.column("Reward")
    assert view.index(k, adv_col).data() == "no score"
    assert view.index(k, reward_col).data() != "1.2"  # not summed without the checker
    tip = view.index(k, adv_col).data(Qt.ItemDataRole.ToolTipRole)
    assert "Your checker failed on this answer" in tip and "ValueError" in tip
    ins.table.selectRow(k)
    text = ins.detail.toPlainText()
    assert "no advantage (total unknown)" in text
    assert "Reward unknown (accuracy 1, format 1, custom no score)" in text
    assert (
        "Your checker failed on this answer (see the error below), so its total reward is "
        "unknown even though accuracy and format scored: it has no advantage, stays out of its "
        "group's mean and spread, and is not trained on."
    ) in text
    assert "cannot read the working" in text
    # A sibling's explanation uses the group's mean and spread over the three scored answers.
    ins.table.selectRow(_view_row(ins, cg.COMPLETIONS[0]))
    text = ins.detail.toPlainText()
    assert "Its group of 4 answers to this prompt scored 1.4 on average (spread 0.849)" in text
    assert "advantage is +0.707" in text
    # Open in Lab: the run's settings give back the engine's unknown total and no advantage.
    ins.table.selectRow(k)
    ins.lab_button.click()
    lab = w.lab_window().tab(TITLE)
    shown = lab.result.group_rows(0)
    assert [r.rollout.completion for r in shown] == cg.COMPLETIONS
    assert shown[2].reward is None and shown[2].advantage is None
    assert [r.reward for r in shown] == [2.0, 2.0, None, pytest.approx(0.2, abs=1e-12)]
    assert [r.advantage for r in shown[:2] + shown[3:]] == pytest.approx(
        [a for a in cg.ADVANTAGES if a is not None], abs=1e-9
    )
    assert lab.result.groups[0].mean == pytest.approx(cg.MEAN, abs=1e-12)
