"""Issue 27 §3: a preset says what it changed (old → new, by the fields' labels) and can be undone
with the note's Undo button or Ctrl+Z; an edit made after the preset survives the undo."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from grpo_desktop.engine.config import STARTER_LABEL
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.hyper_panel import HyperPanel
from grpo_desktop.ui.session.model import SessionModel


@pytest.fixture
def panel(qtbot, tmp_path):
    model = SessionModel(SessionDocument(str(tmp_path / "presets.grpo"), demo_config()))
    panel = HyperPanel(model)
    qtbot.addWidget(panel)
    panel.resize(380, 900)
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_a_preset_lists_its_changes_and_undo_restores_them(qtbot, panel):
    model = panel.model
    before = model.config.to_dict()
    assert before["algorithm"]["loss_type"] != "dapo"
    note = panel.change_note
    assert not note.isVisible()

    qtbot.mouseClick(panel.preset_buttons["dapo"], Qt.MouseButton.LeftButton)
    assert model.config.algorithm.loss_type == "dapo"
    text = note.text.text()
    assert note.isVisible() and text.startswith("The DAPO preset changed ")
    old = before["algorithm"]["loss_type"].upper()  # grpo → GRPO, as the combo shows it
    assert f"• Loss aggregation: {old} → DAPO" in text
    assert "loss_type" not in text and "_" not in text
    # every line is one field that really changed
    changed = [
        k for k, v in model.config.to_dict()["algorithm"].items() if before["algorithm"][k] != v
    ]
    assert text.count("•") == len(changed)

    qtbot.mouseClick(note.undo_button, Qt.MouseButton.LeftButton)
    assert model.config.to_dict() == before
    assert not note.isVisible() and panel.preset_buttons["dapo"].isChecked() is False


def test_ctrl_z_undoes_and_keeps_a_later_edit(qtbot, panel):
    model = panel.model
    before = model.config.to_dict()
    qtbot.mouseClick(panel.preset_buttons["dr_grpo"], Qt.MouseButton.LeftButton)
    assert model.config.algorithm.loss_type == "dr_grpo"
    # the user then edits one of the fields the preset set, and another one
    model.set_value("algorithm", "scale_rewards", "batch")
    model.set_value("algorithm", "num_generations", 6)
    panel.preset_buttons["dr_grpo"].setFocus()
    qtbot.keyClick(
        panel.preset_buttons["dr_grpo"], Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier
    )
    after = model.config.to_dict()["algorithm"]
    assert after["loss_type"] == before["algorithm"]["loss_type"]  # undone
    assert after["scale_rewards"] == "batch" and after["num_generations"] == 6  # kept
    assert not panel.change_note.isVisible()
    assert panel.change_note.undo() is False  # nothing left to undo


def test_the_starter_says_what_it_set_and_a_second_click_changes_nothing(qtbot, panel):
    qtbot.mouseClick(panel.starter_button, Qt.MouseButton.LeftButton)
    text = panel.change_note.text.text()
    assert STARTER_LABEL in text and "Learning rate: " in text and " → " in text
    qtbot.mouseClick(panel.starter_button, Qt.MouseButton.LeftButton)
    assert "nothing changed" in panel.change_note.text.text()
    assert not panel.change_note.undo_button.isVisible()


def test_a_settings_file_loaded_afterwards_hides_the_note(qtbot, panel):
    qtbot.mouseClick(panel.preset_buttons["gspo"], Qt.MouseButton.LeftButton)
    assert panel.change_note.isVisible()
    panel.model.set_config(demo_config())
    assert not panel.change_note.isVisible()
