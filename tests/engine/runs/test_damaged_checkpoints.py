"""Damaged checkpoints: a truncated optimizer.pt or model.safetensors,
a damaged trainer_state.json or a pickle that weights_only loading refuses. Resuming names the
checkpoint folder and file, skips it for the newest intact checkpoint (the log says which and
why) and sets it aside as step-N.damaged; with no intact one left it stops with a message, exit
2. Before the fix: "internal error", a traceback, torch's advice to pass weights_only=False."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from grpo_desktop.engine.events import read_events
from grpo_desktop.session.history import RunHistory
from grpo_desktop.session.run_state import describe, run_state
from tests.support.hazards import ROOT, cli, small_config, train_in_process


@pytest.fixture(scope="module")
def runs(tmp_path_factory, micro_model_dir):
    """Runs of 3 steps with a checkpoint after each: full weights, and a LoRA adapter."""
    root = tmp_path_factory.mktemp("damaged")
    made = {}
    for kind, lora in (("full", False), ("lora", True)):
        made[kind] = str(root / kind)
        train_in_process(small_config(micro_model_dir, steps=3, lora=lora), made[kind])
    return made, micro_model_dir


def _copy(runs, tmp_path, kind="full") -> str:
    made, _ = runs
    return shutil.copytree(made[kind], str(tmp_path / "run"))


def _truncate(path: str) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)


def _refused_pickle(path: str) -> None:
    """A state dict holding a Python object weights_only loading refuses (a decimal.Decimal)."""
    code = f"import decimal, torch; torch.save({{'state': decimal.Decimal(1)}}, {path!r})"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=ROOT))


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


DAMAGE = {
    "truncated optimizer.pt": ("optimizer.pt", _truncate, "cut short"),
    "truncated model.safetensors": ("model/model.safetensors", _truncate, "cut short"),
    "truncated scheduler.pt": ("scheduler.pt", _truncate, "cut short"),
    "refused pickle": ("optimizer.pt", _refused_pickle, "Python objects other than tensors"),
    "damaged trainer_state.json": (
        "trainer_state.json",
        lambda p: _write(p, '{"step": 3, "se'),  # cut off mid-write
        "not valid JSON",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_resuming_skips_a_damaged_checkpoint_for_the_newest_intact_one(runs, tmp_path, case):
    rel, damage, why = DAMAGE[case]
    run = _copy(runs, tmp_path)
    newest = os.path.join(run, "checkpoints", "step-00000003")
    damage(os.path.join(newest, rel))
    cfg = small_config(runs[1], steps=4)
    events = train_in_process(cfg, run, resume=True)
    started = next(e for e in events if e.type == "run_started")
    assert started.start_step == 2  # the newest intact checkpoint
    skipped = [e.message for e in events if e.type == "log" and "Skipped" in e.message]
    assert len(skipped) == 1
    assert newest in skipped[0] and rel in skipped[0] and why in skipped[0]
    assert "step 2" in skipped[0] and "step-00000003.damaged" in skipped[0]
    assert events[-1].type == "run_finished" and events[-1].status == "completed"
    names = sorted(os.listdir(os.path.join(run, "checkpoints")))
    assert names == ["step-00000002", "step-00000003", "step-00000003.damaged", "step-00000004"]
    logged = [e.step for e in read_events(os.path.join(run, "events.jsonl")) if e.type == "step"]
    assert logged == [1, 2, 3, 4]  # each step once: step 3 was trained again


def test_a_truncated_lora_adapter_is_skipped_too(runs, tmp_path):
    run = _copy(runs, tmp_path, "lora")
    adapter = os.path.join(run, "checkpoints", "step-00000003", "adapter")
    _truncate(os.path.join(adapter, "adapter_model.safetensors"))
    events = train_in_process(small_config(runs[1], steps=4, lora=True), run, resume=True)
    assert next(e for e in events if e.type == "run_started").start_step == 2
    assert any("adapter/adapter_model.safetensors" in e.message for e in events if e.type == "log")
    assert events[-1].status == "completed"


def test_with_no_intact_checkpoint_resuming_says_so_and_moves_nothing(runs, tmp_path):
    run = _copy(runs, tmp_path)
    for step in (1, 2, 3):
        _truncate(os.path.join(run, "checkpoints", f"step-{step:08d}", "optimizer.pt"))
    code, err = cli("train", "--resume", run, "--steps", "4", "--quiet")
    assert code == 2, err
    assert "No checkpoint of this run can be resumed from" in err and "Traceback" not in err
    for step in (1, 2, 3):
        assert f"step-{step:08d} is damaged: optimizer.pt" in err
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == [
        "step-00000001",
        "step-00000002",
        "step-00000003",
    ]


def test_the_command_line_resumes_past_a_refused_pickle_and_says_why(runs, tmp_path):
    run = _copy(runs, tmp_path)
    _refused_pickle(os.path.join(run, "checkpoints", "step-00000003", "optimizer.pt"))
    code, err = cli("train", "--resume", run, "--steps", "4")  # (--quiet hides warnings)
    assert code == 0, err
    assert "warning: Skipped the newer checkpoint" in err and "optimizer.pt" in err
    assert "weights_only=False" not in err and "Traceback" not in err  # no advice to unpickle


def test_the_run_state_counts_only_intact_checkpoints(runs, tmp_path):
    run = _copy(runs, tmp_path)
    _truncate(os.path.join(run, "checkpoints", "step-00000003", "model", "model.safetensors"))
    state = run_state(RunHistory.from_events_file(os.path.join(run, "events.jsonl")), run)
    assert (state.last_step, state.checkpoint_step) == (3, 2)
    text = describe(state, 4)
    assert "step 3 (model/model.safetensors: it is cut short" in text
    assert "picks up from the checkpoint at step 2" in text
