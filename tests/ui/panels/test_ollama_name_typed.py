"""The Model panel with an Ollama model's name typed in its box (issue 25 §4): the GGUF note
names the model and its import, as for the blob picked from the list (before, a typed
'qwen2.5:0.5b' was taken for a hub id and the note stayed empty). A fake Ollama folder
($OLLAMA_MODELS) with a real GGUF written by the app's exporter; the real panel, offscreen."""

from __future__ import annotations

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.model_panel import ModelPanel
from grpo_desktop.ui.session.model import SessionModel
from tests.support.ollama_layout import ollama_model, small_gguf


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> str:
    return small_gguf(str(tmp_path_factory.mktemp("gguf")))[0]


def test_a_typed_ollama_name_gets_the_gguf_note(qtbot, gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    ollama_model(str(tmp_path / "ollama"), gguf, "qwen2.5:0.5b")
    model = SessionModel(SessionDocument(str(tmp_path / "s.grpo"), demo_config()))
    panel = ModelPanel(model)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: panel.local_list.count() == 1, timeout=10_000)
    about, problem = panel.gguf_text("qwen2.5:0.5b")
    assert problem == ""
    assert about.startswith("GGUF model qwen2.5:0.5b from Ollama (qwen2, Q8_0, "), about
    assert panel.gguf_text("Qwen/Qwen2.5-0.5B-Instruct") == ("", "")
