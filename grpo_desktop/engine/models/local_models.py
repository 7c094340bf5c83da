"""The models Ollama and LM Studio keep on this computer, found by reading their folders.

Most hobbyists already have models as GGUF files for Ollama or LM Studio; the Model panel lists
them beside the Hugging Face cache so that one can be trained without writing any Python.

- Ollama (`$OLLAMA_MODELS`, `~/.ollama/models`, `/usr/share/ollama/.ollama/models`): a manifest
  per model at `manifests/<registry host>/<namespace>/<model>/<tag>`, JSON whose `layers` name
  blobs by digest (`sha256:<hex>` is the file `blobs/sha256-<hex>`): the GGUF weights
  (`application/vnd.ollama.image.model`), the Go chat template (`...image.template`), the
  parameters (`...image.params`, JSON, with the stop words) and a system prompt
  (`...image.system`). Shown as Ollama names them: `qwen2.5:0.5b` (the `library` namespace and
  the default registry left out).
- LM Studio (`~/.lmstudio/models`, or the downloads folder its settings.json names, and
  `~/.cache/lm-studio/models`): `<publisher>/<repo>/*.gguf`; vision projectors (`mmproj`) and the
  later parts of a split file are not models of their own.

Each entry is filled from the GGUF header (models/gguf_info.py: architecture, quantization,
size; nothing else of the file is read), so a scan is fast. An entry that cannot be read (a
broken manifest, a missing blob, a file that is not GGUF) is left out with the reason appended to
`skipped`; a scan never raises. `ollama_origin(path)` tells which Ollama model a blob is, so
that an export can go back to Ollama under the model's name with its template and stop words
(export/modelfile.py). Torch-free.

Try it:  python -c "from grpo_desktop.engine.models.local_models import \\
find_ollama_models, find_lmstudio_models; print(find_ollama_models(), find_lmstudio_models())"
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.units import size_text

OLLAMA_REGISTRY = "registry.ollama.ai"
MODEL_LAYER = "application/vnd.ollama.image.model"
TEMPLATE_LAYER = "application/vnd.ollama.image.template"
PARAMS_LAYER = "application/vnd.ollama.image.params"
SYSTEM_LAYER = "application/vnd.ollama.image.system"
TEXT_LIMIT = 1 << 20  # a template, params or system layer larger than this is not read
_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass
class LocalModel:
    """A model another app keeps on this computer: `path` is its GGUF file (an Ollama blob has
    no .gguf suffix), which is what goes into model.name_or_path."""

    name: str  # 'qwen2.5:0.5b' (Ollama), 'lmstudio-community/Qwen2.5-0.5B-GGUF/q4.gguf'
    source: str  # "ollama" | "lmstudio"
    path: str
    architecture: str = ""
    quantization: str = ""
    size_bytes: int = 0
    template: str = ""  # Ollama: its Go template; LM Studio: the GGUF's Jinja chat template
    stop: list[str] = field(default_factory=list)
    system: str = ""
    params: dict = field(default_factory=dict)  # Ollama's params layer as it is (stop included)

    @property
    def app(self) -> str:
        return "Ollama" if self.source == "ollama" else "LM Studio"

    def summary(self) -> str:
        """'qwen2 · Q4_K_M · 379.4 MB'."""
        parts = [self.architecture or "?", self.quantization or "?", size_text(self.size_bytes)]
        return " · ".join(parts)


def _home() -> str:
    return os.path.expanduser("~")


def ollama_roots() -> list[str]:
    """Where Ollama keeps models on this computer, in the order it looks ($OLLAMA_MODELS first)."""
    roots = []
    if os.environ.get("OLLAMA_MODELS"):
        roots.append(os.path.expanduser(os.environ["OLLAMA_MODELS"]))
    roots += [
        os.path.join(_home(), ".ollama", "models"),
        "/usr/share/ollama/.ollama/models",  # the Linux service's own user
    ]
    return _unique(roots)


def lmstudio_roots() -> list[str]:
    """Where LM Studio keeps models: its settings' downloads folder, then the usual places."""
    roots = []
    settings = os.path.join(_home(), ".lmstudio", "settings.json")
    try:
        with open(settings, encoding="utf-8") as fh:
            folder = json.load(fh).get("downloadsFolder")
        if isinstance(folder, str) and folder:
            roots.append(os.path.expanduser(folder))
    except (OSError, ValueError, AttributeError):
        pass
    roots += [
        os.path.join(_home(), ".lmstudio", "models"),
        os.path.join(_home(), ".cache", "lm-studio", "models"),
    ]
    return _unique(roots)


