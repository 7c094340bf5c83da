"""Format credit in the reward-design Lab (ui/lab/reward_lab.py): on the built-in group of a small
model's first answers (none with all the tags), all-or-nothing credit gives the Format column no
spread and every From format cell 0, with the "Format teaches nothing" verdict; per-tag credit
pushes the answers with more tags up. The real widget, offscreen; a grab of it goes to
/tmp/h4_lab.png (or $GRPO_LAB_GRAB) to be looked at."""

from __future__ import annotations

import os

import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.lab.attempts import UNTAGGED_ATTEMPTS
from grpo_desktop.session.document import new_session
from grpo_desktop.ui.lab.reward_lab import RewardLabView
from grpo_desktop.ui.session.model import SessionModel


def _column(view, name: str) -> list[str]:
    col = view.table.column(name)
    return [view.table.item(k, col).text() for k in range(view.table.rowCount())]


def _notes(view) -> list[str]:
    return [n.text() for n in view.verdict_notes if not n.isHidden()]


def test_per_tag_credit_gives_the_untagged_group_a_format_signal(qtbot):
    view = RewardLabView()
    qtbot.addWidget(view)
    view.resize(1400, 820)
    view.show()
    assert view.builtin_box.isVisible() and view.format_credit.currentText() == "all"
    view.builtin_box.setCurrentIndex(view.builtin_box.findData("untagged"))
    assert view.builtin_name == "untagged" and view.table.rowCount() == len(UNTAGGED_ATTEMPTS)
    assert "8 × 7" in view.source_label.text()

    # All-or-nothing: no answer has all the tags, every format score is 0, so is its share.
    assert set(_column(view, "Format")) == {"0"}
    assert set(_column(view, "From format")) == {"0"}
    assert [n.split("</b>")[0] for n in _notes(view)] == ["<b>Format teaches nothing."]
    assert "Switch Format credit to per tag" in _notes(view)[0]
    before = [r.advantage for r in view.result.rows]
    view.table.selectRow(5)
    assert "adds nothing to it" in view.detail.toPlainText()
    qtbot.wait(50)  # the layout settles (the note's height for its text) as it would on screen
    view.grab().save(os.environ.get("GRPO_LAB_GRAB", "/tmp/h4_lab.png").replace(".png", "_all.png"))

    view.format_credit.setCurrentText("per_tag")
    assert view.settings.format_credit == "per_tag"
    fmt = [float(t) for t in _column(view, "Format")]
    assert fmt == [0, 0, 0, 0.5, 0.25, 0.75, 0.25, 0.75]
    shares = [r.format_advantage for r in view.result.rows]
    for f, share in zip(fmt, shares):  # more tags than the group's mean: pushed up by format
        assert (share > 0) == (f > sum(fmt) / len(fmt))
    assert _column(view, "From format")[5].startswith("+")
    assert "Of it, the format (per tag) makes +0.191" in view.detail.toPlainText()
    assert not any("Format teaches nothing" in n for n in _notes(view))
    after = [r.advantage for r in view.result.rows]
    # The full advantage is the accuracy's share plus the format's: with the format's share
    # taken away, what is left ranks the answers by accuracy alone, as under "all".
    for a_all, a_tag, share, acc in zip(before, after, shares, view.result.rows):
        assert (a_tag - share > 0) == (acc.parts["accuracy"] == 1.0) == (a_all > 0)
    assert "format per tag ×0.2" in view.strip.boxes[2].text()

    out = os.environ.get("GRPO_LAB_GRAB", "/tmp/h4_lab.png")
    view.table.selectRow(5)
    qtbot.wait(50)
    assert view.grab().save(out)

    # Back to the 17 × 23 attempts: the Lab's first group, all-or-nothing again.
    view.builtin_box.setCurrentIndex(view.builtin_box.findData("multiply"))
    assert view.table.rowCount() == 8 and view.format_credit.currentText() == "all"


def test_the_format_credit_is_read_from_and_copied_into_the_session(qtbot, tmp_path):
    cfg = TrainConfig().replace(rewards={"format_credit": "per_tag"})
    model = SessionModel(new_session(str(tmp_path / "s.grpo"), cfg))
    view = RewardLabView(model)
    qtbot.addWidget(view)
    view.show()
    view.format_credit.setCurrentText("per_tag")
    view.use_button.click()
    assert model.config.rewards.format_credit == "per_tag"
    assert "(per_tag)" in view.use_status.text()
    view.format_credit.setCurrentText("all")
    view.use_button.click()
    assert model.config.rewards.format_credit == "all" and model.dirty


@pytest.mark.parametrize("credit", ["all", "per_tag"])
def test_the_lab_and_the_engine_score_the_same_format(credit):
    from grpo_desktop.engine.lab.rewards import LabSettings, RewardLab
    from grpo_desktop.engine.rewards.functions import RewardSet

    lab = RewardLab.with_builtin_group("untagged")
    result = lab.compute(LabSettings(format_credit=credit))
    texts = [a.completion for a in UNTAGGED_ATTEMPTS]
    with RewardSet(TrainConfig().replace(rewards={"format_credit": credit}).rewards) as rs:
        batch = rs.score(["What is 8 × 7?"] * len(texts), texts, ["56"] * len(texts))
    assert [r.parts["format"] for r in result.rows] == batch.values["format"]
    assert [r.reward for r in result.rows] == pytest.approx(batch.totals)
    # The format's share and the rest add up to the advantage, for both credits.
    total = sum(r.format_advantage for r in result.rows)
    assert total == pytest.approx(0.0, abs=1e-9)  # shares are centred on the group mean
