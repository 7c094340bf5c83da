"""The Model panel's list of the models Ollama and LM Studio keep, and its GGUF note.

A fake Ollama folder ($OLLAMA_MODELS) and a fake LM Studio folder (under a fake home) hold real
GGUF files written by the app's own exporter (tests/support/ollama_layout.py), plus one broken
manifest. The real panel (offscreen Qt) scans them off the GUI thread and lists each with name,
app, architecture, quantization and size (two lines each: the panel is a narrow dock), the
path in the tooltip; one of an architecture transformers cannot read is greyed with the reason.
Clicking one puts its file into model.name_or_path and the note says it is imported once and,
from 8 bits, a little below the original model. "GGUF file…" picks a file in the real QFileDialog. The panel is grabbed to
/tmp/h2_panel.png for a look.
"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.models.gguf_import import cache_root
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.model_panel import ModelPanel
from grpo_desktop.ui.session.model import SessionModel
from tests.support.dialogs import when_modal
from tests.support.ollama_layout import (
    lmstudio_model,
    ollama_model,
    small_gguf,
    unsupported_gguf,
)

LMS_NAME = "lmstudio-community/Qwen2.5-0.5B-Instruct-GGUF/Qwen2.5-0.5B-Instruct-Q8_0.gguf"
RWKV_NAME = "someone/rwkv7-GGUF/rwkv7-F16.gguf"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> str:
    return small_gguf(str(tmp_path_factory.mktemp("gguf")))[0]


@pytest.fixture
def local(gguf, tmp_path, monkeypatch):
    """{name: path} of the fake Ollama and LM Studio models, in folders the panel scans."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    blob = ollama_model(str(tmp_path / "ollama"), gguf, "qwen2.5:0.5b")
    broken = tmp_path / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "bad"
    broken.mkdir(parents=True)
    (broken / "latest").write_text("{ not json")
    lms = lmstudio_model(str(home / ".lmstudio" / "models"), gguf, LMS_NAME)
    rwkv = unsupported_gguf(str(home / ".lmstudio" / "models" / RWKV_NAME))
    return {"qwen2.5:0.5b": blob, LMS_NAME: lms, RWKV_NAME: rwkv}


@pytest.fixture
def panel(qtbot, tmp_path, local):
    model = SessionModel(SessionDocument(str(tmp_path / "s.grpo"), demo_config()))
    panel = ModelPanel(model)
    qtbot.addWidget(panel)
    panel.resize(760, 900)
    panel.show()
    qtbot.waitUntil(lambda: panel.local_list.count() == 3, timeout=10_000)
    return panel


def rows(listed) -> list[str]:
    return [listed.item(i).text() for i in range(listed.count())]


def test_ollama_and_lmstudio_models_are_listed_beside_the_cache(panel, local, gguf):
    size = f"{os.path.getsize(gguf) / 1024:,.1f} KB"
    rwkv_size = f"{os.path.getsize(local[RWKV_NAME]):,} bytes"
    assert rows(panel.local_list) == [
        f"qwen2.5:0.5b\nOllama · qwen2 · Q8_0 · {size}",
        f"Qwen2.5-0.5B-Instruct-Q8_0.gguf\nLM Studio · qwen2 · Q8_0 · {size}",
        f"rwkv7-F16.gguf\nLM Studio · rwkv7 · F16 · {rwkv_size}",
    ]
    first, lms, rwkv = (panel.local_list.item(i) for i in range(3))
    assert first.toolTip() == f"qwen2.5:0.5b\nOllama: {local['qwen2.5:0.5b']}"
    assert lms.toolTip() == f"{LMS_NAME}\nLM Studio: {local[LMS_NAME]}"
    # An architecture transformers cannot read is listed, greyed, with the reason.
    assert rwkv.toolTip().startswith(f"{RWKV_NAME}\nLM Studio: {local[RWKV_NAME]}\n\n")
    assert "Cannot be trained: " in rwkv.toolTip()
    assert "'rwkv7' model, an architecture transformers' GGUF loader cannot read" in rwkv.toolTip()
    assert rwkv.foreground().color() != first.foreground().color()
    assert panel.local_list.isVisible()
    label = panel.local_label
    assert label.text().startswith("3 model(s) that Ollama and LM Studio keep on this computer")
    assert "1 could not be read" in label.text()
    assert "bad:latest: not valid JSON" in label.toolTip()
    assert os.environ["OLLAMA_MODELS"] in label.toolTip()
    assert "No models in your Hugging Face cache" in panel.cache_label.text()
    assert not panel.gguf_note.isVisible()  # builtin:demo is not a GGUF


def test_choosing_a_listed_model_sets_it_and_says_what_import_means(qtbot, panel, local):
    listed = panel.local_list
    item = listed.item(0)
    qtbot.mouseClick(
        listed.viewport(), Qt.MouseButton.LeftButton, pos=listed.visualItemRect(item).center()
    )
    blob = local["qwen2.5:0.5b"]
    assert panel.model.value("model", "name_or_path") == blob
    assert panel.model_box.currentText() == blob
    note = panel.gguf_note.text()
    assert panel.gguf_note.isVisible()
    assert note.startswith("GGUF model qwen2.5:0.5b from Ollama (qwen2, Q8_0, ")
    assert "Imported once, when first used: dequantized into a model folder" in note
    assert "reused next time" in note
    assert "Dequantized from 8 bits, its weights are a little below the original model's" in note
    assert note.endswith("Export as GGUF brings it back to Ollama as qwen2.5-0.5b-grpo.")
    assert panel.gguf_note.toolTip() == f"In {cache_root()}"
    assert item.isSelected()
    panel.grab().save("/tmp/h2_panel.png")
    # The LM Studio one, by keyboard (Enter on the row).
    second = listed.item(1)
    listed.setCurrentItem(second)
    listed.itemActivated.emit(second)
    assert panel.model.value("model", "name_or_path") == local[LMS_NAME]
    assert panel.gguf_note.text().startswith(f"GGUF model {LMS_NAME} from LM Studio")
    assert "back to Ollama" not in panel.gguf_note.text()
    assert not panel.gguf_problem.isVisible()
    # One that cannot be trained: the error note says why and what is read.
    listed.itemClicked.emit(listed.item(2))
    assert panel.model.value("model", "name_or_path") == local[RWKV_NAME]
    assert not panel.gguf_note.isVisible() and panel.gguf_problem.isVisible()
    problem = panel.gguf_problem.text()
    assert "an architecture transformers' GGUF loader cannot read. It reads: " in problem
    assert "llama" in problem and "qwen2" in problem
    panel.model.set_value("model", "name_or_path", "builtin:demo")
    assert not panel.gguf_note.isVisible() and not panel.gguf_problem.isVisible()
    assert not listed.selectedItems()


def test_gguf_file_button_picks_a_file_in_the_file_dialog(qtbot, panel, gguf):
    seen = []

    def pick(dialog: QFileDialog) -> None:
        seen.append(dialog.nameFilters())
        dialog.selectFile(gguf)
        dialog.accept()

    when_modal(QFileDialog, pick)
    panel.gguf_button.click()
    assert seen and seen[0][0] == "GGUF models (*.gguf)"
    assert panel.model.value("model", "name_or_path") == gguf
    assert panel.gguf_note.text().startswith(f"GGUF model {os.path.basename(gguf)} (qwen2, ")
    assert not panel.local_list.selectedItems()  # the exporter's file is neither app's
