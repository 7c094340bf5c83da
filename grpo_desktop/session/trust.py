"""Which custom-checker code this user has agreed to run, remembered by content hash.

A session's checker is Python that runs with the user's permissions. Code the user typed in this
app is trusted as they type it; code that arrives inside a session from elsewhere is shown and
must be accepted first (GUI) or allowed with `--trust-checker` (CLI). The choice is remembered as
the SHA-256 of the exact source, so any change to the code asks again.

Stored as JSON in the user's config folder (GRPO_DESKTOP_CONFIG_DIR, else XDG_CONFIG_HOME or
~/.config, then grpo-desktop/trusted_checkers.json). Pure Python.
"""

from __future__ import annotations

import hashlib
import json
import os

from grpo_desktop.session.fsio import atomic_write_text


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

    def _load(self) -> set[str]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
            return {h for h in data.get("sha256", []) if isinstance(h, str)}
        except (OSError, ValueError, AttributeError):
            return set()  # missing or damaged: nothing trusted, ask again

    def is_trusted(self, source: str) -> bool:
        """Empty code needs no trust; anything else must have been accepted before."""
        return not source.strip() or source_hash(source) in self._load()

    def trust(self, source: str) -> None:
        if not source.strip():
            return
        hashes = self._load()
        hashes.add(source_hash(source))
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        atomic_write_text(self.path, json.dumps({"sha256": sorted(hashes)}, indent=1))
