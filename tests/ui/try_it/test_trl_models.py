"""A TRL output_dir opened read-only (File ▸ Open Run Folder…) is tried and compared in the window.

The output is laid out by hand as TRL saves a LoRA run (tests/engine/variants/test_trl_variants.py checks that
layout against transformers / peft): a peft adapter over the built-in demo model, saved with
save_pretrained into checkpoint-1/ and into the output_dir itself (the final model), and a
trainer_state.json; a full fine-tuning output is the demo model with its weights moved, saved
with its tokenizer into the output_dir (the final model). The committed fixture
tests/fixtures/trl_run holds no weights (cut down), so it is the case of a run that has saved
no model yet. The tests open the folder through the real
menu and file dialog, then Generate in the Try tab (both panes answer, the final model on the
right) and Run in the Compare tab (the table fills with the held-out problems); a checkpoint
saved while the folder is followed is listed when the tab is shown again.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFileDialog

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.models.loading import resolve_model_path
from grpo_desktop.ui.compare import tips as compare_tips
from grpo_desktop.ui.main_window import MainWindow
from tests.support.dialogs import when_modal
from tests.support.fakes import make_fake_train
from tests.support.paths import FIXTURES

WAIT_MS = 60_000
FIXTURE = os.path.join(FIXTURES, "trl_run")


@pytest.fixture(scope="module")
def trl_lora_output(tmp_path_factory) -> str:
    """A TRL LoRA output over builtin:demo: checkpoint-1/ and the final adapter, step 1."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = str(tmp_path_factory.mktemp("trl-lora-output"))
    base_dir = resolve_model_path("builtin:demo")
    for where, seed in ((os.path.join(out, "checkpoint-1"), 1), (out, 2)):
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(base_dir)
        model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
        with torch.no_grad():  # a trained adapter: B is no longer 0
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.05 * torch.randn_like(p))
        model.save_pretrained(where)
        with open(os.path.join(where, "trainer_state.json"), "w", encoding="utf-8") as fh:
            json.dump({"global_step": 1, "log_history": [], "max_steps": 1}, fh)
    return out


