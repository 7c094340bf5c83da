"""Which code from files this user has agreed to run, remembered by content hash.

Two settings run Python that came in a file, and both go through this one decision. The custom
checker (`rewards.custom_checker`): code typed in this app is trusted as typed; code inside a
session or settings file from elsewhere is shown and must be accepted (GUI) or allowed with
`--trust-checker` (CLI); remembered as the SHA-256 of the exact source. A model's own code
(`model.trust_remote_code`: the `.py` files beside a model or tokenizer, a checkpoint's included):
accepted in the app or allowed with `--trust-remote-code`; remembered by the fingerprint of that
folder's code and the setting (engine/models/remote_code.py); `permission` turns the decision
into the `RemoteCodePermission` the engine's loaders require. Any change to the code asks again.

Stored as JSON in the user's config folder (GRPO_DESKTOP_CONFIG_DIR, else XDG_CONFIG_HOME or
~/.config, then grpo-desktop/trusted_checkers.json). Pure Python.
Try: `grpo-desktop score my-run.grpo --input s.jsonl` asks, `--trust-checker` remembers.
"""

from __future__ import annotations

import hashlib
import json
import os

from grpo_desktop.engine.models.remote_code import ModelCode, RemoteCodePermission, permission_for
from grpo_desktop.session.fsio import atomic_write_text

CHECKERS, MODEL_CODE = "sha256", "model_code"


def config_dir() -> str:
    explicit = os.environ.get("GRPO_DESKTOP_CONFIG_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "grpo-desktop")


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


class TrustStore:
    def __init__(self, path: str | None = None):
        self.path = path or os.path.join(config_dir(), "trusted_checkers.json")

    def _load(self, key: str = CHECKERS) -> set[str]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
            return {h for h in data.get(key, []) if isinstance(h, str)}
        except (OSError, ValueError, AttributeError, TypeError, RecursionError):
            return set()  # missing or damaged: nothing trusted, ask again

    def _add(self, key: str, hashes: set[str]) -> None:
        stored = {k: self._load(k) for k in (CHECKERS, MODEL_CODE)}
        stored[key] |= hashes
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        text = json.dumps({k: sorted(v) for k, v in stored.items()}, indent=1)
        atomic_write_text(self.path, text)

    def is_trusted(self, source: str) -> bool:
        """Empty code needs no trust; anything else must have been accepted before."""
        return not source.strip() or source_hash(source) in self._load()

    def trust(self, source: str) -> None:
        if not source.strip():
            return
        self._add(CHECKERS, {source_hash(source)})

    def untrusted_code(self, codes: list[ModelCode]) -> list[ModelCode]:
        """The model code among `codes` not accepted before."""
        trusted = self._load(MODEL_CODE)
        return [c for c in codes if c.fingerprint not in trusted]

    def trust_code(self, codes: list[ModelCode]) -> None:
        """The user read (or allowed) this model code: remember it by fingerprint."""
        if codes:
            self._add(MODEL_CODE, {c.fingerprint for c in codes})

    def permission(self, codes: list[ModelCode]) -> RemoteCodePermission | None:
        """The permission for the engine's loaders when all of `codes` is trusted, else None."""
        return None if self.untrusted_code(codes) else permission_for(codes)
