"""Is the Hugging Face hub reachable, and is a model already in the local cache?

Offline, the hub libraries retry every request with back-off, so a lookup of an unknown id waits
tens of seconds; the previews and lookups ask here first. `hub_reachable` opens one TCP
connection to the hub's host (HF_ENDPOINT, else huggingface.co) with a short timeout, in a daemon
thread so a hanging name lookup cannot hold the caller either, and remembers the answer for a
while. HF_HUB_OFFLINE=1 means unreachable without trying. `cached_model_folder` finds a model's
snapshot in the local cache without any network access.

It does not download anything, and a reachable host does not promise that an id exists.
Try it:  python -c "from grpo_desktop.engine.data.hub import hub_reachable; print(hub_reachable())"
"""

from __future__ import annotations

import os
import socket
import threading
import time
from urllib.parse import urlparse

PROBE_TIMEOUT_S = 3.0
REMEMBER_S = 30.0
_TRUE = {"1", "ON", "YES", "TRUE"}
_lock = threading.Lock()
_last: tuple[float, str, bool] | None = None  # (when, host, reachable)


def hub_host() -> tuple[str, int]:
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def offline_mode() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE / HF_DATASETS_OFFLINE) is set."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    return any(os.environ.get(n, "").strip().upper() in _TRUE for n in names)


def _connects(host: str, port: int, timeout_s: float) -> bool:
    result: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=attempt, name="hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s + 0.2)  # a name lookup that hangs counts as unreachable
    return bool(result and result[0])


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S, *, fresh: bool = False) -> bool:
    """Whether the hub's host accepts a connection within `timeout_s` (remembered 30 s)."""
    global _last
    if offline_mode():
        return False
    host, port = hub_host()
    with _lock:
        if not fresh and _last is not None:
            when, last_host, reachable = _last
            if last_host == host and time.monotonic() - when < REMEMBER_S:
                return reachable
    reachable = _connects(host, port, timeout_s)
    with _lock:
        _last = (time.monotonic(), host, reachable)
    return reachable


def hub_cache_dir() -> str:
    """The hub cache as the environment says now (huggingface_hub froze it at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return os.path.join(os.path.expanduser(home), "hub")


def cached_model_folder(repo_id: str) -> str | None:
    """The local snapshot folder of hub model `repo_id` (with its config.json), or None."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        return None
    try:
        folder = snapshot_download(repo_id, local_files_only=True, cache_dir=hub_cache_dir())
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    return folder if os.path.isfile(os.path.join(folder, "config.json")) else None


def offline_model_message(repo_id: str) -> str:
    host, _port = hub_host()
    why = "offline mode is on (HF_HUB_OFFLINE)" if offline_mode() else f"{host} cannot be reached"
    return (
        f"'{repo_id}' is not in the local Hugging Face cache and {why}, so it cannot be looked "
        "up now. Connect to the internet (it is downloaded once and cached), or choose a local "
        "model folder."
    )
