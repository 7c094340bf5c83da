"""Crash safety: a training process killed with SIGKILL at random moments always leaves a session
that reopens, and resuming loses at most the steps since the last checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.events import read_events
from grpo_desktop.engine.runs.checkpoint import list_checkpoints
from grpo_desktop.session.document import load_session, new_session
from grpo_desktop.session.history import RunHistory

CHECKPOINT_EVERY = 2


def _config(model_dir: str, lora: bool) -> TrainConfig:
    return TrainConfig().replace(
        model={"name_or_path": model_dir},
        lora={"enabled": lora},
        data={"eval_size": 2, "arithmetic_size": 100},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 8,
                   "learning_rate": 1e-3},
        run={"max_steps": 400, "checkpoint_every": CHECKPOINT_EVERY, "eval_every": 3},
    )  # fmt: skip


def _train(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "grpo_desktop", "train", *args, "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )


def _logged_steps(events: str) -> int:
    if not os.path.isfile(events):
        return 0
    with open(events) as fh:
        return fh.read().count('"type": "step"')


def _kill_when_training(proc: subprocess.Popen, events: str, delay: float) -> None:
    """SIGKILL `delay` seconds after this process logged its first step (or after 120 s)."""
    before = _logged_steps(events)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if _logged_steps(events) > before:
            break
        time.sleep(0.05)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def _kill_and_check(
    tmp_path, model_dir: str, repetitions: int, seed: int, lora: bool
) -> list[dict]:
    rng = random.Random(seed)
    doc = new_session(str(tmp_path / "crash.grpo"), _config(model_dir, lora))
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(doc.config.to_json())
    outcomes = []
    for rep in range(repetitions):
        args = [str(cfg_file), "--out", doc.run_dir] if rep == 0 else ["--resume", doc.run_dir]
        proc = _train(args)
        _kill_when_training(proc, doc.events_path, rng.uniform(0.0, 2.5))
        assert proc.returncode == -signal.SIGKILL
        # The session reopens and its history reads back (a torn last line is tolerated).
        reopened = load_session(doc.path)
        history = RunHistory.from_events_file(reopened.events_path)
        logged = history.last_step
        saved = list_checkpoints(doc.run_dir)
        ckpt_step = saved[-1][0] if saved else 0
        lost = logged - ckpt_step
        assert 0 <= lost <= CHECKPOINT_EVERY, (logged, ckpt_step)
        outcomes.append({"logged": logged, "checkpoint": ckpt_step, "lost": lost})
    # A final resume continues from the last checkpoint and the log holds each step once.
    final_target = outcomes[-1]["checkpoint"] + 2
    done = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "train", "--resume", doc.run_dir,
         "--steps", str(final_target), "--quiet"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [e.step for e in read_events(doc.events_path) if e.type == "step"]
    assert steps == list(range(1, final_target + 1))
    return outcomes


@pytest.mark.timeout(600)
def test_sigkill_during_training_never_loses_the_session(tmp_path, micro_model_dir):
    # Full fine-tuning (model and optimizer files in each checkpoint): a process that trains
    # without LoRA never imports peft, 2-3 s of CPU less per start. LoRA: the slow test below.
    outcomes = _kill_and_check(tmp_path, micro_model_dir, repetitions=3, seed=1, lora=False)
    assert len(outcomes) == 3
    print("kill outcomes:", outcomes)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigkill_many_times(tmp_path, micro_model_dir):
    outcomes = _kill_and_check(tmp_path, micro_model_dir, repetitions=12, seed=7, lora=True)
    print("kill outcomes:", outcomes)
