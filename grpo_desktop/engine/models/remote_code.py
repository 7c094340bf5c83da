"""A model's own Python code: what it is, its fingerprint, and the permission to run it.

`model.trust_remote_code` lets transformers import Python that ships with a model or tokenizer
(the `.py` files its config's `auto_map` names), code from wherever the model, the session or
the run folder came from. This module finds that code (`code_to_trust`: the base model and, for
a run, the full-weight folders of its checkpoints), fingerprints it (SHA-256 over every `.py`
file's name and bytes, the `auto_map` entries and the setting, not the folder's path: a moved
copy is the same code) and defines `RemoteCodePermission`, the only way to make loading.py run
it. The caller that asked the user (`--trust-remote-code`, the window's question) hands it down;
a loader given none, or one for other code, refuses (`check_permission`). A folder with neither
`.py` files nor an `auto_map` needs no permission; a hub id always does (its code is what the
Hub serves). Which code the user trusts is remembered by `session.trust.TrustStore`, not here.

Torch-free. Try it:  python -c "from grpo_desktop.engine.models.remote_code import model_code; \
print(model_code('org/model'))"
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from grpo_desktop.engine.errors import ModelError
from grpo_desktop.engine.runs.layout import checkpoints_dir

SETTING = "model.trust_remote_code"
HUB = "hub:"
BUILTIN = "builtin:"
CONFIG_FILES = ("config.json", "tokenizer_config.json", "processor_config.json")
MAX_FILES = 500  # a model folder holds a handful; a huge tree is hashed only this far


class RemoteCodeRefused(ModelError):
    """The settings ask to run a model's own code that the caller has no permission for."""


@dataclass(frozen=True)
class ModelCode:
    """The code of one model folder (or hub id) that loading with trust_remote_code would run."""

    source: str  # a folder, or "hub:ID"
    fingerprint: str
    files: tuple[str, ...] = ()  # the .py files, relative to the folder
    auto_map: tuple[str, ...] = ()  # "AutoConfig: configuration_x.XConfig", ...

    @property
    def folder(self) -> str | None:
        return None if self.source.startswith(HUB) else self.source

    def describe(self) -> str:
        """One line for a message: where the code is and what it is."""
        if self.source.startswith(HUB):
            hub_id = self.source[len(HUB) :]
            return f"the Hugging Face Hub model {hub_id} (its code is what the Hub serves)"
        what = ", ".join(self.files[:6]) + (" …" if len(self.files) > 6 else "")
        if not self.files:
            what = "no .py file, but its auto_map fetches code: " + "; ".join(self.auto_map)
        return f"{self.source} ({what})"


@dataclass(frozen=True)
class RemoteCodePermission:
    """The user agreed to run exactly this code (by fingerprint), wherever the folder now is."""

    fingerprints: frozenset[str]


def permission_for(codes: list[ModelCode]) -> RemoteCodePermission:
    return RemoteCodePermission(frozenset(c.fingerprint for c in codes))


def _source(name_or_path: str) -> str | None:
    """A local folder, "hub:ID", or None for the app's own built-in models."""
    name = name_or_path.strip()
    if name.startswith(BUILTIN):
        return None
    expanded = os.path.expanduser(name)
    if os.path.isdir(expanded):
        return os.path.abspath(expanded)
    if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1:
        return None  # a local folder that is not there: loading says so, nothing runs
    return HUB + name