@pytest.fixture(scope="module")
def trl_full_output(tmp_path_factory) -> str:
    """A TRL full fine-tuning output of builtin:demo: the final model (weights moved, with its
    tokenizer, as TRL saves the processing class) in the output_dir, step 1."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = str(tmp_path_factory.mktemp("trl-full-output"))
    base_dir = resolve_model_path("builtin:demo")
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out)
    with open(os.path.join(out, "trainer_state.json"), "w", encoding="utf-8") as fh:
        json.dump({"global_step": 1, "log_history": [], "max_steps": 1}, fh)
    return out


@pytest.fixture
def window(show_window, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(demo_config(), make_fake_train(), settings=settings, probe_device=False)
    yield show_window(w)
    w.try_view.shutdown()
    w.compare_view.shutdown()


def _open(qtbot, w: MainWindow, folder: str) -> None:
    when_modal(QFileDialog, lambda d: (d.selectFile(folder), d.accept()))
    w.session.open_run_action.trigger()  # File ▸ Open Run Folder…, answered like a user
    qtbot.waitUntil(lambda: not w.run_folder.loading, timeout=10_000)
    assert w.model.read_only_folder == folder


def _items(box) -> list[str]:
    return [box.itemText(i) for i in range(box.count())]


def test_a_trl_lora_output_is_tried_with_its_final_model_over_its_base(
    qtbot, window, trl_lora_output
):
    w = window
    _open(qtbot, w, trl_lora_output)
    view = w.try_view
    w.tabs.setCurrentWidget(view)
    assert _items(view.checkpoint_box) == ["Final model (step 1) (latest)", "Step 1"]
    assert view.generate_button.isEnabled()
    assert "this window's data and reward settings" in view.note.text()  # no export beside it
    assert view.try_config().model.name_or_path == resolve_model_path("builtin:demo")
    view.decode.max_tokens.setValue(8)
    view.prompt.setPlainText("What is 6 + 7?")
    assert view.generate()
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    assert not view.message_bar.message(), view.message_bar.message()
    assert view.base_pane.result["variant"] == "base"
    assert view.trained_pane.result["variant"] == "final"
    assert view.trained_pane.result["label"] == "Final model (step 1)"
    assert all(view.panes[s].result["samples"][0]["tokens"] > 0 for s in ("base", "trained"))
    held = view.runner.held
    assert held.base.uses_lora and [v.key for v in held.variants] == ["base", "step-1", "final"]
    view.checkpoint_box.setCurrentIndex(1)  # Step 1: its adapter switched on, no reload
    assert view.generate()
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    assert view.trained_pane.result["variant"] == "step-1" and view.runner.held is held


def test_a_trl_full_fine_tuning_output_is_tried_over_the_windows_model(
    qtbot, window, trl_full_output
):
    w = window
    _open(qtbot, w, trl_full_output)
    view = w.try_view
    w.tabs.setCurrentWidget(view)
    assert _items(view.checkpoint_box) == ["Final model (step 1) (latest)"]
    assert "TRL records no base model" in view.note.text() and "builtin:demo" in view.note.text()
    view.decode.max_tokens.setValue(8)
    view.prompt.setPlainText("What is 6 + 7?")
    assert view.generate()
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    assert not view.message_bar.message(), view.message_bar.message()
    assert view.base_pane.result["variant"] == "base"
    assert view.trained_pane.result["variant"] == "final"
    assert not view.runner.held.base.uses_lora  # the final model loaded as a second, whole one


def test_a_trl_lora_output_is_compared_on_the_held_out_problems(qtbot, window, trl_lora_output):
    w = window
    _open(qtbot, w, trl_lora_output)
    view = w.compare_view
    w.tabs.setCurrentWidget(view)
    assert _items(view.side_b) == ["Base model", "Step 1", "Final model (step 1) (latest)"]
    assert view.side_a.currentData() == "base" and view.side_b.currentData() == "final"
    assert view.run_button.isEnabled() and "reward settings" in view.note.text()
    view.count.setValue(3)
    assert view.run()
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    assert not view.message_bar.message(), view.message_bar.message()
    c = view.results.comparison
    assert c is not None and (c.a.key, c.b.key) == ("base", "final") and len(c.rows) == 3
    assert view.results.proxy.rowCount() == 3
    assert c.rows[0].problem in {ex.problem for ex in _held_out(w)}


def _held_out(w: MainWindow):
    from grpo_desktop.engine.variants.eval_target import held_out_examples

    return held_out_examples(w.model.config, 3, 0)


def test_a_trl_run_with_no_saved_model_answers_with_the_base_and_cannot_compare(qtbot, window):
    w = window
    _open(qtbot, w, FIXTURE)  # the committed fixture: states and completions, no weights
    view = w.try_view
    assert _items(view.checkpoint_box) == ["No checkpoint yet"]
    assert "saved no model yet" in view.note.text() and view.generate_button.isEnabled()
    compare = w.compare_view
    assert not compare.run_button.isEnabled()
    assert compare.note.text() == compare_tips.TRL_NO_MODEL
    assert not compare.run() and compare.message_bar.message() == compare_tips.TRL_NO_MODEL


def test_a_model_saved_while_the_trl_run_is_followed_shows_when_the_tab_is_shown_again(
    qtbot, window, trl_lora_output, tmp_path
):
    w = window
    out = str(tmp_path / "out")
    shutil.copytree(
        os.path.join(trl_lora_output, "checkpoint-1"), os.path.join(out, "checkpoint-1")
    )
    _open(qtbot, w, out)
    w.tabs.setCurrentWidget(w.compare_view)
    assert _items(w.compare_view.side_b) == ["Base model", "Step 1 (latest)"]
    for name in ("adapter_config.json", "adapter_model.safetensors", "trainer_state.json"):
        shutil.copyfile(os.path.join(trl_lora_output, name), os.path.join(out, name))  # TRL's save
    w.tabs.setCurrentWidget(w.try_view)
    assert _items(w.try_view.checkpoint_box) == ["Final model (step 1) (latest)", "Step 1"]
    w.tabs.setCurrentWidget(w.compare_view)
    assert w.compare_view.side_b.currentText() == "Final model (step 1) (latest)"
