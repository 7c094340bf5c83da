"""A full disk while training: the run stops with "The disk is full
(… free at …): free some space or choose another folder; the last checkpoint (step K) is
intact", exit 2, no temporary file or folder left, and once there is room again resuming works.
Before the fix: "internal error: RuntimeError: [enforce fail at inline_container.cc:672]", the
temporary checkpoint folder left behind for good, and resuming on the full disk failed with
Errno 28 leaving a 0-byte temporary file.

Tried for real on a 2 MB tmpfs mounted in a private mount namespace (`unshare -m`, or `-rm`
without root): the command line, and the window (this file's `..._inner` test, run inside that
namespace). Where mounting is not permitted those two skip and say why. The ENOSPC tests below
them need no mount: the kernel's /dev/full answers every write with ENOSPC."""

from __future__ import annotations

import builtins
import json
import os
import shutil
import subprocess
import sys

import pytest

from grpo_desktop.engine.events import read_events
from grpo_desktop.engine.runs import checkpoint
from grpo_desktop.engine.runs.layout import checkpoint_problem, list_checkpoints
from tests.support.hazards import (
    ROOT,
    mount_problem,
    small_config,
    temporary_files,
    train_in_process,
    unshare,
)

SMALL_DISK_ENV = "GRPO_TEST_SMALL_DISK"
FULL = "The disk is full ("
ADVICE = "free some space or choose another folder; the last checkpoint (step 1) is intact."


# Runs inside the private mount namespace: mount, train, fill the disk, resume, free, resume.
DRIVER = r"""
import json, os, subprocess, sys
disk, model, out_json = sys.argv[1:4]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", disk], check=True)
run = os.path.join(disk, "run")
env = dict(os.environ)

def cli(*args):
    p = subprocess.run([sys.executable, "-m", "grpo_desktop", *args], capture_output=True,
                       text=True, env=env)
    return {"code": p.returncode, "err": p.stderr}

def files():
    return sorted(os.path.relpath(os.path.join(d, n), run)
                  for d, ds, fs in os.walk(run) for n in ds + fs)

def fill(name, leave):
    path = os.path.join(disk, name)
    with open(path, "wb", buffering=0) as fh:
        try:
            while fh.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    os.truncate(path, max(0, os.path.getsize(path) - max(0, leave - free)))

from grpo_desktop.engine.config import load_config
from grpo_desktop.engine.grpo.trainer import train

last = list(train(load_config(sys.argv[4]), run_dir=run))[-1]  # one step, one checkpoint
result = {"first": {"code": 0 if last.status == "completed" else 1, "err": last.message}}
ckpt = os.path.join(run, "checkpoints", "step-00000001")
result["checkpoint_bytes"] = size = sum(
    os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ckpt) for f in fs)
fill("filler", size // 2)
result["full"] = cli("train", "--resume", run, "--steps", "3", "--quiet")
result["files_after_full"] = files()
fill("filler2", 0)
result["still_full"] = cli("train", "--resume", run, "--steps", "3", "--quiet")
result["files_after_still_full"] = files()
os.remove(os.path.join(disk, "filler"))
os.remove(os.path.join(disk, "filler2"))
result["freed"] = cli("train", "--resume", run, "--steps", "3", "--quiet")
result["files_after_freed"] = files()
with open(os.path.join(run, "events.jsonl")) as fh:
    result["steps"] = [json.loads(l)["step"] for l in fh if '"type": "step"' in l]
with open(out_json, "w") as fh:
    json.dump(result, fh)
"""


def test_a_full_disk_on_the_command_line(tmp_path, micro_model_dir):
    problem = mount_problem(tmp_path)
    if problem:
        pytest.skip(problem)
    disk, out = tmp_path / "small-disk", tmp_path / "result.json"
    disk.mkdir()
    config = tmp_path / "settings.json"
    config.write_text(small_config(micro_model_dir, steps=1).to_json())
    env = dict(os.environ, PYTHONPATH=ROOT)
    args = [str(disk), micro_model_dir, str(out), str(config)]
    subprocess.run(
        [*unshare(), sys.executable, "-c", DRIVER, *args], check=True, env=env, timeout=600
    )
    r = json.loads(out.read_text())
    assert r["first"]["code"] == 0, r["first"]["err"]
    for name in ("full", "still_full"):  # while checkpointing step 2; then already on truncating
        code, err = r[name]["code"], r[name]["err"]
        assert code == 2, err
        assert FULL in err and f"free at {disk}/run" in err and ADVICE in err, err
        assert "Traceback" not in err and "internal error" not in err, err
    for name in ("files_after_full", "files_after_still_full"):
        assert not [f for f in r[name] if os.path.basename(f).startswith(".")], r[name]
        assert "checkpoints/step-00000001/trainer_state.json" in r[name]
    assert r["freed"]["code"] == 0, r["freed"]["err"]
    assert r["steps"] == [1, 2, 3]  # step 2 was redone from the checkpoint, logged once
    assert not [f for f in r["files_after_freed"] if os.path.basename(f).startswith(".")]


