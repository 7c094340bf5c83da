"""The Reward panel's Format credit (ui/panels/reward_panel.py): the setting with its tooltip from
the field's help, and a line saying why it matters that follows the setting and the tag names."""

from __future__ import annotations

import html

from PySide6.QtWidgets import QComboBox

from grpo_desktop.engine.config import RewardsConfig
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.reward_panel import RewardPanel
from grpo_desktop.ui.session.model import SessionModel


def _panel(qtbot, tmp_path) -> RewardPanel:
    model = SessionModel(SessionDocument(str(tmp_path / "credit.grpo"), demo_config()))
    panel = RewardPanel(model)
    qtbot.addWidget(panel)
    panel.resize(720, 900)
    panel.show()
    return panel


def test_the_panel_shows_format_credit_and_why_it_matters(qtbot, tmp_path):
    panel = _panel(qtbot, tmp_path)
    combo = panel.findChild(QComboBox, "rewards.format_credit")
    assert combo is not None and combo.isVisible()
    assert [combo.itemText(i) for i in range(combo.count())] == ["All or nothing", "Per tag"]
    assert combo.currentData() == "all"
    help_text = RewardsConfig.__dataclass_fields__["format_credit"].metadata["help"]
    assert help_text in html.unescape(combo.toolTip())
    note = panel.credit_note
    assert note.isVisible() and "teaches nothing" in note.text()
    assert "<think>…</think><answer>…</answer>" in note.text()
    qtbot.wait(50)
    panel.grab().save("/tmp/h4_reward_panel.png")

    combo.setCurrentText("Per tag")  # a user's edit: written to the session
    assert panel.model.config.rewards.format_credit == "per_tag" and panel.model.dirty
    assert note.text().startswith("Per tag: each tag in its place") and "a quarter" in note.text()

    panel.model.set_value("rewards", "think_tag", "reasoning")
    assert "<reasoning> opening the answer" in note.text()
    panel.format.spin.setValue(0.0)  # no format reward: nothing to explain
    assert not note.isVisible()
    panel.model.set_value("rewards", "format_weight", 0.2)
    assert note.isVisible()


def test_a_loaded_config_shows_its_credit(qtbot, tmp_path):
    panel = _panel(qtbot, tmp_path)
    cfg = panel.model.config.replace(rewards={"format_credit": "per_tag"})
    panel.model.set_config(cfg)
    combo = panel.findChild(QComboBox, "rewards.format_credit")
    assert combo.currentData() == "per_tag" and panel.credit_note.text().startswith("Per tag")
