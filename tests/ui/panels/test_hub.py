"""Hub ids in the Dataset preview with no network: the local cache first, a quick
message naming the unreachable hub instead of minutes of retries, a Cancel button, and a newer
preview (a local file) that is not held up by an older one still waiting on the hub.

The hub is made unreachable for certain, whatever network the test machine has: HF_ENDPOINT
points at a closed port on this machine (a real refused connection), or HF_HUB_OFFLINE=1."""

from __future__ import annotations

import json
import shutil
import socket
import time

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.data import hub as hub_access
from grpo_desktop.session.document import new_session
from grpo_desktop.ui.common.tasks import wait_for_all
from grpo_desktop.ui.panels.dataset_panel import DatasetPanel
from grpo_desktop.ui.session.model import SessionModel


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again once the socket is: connections are refused


def _as_a_user_starts(monkeypatch) -> None:
    """The tests run with HF_HUB_OFFLINE=1 (conftest); a user's app starts without it."""
    import datasets.config
    import huggingface_hub.constants

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_access, "_last", None)


@pytest.fixture
def no_hub(monkeypatch):
    _as_a_user_starts(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")


@pytest.fixture
def panel(qtbot, tmp_path):
    doc = new_session(str(tmp_path / "s.grpo"), demo_config(), name="s")
    model = SessionModel(doc)
    panel = DatasetPanel(model)
    qtbot.addWidget(panel)
    panel.show()
    yield panel
    wait_for_all()


def test_an_unknown_hub_dataset_offline_says_so_within_seconds(qtbot, panel, no_hub):
    model = panel.model
    start = time.monotonic()
    model.set_value("data", "source", "hub")
    model.set_value("data", "path", "nobody-here/no-such-dataset")
    qtbot.waitUntil(lambda: "cannot be reached" in panel.status_note.text(), timeout=10_000)
    assert time.monotonic() - start < 8
    assert "not in the local cache" in panel.status_note.text()
    qtbot.waitUntil(lambda: not panel.cancel_button.isVisible(), timeout=5000)


def test_an_unknown_hub_model_offline_gives_the_plain_template_with_the_reason(
    qtbot, panel, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    model = panel.model
    model.set_value("model", "name_or_path", "nobody-here/no-such-model")
    start = time.monotonic()
    model.set_value("data", "source", "file")
    model.set_value("data", "path", str(path))
    qtbot.waitUntil(lambda: "offline mode is on" in panel.status_note.text(), timeout=10_000)
    assert time.monotonic() - start < 8
    assert "plain prompt template" in panel.status_note.text()
    assert "What is 2 + 2?" in panel.table.item(0, 0).text()


def test_a_cached_hub_model_is_read_from_the_cache_with_no_network(
    qtbot, panel, tmp_path, monkeypatch, tiny_model_dir, no_hub
):
    snapshot = tmp_path / "hub" / "models--someone--tiny" / "snapshots" / "abc123"
    shutil.copytree(tiny_model_dir, snapshot)
    (tmp_path / "hub" / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hub_access.cached_model_folder("someone/tiny") == str(snapshot)
    assert hub_access.cached_model_folder("someone/other") is None
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question": "What is 3 + 3?", "answer": "#### 6"}) + "\n")
    model = panel.model
    model.set_value("model", "name_or_path", "someone/tiny")
    model.set_value("data", "source", "file")
    model.set_value("data", "path", str(path))
    header = panel.table.horizontalHeaderItem
    qtbot.waitUntil(lambda: header(0).text() == "Prompt as the model sees it", timeout=30_000)
    qtbot.waitUntil(lambda: panel.table.rowCount() == 1, timeout=5000)
    # The tiny model's chat template wraps the problem (the plain template would not). The raw
    # rows show first and the templated prompts replace them once the tokenizer has loaded.
    qtbot.waitUntil(lambda: panel.table.item(0, 0).text() != "What is 3 + 3?", timeout=30_000)
    assert "What is 3 + 3?" in panel.table.item(0, 0).text()
    assert "cannot be reached" not in panel.status_note.text()


def test_cancel_stops_waiting_and_a_newer_preview_replaces_a_slow_one(
    qtbot, panel, tmp_path, monkeypatch
):
    # A hub host that takes connections but never answers: the dataset library then spends
    # its retries on the preview, which the user cancels and replaces with a local file.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    _as_a_user_starts(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    try:
        model = panel.model
        model.set_value("data", "source", "hub")
        model.set_value("data", "path", "nobody-here/slow-dataset")
        qtbot.waitUntil(panel.cancel_button.isVisible, timeout=5000)
        panel.cancel_button.click()
        assert "Preview cancelled" in panel.counts_label.text()
        assert not panel.cancel_button.isVisible()
        path = tmp_path / "p.jsonl"
        path.write_text(json.dumps({"question": "What is 5 + 5?", "answer": "#### 10"}) + "\n")
        model.set_value("data", "source", "file")
        model.set_value("data", "path", str(path))
        qtbot.waitUntil(lambda: panel.table.rowCount() == 1, timeout=10_000)
        assert "What is 5 + 5?" in panel.table.item(0, 0).text()
        assert "slow-dataset" not in panel.status_note.text()
    finally:
        wait_for_all()
        server.close()