def test_a_full_disk_in_the_window(tmp_path):
    problem = mount_problem(tmp_path)
    if problem:
        pytest.skip(problem)
    disk = tmp_path / "small-disk"
    disk.mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT, QT_QPA_PLATFORM="offscreen")
    env[SMALL_DISK_ENV] = str(disk)
    here = os.path.relpath(__file__, ROOT)
    inner = f"{here}::test_a_full_disk_in_the_window_inner"
    script = (
        f"mount -t tmpfs -o size=2m tmpfs {disk} && "
        f"exec {sys.executable} -m pytest -q -n 0 -p no:cacheprovider -p no:randomly {inner}"
    )
    out = subprocess.run(
        [*unshare(), "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout, out.stdout[-2000:]


def _fill(disk: str, name: str, leave: int) -> str:
    path = os.path.join(disk, name)
    with open(path, "wb", buffering=0) as fh:
        try:
            while fh.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    free = shutil.disk_usage(disk).free
    os.truncate(path, max(0, os.path.getsize(path) - max(0, leave - free)))
    return path


def test_a_full_disk_in_the_window_inner(qtbot, show_window, tmp_path, micro_model_dir):
    """Inside test_a_full_disk_in_the_window's namespace, on its 2 MB disk: Start trains until the
    disk fills at the step-2 checkpoint; the window says so; Continue after freeing space works."""
    disk = os.environ.get(SMALL_DISK_ENV)
    if not disk:
        pytest.skip("runs inside test_a_full_disk_in_the_window's private small filesystem")
    from PySide6.QtCore import QSettings

    from grpo_desktop.session.document import new_session
    from grpo_desktop.ui.main_window import MainWindow
    from grpo_desktop.ui.run.worker import FAILED, FINISHED

    cfg = small_config(micro_model_dir, steps=3)
    size = _checkpoint_size(cfg, str(tmp_path / "measure"))
    doc = new_session(os.path.join(disk, "s.grpo"), cfg)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(cfg, settings=settings, probe_device=False))
    assert w.session.open_session(doc.path)
    filler = _fill(disk, "filler", size + size // 2)  # room for one checkpoint, not two
    assert w.start_run()
    qtbot.waitUntil(lambda: w.model.state == FAILED, timeout=120_000)
    text = w.message_bar.message()
    assert FULL in text and ADVICE in text, text
    assert temporary_files(doc.run_dir) == []
    assert [s for s, _ in list_checkpoints(doc.run_dir)] == [1]
    os.remove(filler)
    assert w.start_run()  # Continue: from the intact checkpoint at step 1
    qtbot.waitUntil(lambda: w.model.state == FINISHED, timeout=120_000)
    steps = [e.step for e in read_events(doc.events_path) if e.type == "step"]
    assert steps == [1, 2, 3]


def _checkpoint_size(cfg, run: str) -> int:
    train_in_process(cfg.replace(run={"max_steps": 1}), run)
    ckpt = list_checkpoints(run)[-1][1]
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ckpt) for f in fs)


# ---------------------------------------------------------------- ENOSPC from /dev/full


needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


@needs_dev_full
def test_enospc_while_writing_a_checkpoint_leaves_nothing_behind(
    tmp_path, monkeypatch, micro_model_dir
):
    """The second checkpoint's optimizer.pt is written to /dev/full (the kernel's ENOSPC, the
    real write path through torch.save); nothing else is changed."""
    opened = []

    def open_full_second_time(path, mode="r", *args, **kwargs):
        if str(path).endswith("optimizer.pt") and "w" in mode:
            opened.append(path)
            if len(opened) == 2:
                return builtins.open("/dev/full", mode, *args, **kwargs)
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "open", open_full_second_time, raising=False)
    run = str(tmp_path / "run")
    cfg = small_config(micro_model_dir, steps=3)
    events = train_in_process(cfg, run)
    last = events[-1]
    assert last.type == "run_finished" and last.status == "failed" and last.error is None
    assert last.message.startswith(FULL) and f"free at {run}" in last.message, last.message
    assert last.message.endswith(ADVICE), last.message
    assert temporary_files(run) == []
    assert [s for s, _ in list_checkpoints(run)] == [1]
    assert checkpoint_problem(list_checkpoints(run)[0][1]) is None  # step 1 is intact
    monkeypatch.undo()
    resumed = train_in_process(cfg, run, resume=True)
    assert next(e for e in resumed if e.type == "run_started").start_step == 1
    assert resumed[-1].status == "completed"
    assert [e.step for e in read_events(os.path.join(run, "events.jsonl")) if e.type == "step"] == [
        1,
        2,
        3,
    ]


@needs_dev_full
def test_enospc_while_logging_events_ends_the_run_with_the_message(tmp_path, micro_model_dir):
    """The run's events.jsonl is /dev/full: the first event cannot be written."""
    run = tmp_path / "run"
    run.mkdir()
    os.symlink("/dev/full", run / "events.jsonl")
    events = train_in_process(small_config(micro_model_dir, steps=2), str(run))
    last = events[-1]
    assert last.type == "run_finished" and last.status == "failed", last
    assert last.message.startswith(FULL) and "there is no checkpoint yet" in last.message
    assert temporary_files(str(run)) == []


@needs_dev_full
def test_a_run_that_fails_ends_cleanly_when_not_even_its_last_event_can_be_logged(
    tmp_path, micro_model_dir
):
    """Settings that fail validation end the run; writing that RunFinished hits ENOSPC too (the
    log's first write): the generator still ends with the event, nothing escapes."""
    run = tmp_path / "run"
    run.mkdir()
    os.symlink("/dev/full", run / "events.jsonl")
    cfg = small_config(micro_model_dir).replace(algorithm={"num_generations": 1})
    events = train_in_process(cfg, str(run))
    assert [e.type for e in events] == ["run_finished"] and events[0].status == "failed"
    assert "settings need fixing" in events[0].message
