"""Stopping a GGUF import: Stop in the window (the trainer's control), Cancel in Try and Compare.

The import runs on a worker thread and checks `should_stop` at each tensor it reads: once true
it stops, removes its half-written folder (nothing counts as imported) and says so; the run ends
"stopped" before it started, and a later import starts afresh. Compare's import reports its
progress lines before the first answer.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.models import gguf_import
from grpo_desktop.engine.models.gguf_import import ImportStopped, import_events, imported_folder
from tests.support.gguf_models import build_small, tiny_run_config


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory) -> str:
    from grpo_desktop.engine.export.gguf import write_gguf

    root = tmp_path_factory.mktemp("gguf-stop")
    build_small(str(root / "model"), "llama-3-shaped", real_pre_tokenizer=True)
    return write_gguf(str(root / "model"), str(root / "gguf"), outtype="f16", name="small")["path"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "model-cache"
    monkeypatch.setenv(gguf_import.CACHE_ENV, str(folder))
    return folder


def _leftovers(cache) -> list[str]:
    return sorted(os.listdir(cache)) if os.path.exists(cache) else []


def test_stop_during_the_import_keeps_nothing_and_a_later_import_works(gguf_path, cache):
    seen: list[str] = []
    stop = threading.Event()
    with pytest.raises(ImportStopped, match="Stopped while importing .*nothing was kept"):
        for event in import_events(gguf_path, "float32", should_stop=stop.is_set):
            seen.append(event.message)
            stop.set()  # the user presses Stop at the first progress line
    assert seen and "Importing small" in seen[0]
    assert not any(m.startswith("Imported small") for m in seen)
    assert imported_folder(gguf_path, "float32") is None
    assert _leftovers(cache) == []  # the scratch folder went with it
    done = list(import_events(gguf_path, "float32"))
    assert done[-1].message.startswith("Imported small")
    assert imported_folder(gguf_path, "float32")


def test_closing_the_progress_early_stops_the_import(gguf_path, cache):
    """A consumer that walks away (Try's or the trainer's generator closed) stops the import."""
    events = import_events(gguf_path, "float32")
    next(events)
    events.close()
    assert imported_folder(gguf_path, "float32") is None
    assert _leftovers(cache) == []


def test_stop_while_a_run_imports_its_model_ends_it_stopped(gguf_path, cache, tmp_path):
    cfg = tiny_run_config(gguf_path)
    control = TrainControl()
    events = []
    for event in train(cfg, control, run_dir=str(tmp_path / "run")):
        events.append(event)
        if event.type == "log":
            control.stop()
    assert [e.type for e in events if e.type != "log"] == ["run_finished"]
    last = events[-1]
    assert last.status == "stopped" and "Stopped while importing" in last.message
    assert imported_folder(gguf_path, "float32") is None and _leftovers(cache) == []
    with open(tmp_path / "run" / "events.jsonl", encoding="utf-8") as fh:
        assert json.loads(fh.readlines()[-1])["status"] == "stopped"


def test_compare_reports_the_import_before_its_answers(gguf_path, cache, tmp_path, monkeypatch):
    """Compare on a run whose model is a GGUF not imported yet (the cache was cleared since):
    the import's lines reach `importing`, then the comparison runs."""
    from grpo_desktop.engine.variants.compare import compare_run

    cfg = tiny_run_config(gguf_path, checkpoint_every=1)
    run = tmp_path / "run"
    finished = list(train(cfg, run_dir=str(run)))[-1]
    assert finished.status == "completed", finished.message
    monkeypatch.setenv(gguf_import.CACHE_ENV, str(tmp_path / "fresh-cache"))
    lines: list[str] = []
    comparison = compare_run(str(run), "base", "latest", n=2, importing=lines.append)
    assert lines and "Importing small" in lines[0] and lines[-1].startswith("Imported small")
    assert len(comparison.rows) == 2
