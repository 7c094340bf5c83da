"""The Model panel's list of the models Ollama and LM Studio keep, and its GGUF note.

A fake Ollama folder ($OLLAMA_MODELS) and a fake LM Studio folder (under a fake home) hold real
GGUF files written by the app's own exporter (tests/support/ollama_layout.py), plus one broken
manifest. The real panel (offscreen Qt) scans them off the GUI thread and lists each with name,
app, architecture, quantization and size, the path in the tooltip; clicking one puts its file
into model.name_or_path and the note says it is imported once and, from 8 bits, a little below
the original model. "GGUF file…" picks a file in the real QFileDialog. The panel is grabbed to
/tmp/h2_panel.png for a look.
"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.model_panel import ModelPanel
from grpo_desktop.ui.session.model import SessionModel
from tests.support.dialogs import when_modal
from tests.support.ollama_layout import lmstudio_model, ollama_model, small_gguf

LMS_NAME = "lmstudio-community/Qwen2.5-0.5B-Instruct-GGUF/Qwen2.5-0.5B-Instruct-Q8_0.gguf"


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
    return {"qwen2.5:0.5b": blob, LMS_NAME: lms}


@pytest.fixture
def panel(qtbot, tmp_path, local):
    model = SessionModel(SessionDocument(str(tmp_path / "s.grpo"), demo_config()))
    panel = ModelPanel(model)
    qtbot.addWidget(panel)
    panel.resize(760, 900)
    panel.show()
    qtbot.waitUntil(lambda: panel.local_list.topLevelItemCount() == 2, timeout=10_000)
    return panel


def rows(tree) -> list[list[str]]:
    return [
        [tree.topLevelItem(i).text(c) for c in range(tree.columnCount())]
        for i in range(tree.topLevelItemCount())
    ]


def test_ollama_and_lmstudio_models_are_listed_beside_the_cache(panel, local, gguf):
    size = f"{os.path.getsize(gguf) / 1024:,.1f} KB"
    assert rows(panel.local_list) == [
        ["qwen2.5:0.5b", "Ollama", "qwen2", "Q8_0", size],
        [LMS_NAME, "LM Studio", "qwen2", "Q8_0", size],
    ]
    first = panel.local_list.topLevelItem(0)
    assert first.toolTip(0) == f"Ollama: {local['qwen2.5:0.5b']}"
    assert panel.local_list.isVisible()
    label = panel.local_label
    assert label.text().startswith("2 model(s) that Ollama and LM Studio keep on this computer")
    assert "1 could not be read" in label.text()
    assert "bad:latest: not valid JSON" in label.toolTip()
    assert os.environ["OLLAMA_MODELS"] in label.toolTip()
    assert "No models in your Hugging Face cache" in panel.cache_label.text()
    assert not panel.gguf_note.isVisible()  # builtin:demo is not a GGUF


def test_choosing_a_listed_model_sets_it_and_says_what_import_means(qtbot, panel, local):
    tree = panel.local_list
    item = tree.topLevelItem(0)
    rect = tree.visualItemRect(item)
    qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    blob = local["qwen2.5:0.5b"]
    assert panel.model.value("model", "name_or_path") == blob
    assert panel.model_box.currentText() == blob
    note = panel.gguf_note.text()
    assert panel.gguf_note.isVisible()
    assert note.startswith("GGUF model qwen2.5:0.5b from Ollama: qwen2, Q8_0, ")
    assert "imported once" in note and "reused next time" in note
    assert "stored in 8 bits (Q8_0): dequantized, they are a little below the original" in note
    assert "back to Ollama as qwen2.5-0.5b-grpo" in note
    assert item.isSelected()
    panel.grab().save("/tmp/h2_panel.png")
    # The LM Studio one, by keyboard (Enter on the row).
    second = tree.topLevelItem(1)
    tree.setCurrentItem(second)
    tree.itemActivated.emit(second, 0)
    assert panel.model.value("model", "name_or_path") == local[LMS_NAME]
    assert panel.gguf_note.text().startswith(f"GGUF model {LMS_NAME} from LM Studio")
    assert "back to Ollama" not in panel.gguf_note.text()
    panel.model.set_value("model", "name_or_path", "builtin:demo")
    assert not panel.gguf_note.isVisible() and not tree.selectedItems()


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
    assert panel.gguf_note.text().startswith(f"GGUF model {os.path.basename(gguf)}: qwen2")
    assert not panel.local_list.selectedItems()  # the exporter's file is neither app's
