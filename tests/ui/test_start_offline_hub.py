"""Issue 27 §3: Start says at once that a hub model not in the local cache cannot be downloaded
while offline (HF_HUB_OFFLINE, or the hub's host refusing connections), instead of starting a
run that fails about 70 s later; a cached hub model, or one reachable, starts as before."""

from __future__ import annotations

import socket
import time

import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.data import hub
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.run.worker import FINISHED
from tests.support.fakes import make_fake_train

MODEL = "someone/not-downloaded-0.5B"


@pytest.fixture
def window(show_window, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "_last", None)  # no remembered probe from another test
    cfg = demo_config().replace(run={"max_steps": 1}, model={"name_or_path": MODEL})
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    return show_window(MainWindow(cfg, make_fake_train(), settings=settings, probe_device=False))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


def _cache(tmp_path, repo_id: str) -> None:
    """The local cache's layout for `repo_id` (a snapshot with its config.json)."""
    folder = tmp_path / "hub" / f"models--{repo_id.replace('/', '--')}"
    snap = folder / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("abc123", encoding="utf-8")


@pytest.mark.parametrize("how", ["offline mode", "hub unreachable"])
def test_start_refuses_an_uncached_hub_model_at_once(qtbot, window, monkeypatch, how):
    if how == "offline mode":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    t0 = time.monotonic()
    assert window.start_run() is False
    assert time.monotonic() - t0 < 5
    message = window.message_bar.message()
    assert message.startswith("Cannot start: ") and MODEL in message
    assert "not in the local Hugging Face cache" in message
    assert ("HF_HUB_OFFLINE" in message) == (how == "offline mode")
    assert not window.model.running and window.docks["model"].isVisible()


def test_a_cached_hub_model_starts_offline(qtbot, window, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _cache(tmp_path, MODEL)
    assert window.start_run() is True
    qtbot.waitUntil(lambda: window.model.state == FINISHED, timeout=10_000)
