"""An Ollama model typed by the name Ollama shows ('qwen2.5:0.5b', issue 25 §4) works wherever a
model goes (engine/models/local_models.py `ollama_model_file`, used by loading.resolve_model_path,
the import's progress, "Will it fit?" and the export back to Ollama): before, such a name was
taken for a hub id and failed offline. A fake Ollama folder ($OLLAMA_MODELS) with a real GGUF
written by the app's exporter (tests/support/ollama_layout.py); the CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpo_desktop.engine.models.local_models import ollama_model_file, ollama_origin
from tests.support.ollama_layout import ollama_model, small_gguf


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> str:
    return small_gguf(str(tmp_path_factory.mktemp("gguf")))[0]


@pytest.fixture
def ollama(gguf, tmp_path, monkeypatch) -> dict[str, str]:
    """An Ollama folder with qwen2.5:0.5b and me/mine:latest; name -> weights blob."""
    root = str(tmp_path / "ollama")
    monkeypatch.setenv("OLLAMA_MODELS", root)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no real ~/.ollama seen
    return {
        "qwen2.5:0.5b": ollama_model(root, gguf, "qwen2.5:0.5b"),
        "me/mine:latest": ollama_model(root, gguf, "me/mine:latest", template=None, system=None),
    }


def test_an_ollama_name_is_its_weights_blob(ollama):
    assert ollama_model_file("qwen2.5:0.5b") == ollama["qwen2.5:0.5b"]
    assert ollama_model_file(" qwen2.5:0.5b ") == ollama["qwen2.5:0.5b"]
    assert ollama_model_file("me/mine") == ollama["me/mine:latest"]  # no tag: latest
    assert ollama_model_file("me/mine:latest") == ollama["me/mine:latest"]
    # not there, a hub id, a tag of another model, a path: not Ollama's
    for name in ("qwen2.5:7b", "qwen2.5", "Qwen/Qwen2.5-0.5B-Instruct", "/tmp/qwen2.5:0.5b", ""):
        assert ollama_model_file(name) is None, name
    assert ollama_origin("qwen2.5:0.5b").name == "qwen2.5:0.5b"  # the export back to Ollama


def test_an_ollama_name_resolves_to_the_imported_model(ollama):
    from grpo_desktop.engine.models.loading import resolve_model_path

    folder = resolve_model_path("qwen2.5:0.5b")  # imported once ...
    assert folder == resolve_model_path(ollama["qwen2.5:0.5b"])  # ... the same import as its blob
    with open(f"{folder}/config.json", encoding="utf-8") as fh:
        assert json.load(fh)["model_type"] == "qwen2"
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_the_cli_evaluates_an_ollama_model_by_its_name(ollama):
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "eval", "qwen2.5:0.5b", "--n", "2", "--no-sample"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["n"] == 2
