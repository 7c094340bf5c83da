"""Session bundles: round trip, migration, damaged files, moved folders, atomic saves, trust,
autosave and crash markers."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys

import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.events import RunStarted, StepMetrics
from grpo_desktop.session import recovery
from grpo_desktop.session.document import (
    SCHEMA_VERSION,
    SessionError,
    load_session,
    new_session,
    save_session,
)
from grpo_desktop.session.fsio import SaveError
from grpo_desktop.session.trust import TrustStore
from tests.support.paths import FIXTURES

FIXTURE_V1 = os.path.join(FIXTURES, "session_v1.grpo")


@pytest.fixture(autouse=True)
def _user_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_DESKTOP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("GRPO_DESKTOP_CONFIG_DIR", str(tmp_path / "config"))


def _with_run(doc, steps=3):
    os.makedirs(doc.run_dir, exist_ok=True)
    with open(doc.events_path, "w") as fh:
        fh.write(RunStarted("r", doc.config.to_dict(), 0, steps, "cpu", "m").to_json() + "\n")
        for s in range(1, steps + 1):
            fh.write(StepMetrics(s, steps, {"reward": s / 10}).to_json() + "\n")
    return save_session(doc)


def test_round_trip_keeps_config_layout_and_run(tmp_path):
    cfg = TrainConfig().replace(
        rewards={"custom_checker": "def check(c, a, p):\n    return 1.0\n"}, run={"seed": 9}
    )
    doc = new_session(str(tmp_path / "mine.grpo"), cfg)
    doc.layout = {"window_state": "AAAA", "splitter": [300, 700]}
    doc = _with_run(doc)
    back = load_session(doc.path)
    assert back.config == cfg and back.layout["splitter"] == [300, 700]
    assert back.name == "mine" and back.trained and back.has_run()
    with open(os.path.join(doc.path, "session.json")) as fh:
        assert json.load(fh)["schema_version"] == SCHEMA_VERSION


def test_v1_session_is_migrated_in_memory_only(tmp_path):
    copy = tmp_path / "old.grpo"
    shutil.copytree(FIXTURE_V1, copy)
    before = (copy / "session.json").read_bytes()
    doc = load_session(str(copy))
    # v1's absolute run_dir points at a machine that is gone: the bundle's own run/ is used.
    assert doc.run_dir == str(copy / "run") and doc.trained
    assert doc.config.run.seed == 11 and doc.layout == {}
    assert (copy / "session.json").read_bytes() == before  # opening never writes
    save_session(doc)
    assert json.loads((copy / "session.json").read_text())["schema_version"] == SCHEMA_VERSION


@pytest.mark.parametrize(
    "content, words",
    [
        ("", "empty"),
        ('{"schema_version": 2, "config": {', "line 1"),
        ("\x00\x01garbage", "damaged"),
        ('{"schema_version": 99}', "newer GRPO Desktop"),
        ('{"schema_version": 2, "config": {"algorithm": {"beta": "x", "nope": 1}}}', "invalid"),
    ],
)
def test_damaged_or_future_files_are_refused_and_left_alone(tmp_path, content, words):
    bundle = tmp_path / "bad.grpo"
    bundle.mkdir()
    (bundle / "session.json").write_text(content)
    stat = os.stat(bundle / "session.json")
    with pytest.raises(SessionError, match=words):
        load_session(str(bundle))
    assert (bundle / "session.json").read_text() == content
    assert os.stat(bundle / "session.json").st_mtime_ns == stat.st_mtime_ns


def test_not_a_session_and_missing_run_folder(tmp_path):
    with pytest.raises(SessionError, match="not a GRPO Desktop session"):
        load_session(str(tmp_path))
    doc = _with_run(new_session(str(tmp_path / "s.grpo"), TrainConfig()))
    shutil.rmtree(doc.run_dir)
    with pytest.raises(SessionError, match="run folder is missing"):
        load_session(doc.path)


def test_moved_session_still_opens_with_its_history(tmp_path):
    from grpo_desktop.session.history import RunHistory

    doc = _with_run(new_session(str(tmp_path / "a" / "s.grpo"), TrainConfig()))
    moved = tmp_path / "elsewhere" / "renamed.grpo"
    shutil.move(doc.path, moved)
    back = load_session(str(moved))
    assert back.run_dir.startswith(str(moved))
    assert RunHistory.from_events_file(back.events_path).num_steps == 3


def test_save_as_copies_the_run(tmp_path):
    doc = _with_run(new_session(str(tmp_path / "s.grpo"), TrainConfig()))
    copy = save_session(doc, str(tmp_path / "copy.grpo"))
    assert copy.path != doc.path and copy.name == "copy"
    assert os.path.isfile(copy.events_path)
    assert load_session(copy.path).config == doc.config


def test_a_failed_save_keeps_the_previous_version(tmp_path, monkeypatch):
    doc = new_session(str(tmp_path / "s.grpo"), TrainConfig())
    saved = (tmp_path / "s.grpo" / "session.json").read_text()

    def disk_full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    doc.config = doc.config.replace(run={"seed": 123})
    with pytest.raises(SaveError, match="disk is full"):
        save_session(doc)
    monkeypatch.undo()
    assert (tmp_path / "s.grpo" / "session.json").read_text() == saved
    assert not [n for n in os.listdir(tmp_path / "s.grpo") if n.startswith(".tmp-")]


def test_trust_is_remembered_by_content_hash(tmp_path):
    store = TrustStore()
    code = "def check(c, a, p):\n    return 1.0\n"
    assert store.is_trusted("") and not store.is_trusted(code)
    store.trust(code)
    assert TrustStore().is_trusted(code)  # persisted
    assert not store.is_trusted(code + "# changed\n")
    with open(store.path, "w") as fh:
        fh.write("{damaged")
    assert not store.is_trusted(code)


def test_autosave_is_offered_only_when_newer(tmp_path):
    doc = new_session(str(tmp_path / "s.grpo"), TrainConfig())
    assert recovery.newer_autosave(doc.path) is None
    doc.config = doc.config.replace(run={"seed": 77})
    recovery.write_autosave(doc)
    os.utime(os.path.join(doc.path, "session.json"), (1, 1))  # saved version is older
    restored = recovery.newer_autosave(doc.path)
    assert restored is not None and restored.config.run.seed == 77
    assert load_session(doc.path).config.run.seed == 0  # the saved file was not touched
    save_session(doc)
    recovery.discard_autosave(doc)
    assert recovery.newer_autosave(doc.path) is None


def test_crash_markers_name_sessions_of_dead_processes(tmp_path):
    doc = new_session(recovery.untitled_path(), TrainConfig())
    assert recovery.is_untitled(doc)
    recovery.mark_open(doc.path)
    assert recovery.crashed_sessions() == []  # our own process is alive
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(child.stdout)
    marker = recovery._marker(doc.path)
    with open(marker) as fh:
        record = json.load(fh)
    record["pid"] = dead_pid
    with open(marker, "w") as fh:
        json.dump(record, fh)
    assert recovery.crashed_sessions() == [doc.path]
    recovery.mark_closed(doc.path)
    assert recovery.crashed_sessions() == []