def _unique(paths: list[str]) -> list[str]:
    seen, out = set(), []
    for p in paths:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _header(path: str):
    """The GGUF header of `path` (GgufInfo); raises UserError (ModelError) or OSError."""
    from grpo_desktop.engine.models.gguf_info import read_gguf_info

    return read_gguf_info(path)


def _fill(model: LocalModel) -> LocalModel:
    info = _header(model.path)
    model.architecture = str(info.architecture or "")
    model.quantization = str(info.quantization or "")
    model.size_bytes = int(info.size_bytes or os.path.getsize(model.path))
    if model.source == "lmstudio":
        model.template = info.chat_template or ""
        model.stop = [info.eos_token] if info.eos_token else []
    return model


# -- Ollama


def blob_path(root: str, digest: str) -> str:
    """The file of a layer's digest ('sha256:ab…' is blobs/sha256-ab…; older Ollamas kept the
    colon, which the file systems that allow it still hold)."""
    dashed = os.path.join(root, "blobs", digest.replace(":", "-"))
    if os.path.exists(dashed) or ":" not in digest:
        return dashed
    coloned = os.path.join(root, "blobs", digest)
    return coloned if os.path.exists(coloned) else dashed


def ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name Ollama shows: 'qwen2.5:0.5b', 'me/mine:latest', 'hf.co/bartowski/x:Q4_K_M'."""
    base = model if namespace == "library" else f"{namespace}/{model}"
    if host != OLLAMA_REGISTRY:
        base = f"{host}/{namespace}/{model}"
    return f"{base}:{tag}"


def _manifests(root: str) -> list[tuple[str, tuple[str, str, str, str]]]:
    """(manifest path, (host, namespace, model, tag)) for every manifest under `root`."""
    top = os.path.join(root, "manifests")
    found = []
    for folder, _dirs, files in os.walk(top):
        parts = os.path.relpath(folder, top).split(os.sep)
        if len(parts) != 3 or parts[0] == ".":
            continue
        for tag in files:
            if not tag.startswith("."):
                found.append((os.path.join(folder, tag), (*parts, tag)))
    return sorted(found)


def _read_text(path: str) -> str:
    if os.path.getsize(path) > TEXT_LIMIT:
        raise ValueError(f"{path} is larger than {size_text(TEXT_LIMIT)}")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _ollama_model(root: str, manifest: str, parts: tuple[str, str, str, str]) -> LocalModel:
    """The model one manifest describes; raises ValueError, OSError or UserError."""
    with open(manifest, encoding="utf-8") as fh:
        data = json.loads(fh.read(TEXT_LIMIT))
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise ValueError("the manifest has no list of layers")
    by_type: dict[str, str] = {}
    for layer in layers:
        if isinstance(layer, dict) and isinstance(layer.get("digest"), str):
            by_type.setdefault(str(layer.get("mediaType")), layer["digest"])
    if MODEL_LAYER not in by_type:
        raise ValueError("the manifest names no model weights (no image.model layer)")
    weights = blob_path(root, by_type[MODEL_LAYER])
    if not os.path.isfile(weights):
        raise ValueError(f"its weights {weights} are missing (a download that did not finish?)")
    model = LocalModel(ollama_name(*parts), "ollama", weights)
    if TEMPLATE_LAYER in by_type:
        model.template = _read_text(blob_path(root, by_type[TEMPLATE_LAYER]))
    if SYSTEM_LAYER in by_type:
        model.system = _read_text(blob_path(root, by_type[SYSTEM_LAYER]))
    if PARAMS_LAYER in by_type:
        params = json.loads(_read_text(blob_path(root, by_type[PARAMS_LAYER])))
        if isinstance(params, dict):
            model.params = params
            stop = params.get("stop", [])
            model.stop = [stop] if isinstance(stop, str) else [str(s) for s in stop]
    return _fill(model)


def find_ollama_models(
    roots: list[str] | None = None, skipped: list[tuple[str, str]] | None = None
) -> list[LocalModel]:
    """The models of every Ollama folder in `roots` (default `ollama_roots()`), by name. Those
    that cannot be read go to `skipped` as (path, reason)."""
    found: list[LocalModel] = []
    for root in _unique(roots if roots is not None else ollama_roots()):
        for manifest, parts in _manifests(root):
            try:
                found.append(_ollama_model(root, manifest, parts))
            except (OSError, ValueError, UserError) as exc:
                _skip(skipped, manifest, f"{ollama_name(*parts)}: {_reason(exc)}")
    return sorted(found, key=lambda m: m.name)


def ollama_model_file(name: str, roots: list[str] | None = None) -> str | None:
    """The weights blob of the Ollama model called `name` as Ollama shows it ('smollm2:135m';
    a name without a tag means ':latest'), or None when no Ollama folder in `roots` (default
    `ollama_roots()`) has it. Lets a user type the name they know instead of a blob's path;
    only the matching manifest is read. A path or a name with spaces is never one."""
    name = name.strip()
    if (
        not name
        or name.startswith(("/", ".", "~"))
        or "\\" in name
        or any(c.isspace() for c in name)
    ):
        return None
    wanted = {name, f"{name}:latest"} if ":" not in name.rsplit("/", 1)[-1] else {name}
    for root in _unique(roots if roots is not None else ollama_roots()):
        for manifest, parts in _manifests(root):
            if ollama_name(*parts) in wanted:
                try:
                    return _ollama_model(root, manifest, parts).path
                except (OSError, ValueError, UserError):
                    continue
    return None


def ollama_origin(path: str) -> LocalModel | None:
    """The Ollama model whose weights blob `path` is (a name that is not 'latest' preferred when
    several tags share it), or None when `path` is not an Ollama blob."""
    if not path:
        return None
    path = ollama_model_file(path) or path  # the name as typed: 'smollm2:135m'
    given = os.path.abspath(os.path.expanduser(path))
    real = os.path.realpath(given)
    # The blob as named (it may be a link to the file), or the blob a link to it leads to.
    roots = [
        os.path.dirname(os.path.dirname(p))
        for p in dict.fromkeys([given, real])
        if os.path.basename(os.path.dirname(p)) == "blobs"
        and os.path.basename(p).startswith("sha256")
    ]
    models = [m for m in find_ollama_models(roots) if os.path.realpath(m.path) == real]
    models.sort(key=lambda m: (m.name.endswith(":latest"), m.name))
    return models[0] if models else None


# -- LM Studio


def _lmstudio_files(root: str) -> list[tuple[str, str]]:
    """(name, path) of the model files under `root`: publisher/repo/file.gguf."""
    found = []
    try:
        publishers = sorted(os.listdir(root))
    except OSError:
        return found
    for publisher in publishers:
        try:
            repos = sorted(os.listdir(os.path.join(root, publisher)))
        except OSError:
            continue
        for repo in repos:
            folder = os.path.join(root, publisher, repo)
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                if not name.lower().endswith(".gguf") or "mmproj" in name.lower():
                    continue
                part = _SPLIT_PART.search(name)
                if part and int(part.group(1)) != 1:
                    continue
                found.append((f"{publisher}/{repo}/{name}", os.path.join(folder, name)))
    return found


def find_lmstudio_models(
    roots: list[str] | None = None, skipped: list[tuple[str, str]] | None = None
) -> list[LocalModel]:
    """The GGUF models of every LM Studio folder in `roots` (default `lmstudio_roots()`)."""
    found: list[LocalModel] = []
    for root in _unique(roots if roots is not None else lmstudio_roots()):
        for name, path in _lmstudio_files(root):
            try:
                found.append(_fill(LocalModel(name, "lmstudio", path)))
            except (OSError, ValueError, UserError) as exc:
                _skip(skipped, path, f"{name}: {_reason(exc)}")
    return sorted(found, key=lambda m: m.name)


def find_local_models(skipped: list[tuple[str, str]] | None = None) -> list[LocalModel]:
    """Ollama's models, then LM Studio's, from their usual folders (the Model panel's scan)."""
    return find_ollama_models(skipped=skipped) + find_lmstudio_models(skipped=skipped)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg}, line {exc.lineno})"
    return str(exc) or type(exc).__name__


def _skip(skipped: list[tuple[str, str]] | None, path: str, reason: str) -> None:
    if skipped is not None:
        skipped.append((path, reason))
