"""The small-model starter where a user meets it: the Hyperparameters panel's "Starter: small real
model" button (one replace through the session model; the forms show the new values; the preset
row keeps its variant) and "Will it fit?" in the real window, whose recommendation for a
pretrained model under 1.5B parameters has an Apply button that sets the starter (then the
recommendation goes). The session model has no undo, so there is none to test here.

The panel's picture: GRPO_STARTER_GRAB=/tmp/h7_hyper.png (default: the test's own folder)."""

from __future__ import annotations

import html
import json
import os

import pytest
from PySide6.QtCore import QSettings, Qt

from grpo_desktop.engine.config import SMALL_MODEL_STARTER, small_model_starter
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.panels.hyper_panel import HyperPanel
from grpo_desktop.ui.session.model import SessionModel
from tests.support.fakes import make_fake_train

GB = 10**9
# SmolLM2-135M's sizes (config.json only: the estimate reads nothing else of a model).
SMOLLM2 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
}


def _pretrained(tmp_path) -> str:
    folder = tmp_path / "smollm2-135m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMOLLM2))
    return str(folder)


def _matches_starter(cfg) -> bool:
    return all(
        getattr(getattr(cfg, section), name) == value
        for section, values in SMALL_MODEL_STARTER.items()
        for name, value in values.items()
    )


def test_the_starter_button_sets_the_starter_in_one_replace(qtbot, tmp_path):
    cfg = demo_config().replace(
        model={"name_or_path": _pretrained(tmp_path)}, algorithm={"loss_type": "dapo"}
    )
    model = SessionModel(SessionDocument(str(tmp_path / "s.grpo"), cfg))
    panel = HyperPanel(model)
    qtbot.addWidget(panel)
    panel.resize(900, 700)
    panel.show()
    tip = html.unescape(panel.starter_button.toolTip())
    assert "learning rate 3e-4" in tip and "Per-tag format credit" in tip
    replaced, changed = [], []
    model.config_replaced.connect(lambda: replaced.append(1))
    model.config_changed.connect(lambda *a: changed.append(a))
    expected = small_model_starter(model.config).to_dict()

    qtbot.mouseClick(panel.starter_button, Qt.MouseButton.LeftButton)

    assert len(replaced) == 1 and changed == []  # one edit, as a preset is
    assert model.config.to_dict() == expected and _matches_starter(model.config)
    assert model.config.data.example_answer == "<think>4 + 7 = 11</think><answer>11</answer>"
    assert model.config.model.name_or_path == cfg.model.name_or_path
    assert model.dirty
    form = panel.forms["algorithm"].editors
    assert form[("algorithm", "max_completion_length")].widget.value() == 64
    assert form[("algorithm", "loss_type")].widget.currentData() == "grpo"
    assert "64 tokens" in panel.batch_label.text()
    qtbot.wait(50)
    out = os.environ.get("GRPO_STARTER_GRAB", str(tmp_path / "hyper.png"))
    assert panel.grab().save(out)


@pytest.fixture
def window(show_window, tmp_path):
    def make(cfg) -> MainWindow:
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        w = MainWindow(cfg, make_fake_train(), settings=settings, probe_device=False)
        show_window(w)
        w.estimate_view.start(free_bytes=8 * GB)
        return w

    return make


@pytest.mark.timeout(180)
def test_will_it_fit_recommends_the_starter_and_apply_sets_it(qtbot, window, tmp_path):
    cfg = demo_config().replace(
        model={"name_or_path": _pretrained(tmp_path)}, lora={"enabled": True}
    )
    w = window(cfg)
    view = w.estimate_view
    qtbot.waitUntil(view.shown_for_current_settings, timeout=120_000)
    r = view.result
    assert r["fits"] is True and 130e6 < r["model"]["params"] < 140e6
    texts = [label.text() for label in view.advice_labels]
    assert len(texts) == 1 and texts[0].startswith("• For a small pretrained model")
    assert "learning rate 3e-4 with LoRA (now 2e-4)" in texts[0]  # the demo's 2e-4
    assert "per-tag format credit (now all-or-nothing)" in texts[0]
    assert view.advice_box.isVisible() and len(view.advice_buttons) == 1
    why = html.unescape(view.advice_labels[0].toolTip())
    assert "Starter: small real model" in why and "teaches nothing" in why
    assert "Format credit: Per tag" in html.unescape(view.advice_buttons[0].toolTip())

    qtbot.mouseClick(view.advice_buttons[0], Qt.MouseButton.LeftButton)

    assert _matches_starter(w.model.config)
    assert w.model.config.data.example_problem == "Calculate 4 + 7."
    qtbot.waitUntil(view.shown_for_current_settings, timeout=60_000)
    assert view.result["starter"] is None
    assert view.advice_labels == [] and not view.advice_box.isVisible()

    w.model.set_value("rewards", "format_credit", "all")  # a reward setting alone: asked again
    qtbot.waitUntil(view.shown_for_current_settings, timeout=60_000)
    assert [label.text() for label in view.advice_labels] != []
    assert "per-tag format credit" in view.advice_labels[0].text()