def _hub_snapshot(repo_id: str) -> str | None:
    """The folder of the cached copy of a hub model, if there is one (never downloads)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # not a valid repo id, no cache: nothing cached to look at
        return None
    return os.path.dirname(found) if isinstance(found, str) else None


def _code_files(folder: str) -> list[str]:
    found: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                found.append(os.path.relpath(os.path.join(root, name), folder))
        if len(found) >= MAX_FILES:
            break
    return found[:MAX_FILES]


def _auto_map(folder: str) -> list[str]:
    entries = []
    for name in CONFIG_FILES:
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        mapping = data.get("auto_map") if isinstance(data, dict) else None
        if mapping:
            entries.append(f"{name}: {json.dumps(mapping, sort_keys=True)}")
    return entries


def model_code(name_or_path: str) -> ModelCode | None:
    """The code a model folder or hub id ships, or None when it has none of its own to run."""
    source = _source(name_or_path)
    if source is None:
        return None
    h = hashlib.sha256(f"grpo-desktop code v1\0{SETTING}=true\0".encode())
    folder = source
    if source.startswith(HUB):
        h.update(source.encode() + b"\0")
        folder = _hub_snapshot(source[len(HUB) :])
    files: list[str] = []
    auto_map: list[str] = []
    if folder:
        files, auto_map = _code_files(folder), _auto_map(folder)
        for rel in files:
            try:
                with open(os.path.join(folder, rel), "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
            except OSError:
                digest = "unreadable"
            h.update(f"{rel}\0{digest}\0".encode())
        for entry in auto_map:
            h.update(entry.encode() + b"\0")
    if not source.startswith(HUB) and not files and not auto_map:
        return None
    return ModelCode(source, h.hexdigest(), tuple(files), tuple(auto_map))


def checkpoint_weight_folders(run_dir: str) -> list[str]:
    """The full-weight folders (`step-N/model`) of a run's checkpoints: resuming or evaluating
    loads the model and tokenizer from one of them."""
    root = checkpoints_dir(run_dir)
    if not os.path.isdir(root):
        return []
    names = sorted(n for n in os.listdir(root) if n.startswith("step-"))
    return [p for n in names if os.path.isdir(p := os.path.join(root, n, "model"))]


def code_to_trust(
    name_or_path: str,
    trust_remote_code: bool,
    run_dir: str | None = None,
    folders: tuple[str, ...] | list[str] = (),
) -> list[ModelCode]:
    """The model code that loading `name_or_path` (and, for a run, any of its checkpoints, and
    any of `folders`) with this setting would run; empty when the setting is off or none."""
    if not trust_remote_code:
        return []
    paths = [name_or_path, *(checkpoint_weight_folders(run_dir) if run_dir else []), *folders]
    codes: dict[str, ModelCode] = {}
    for path in paths:
        code = model_code(path)
        if code is not None:
            codes.setdefault(code.fingerprint, code)
    return list(codes.values())


def refusal_message(codes: list[ModelCode], origin: str, how: str) -> str:
    """Why this code may not run, for the user; `how` says how to allow it (a flag, a button)."""
    where = "\n  - ".join(c.describe() for c in codes)
    return (
        f"{origin} sets {SETTING}, so loading its model would run Python code that came with it, "
        f"with your permissions:\n  - {where}\nYou have not trusted this code here. Read it "
        f"first; to run it, {how} (remembered for this exact code), or set {SETTING} to false."
    )


def check_permission(wanted: bool, path: str, permission: RemoteCodePermission | None) -> bool:
    """The trust_remote_code value for loading `path`: False unless the setting asks for it;
    raises RemoteCodeRefused when it does but `permission` does not cover the code now in
    `path`."""
    if not wanted:
        return False
    code = model_code(path)
    if code is None:
        return True  # nothing of its own to run
    if permission is not None and code.fingerprint in permission.fingerprints:
        return True
    changed = " (not the code that was trusted)" if permission is not None else ""
    raise RemoteCodeRefused(
        f"Loading {code.describe()} would run its own Python code (the settings set {SETTING}), "
        f"and that code{changed} has not been trusted here. Trust it first: in the app, Start "
        "asks; on the command line, add --trust-remote-code. Or set it to false."
    )


def code_hint(path: str) -> str:
    """For a model that failed to load without its own code: a sentence saying it has some."""
    code = model_code(path)
    if code is None:
        return ""
    return (
        f" It ships its own code ({code.describe()}), which runs only with {SETTING} on and "
        "trusted (on the command line: --trust-remote-code)."
    )
