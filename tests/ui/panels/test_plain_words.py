"""Issue 27 §3: the settings speak plainly. Choices show words, not code names ('Last number',
not 'last_number'), while the session keeps the value; small numbers show as people write them
(1e-6, not 1e-06) in the field, its tooltip and its message, which drops the settings-file name
in brackets; Double quantization and the LoRA sizes are greyed out, saying why, while 4-bit
quantization or LoRA is off."""

from __future__ import annotations

import html

import pytest
from PySide6.QtWidgets import QApplication, QComboBox, QWidget

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.hyper_panel import HyperPanel
from grpo_desktop.ui.panels.model_panel import NO_DOUBLE_QUANT, NO_LORA, ModelPanel
from grpo_desktop.ui.panels.reward_panel import RewardPanel
from grpo_desktop.ui.session.model import SessionModel


@pytest.fixture
def model(tmp_path):
    return SessionModel(SessionDocument(str(tmp_path / "words.grpo"), demo_config()))


def _shown(qtbot, panel):
    qtbot.addWidget(panel)
    panel.resize(380, 900)
    panel.show()
    return panel


def _texts(combo: QComboBox) -> list[str]:
    return [combo.itemText(i) for i in range(combo.count())]


def test_choices_show_words_and_the_session_keeps_the_value(qtbot, model):
    panel = _shown(qtbot, RewardPanel(model))
    combo = panel.findChild(QComboBox, "rewards.answer_extraction")
    assert _texts(combo) == ["Automatic", "Answer tag", "\\boxed{}", "Last number"]
    assert not any("_" in t for t in _texts(combo))
    combo.setCurrentText("Last number")  # the user's choice
    assert model.config.rewards.answer_extraction == "last_number"
    model.set_value("rewards", "answer_extraction", "answer_tag")  # e.g. a loaded file
    assert combo.currentText() == "Answer tag"

    hyper = _shown(qtbot, HyperPanel(model))
    loss = hyper.findChild(QComboBox, "algorithm.loss_type")
    assert "Dr. GRPO" in _texts(loss) and "dr_grpo" not in _texts(loss)
    hyper.preset_buttons["dr_grpo"].click()
    assert loss.currentText() == "Dr. GRPO"


def test_small_numbers_read_as_people_write_them(qtbot, model):
    panel = _shown(qtbot, RewardPanel(model))
    tolerance = panel.findChild(QWidget, "rewards.numeric_tolerance")
    assert tolerance.text() == "1e-6"
    tip = html.unescape(tolerance.toolTip())
    assert "Default 1e-6." in tip and "1e-06" not in tip

    hyper = _shown(qtbot, HyperPanel(model))
    lr = hyper.findChild(QWidget, "algorithm.learning_rate")
    model.set_value("algorithm", "learning_rate", 1e-6)
    assert lr.text() == "1e-6"
    model.set_value("algorithm", "learning_rate", 2.5e-5)
    assert lr.text() == "2.5e-5"


def test_a_fields_message_names_no_settings_key(qtbot, model):
    # values a settings file can hold but the fields cannot be set to
    panel = _shown(qtbot, RewardPanel(model))
    model.set_config(model.config.replace(rewards={"numeric_tolerance": 2.0}))
    assert panel.scoring_form.message("rewards", "numeric_tolerance") == (
        "Numeric tolerance is 2; it must be at most 1."
    )
    hyper = _shown(qtbot, HyperPanel(model))
    model.set_config(model.config.replace(algorithm={"learning_rate": 1e-10}))
    assert hyper.forms["algorithm"].message("algorithm", "learning_rate") == (
        "Learning rate is 1e-10; it must be at least 1e-9."
    )


def test_double_quantization_and_lora_sizes_are_off_while_they_do_nothing(qtbot, model):
    panel = _shown(qtbot, ModelPanel(model))
    double = panel.quant_form.editors[("quantization", "double_quant")].widget
    rank = panel.lora_form.editors[("lora", "r")].widget
    assert model.config.quantization.mode == "none" and not model.config.lora.enabled
    assert not double.isEnabled() and NO_DOUBLE_QUANT in html.unescape(double.toolTip())
    for name in ("r", "alpha", "dropout", "target_modules"):
        editor = panel.lora_form.editors[("lora", name)].widget
        assert not editor.isEnabled(), name
        assert NO_LORA in html.unescape(editor.toolTip())

    panel.lora_form.editors[("lora", "enabled")].widget.setChecked(True)  # the user ticks it
    assert model.config.lora.enabled and rank.isEnabled()
    assert NO_LORA not in html.unescape(rank.toolTip())
    rank.setValue(32)
    assert model.config.lora.r == 32

    quant = panel.quant_form.editors[("quantization", "mode")].widget
    quant.setCurrentIndex(quant.findData("8bit"))
    assert model.config.quantization.mode == "8bit" and not double.isEnabled()
    quant.setCurrentIndex(quant.findData("4bit"))
    assert model.config.quantization.mode == "4bit" and double.isEnabled()
    assert quant.currentText() == "4-bit"

    model.set_config(model.config.replace(lora={"enabled": False}))  # a loaded settings file
    QApplication.processEvents()
    assert not rank.isEnabled()


def test_the_estimate_s_apply_names_the_change_in_words():
    from grpo_desktop.ui.panels.estimate_text import describe_change

    change = {
        "lora": {"enabled": True},
        "quantization": {"mode": "4bit"},
        "algorithm": {"learning_rate": 1e-6},
    }
    assert describe_change(change) == "Use LoRA: on, Quantization: 4-bit, Learning rate: 1e-6"
