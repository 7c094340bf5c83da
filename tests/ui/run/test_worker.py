"""The training runner's state machine and thread lifecycle, driven by fake train functions."""

from __future__ import annotations

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.run.worker import (
    FAILED,
    FINISHED,
    PAUSED,
    RUNNING,
    STOPPED,
    STOPPING,
    TrainingRunner,
    live_threads,
)
from tests.support.fakes import make_fake_train


def config(steps: int = 3):
    return demo_config().replace(run={"max_steps": steps})


def run_to_end(qtbot, runner, timeout=10_000):
    qtbot.waitUntil(lambda: not runner.active, timeout=timeout)


def test_a_run_goes_starting_running_finished(qtbot):
    runner = TrainingRunner(make_fake_train())
    states, kinds = [], []
    runner.state_changed.connect(states.append)
    runner.event_received.connect(lambda e: kinds.append(e.type))
    runner.start(config(3))
    run_to_end(qtbot, runner)
    assert states == ["starting", RUNNING, FINISHED]
    assert kinds.count("step") == 3 and kinds[-1] == "run_finished"
    assert live_threads() == []
    with pytest.raises(RuntimeError):
        runner.start(config())
        runner.start(config())
    run_to_end(qtbot, runner)


def test_pause_is_confirmed_when_the_engine_waits_and_stop_wakes_it(qtbot):
    runner = TrainingRunner(make_fake_train(delay=0.05))
    steps = []
    runner.event_received.connect(lambda e: steps.append(e.step) if e.type == "step" else None)
    runner.start(config(1000))
    qtbot.waitUntil(lambda: len(steps) >= 2, timeout=10_000)
    with qtbot.waitSignal(runner.pause_reached, timeout=5_000):
        runner.pause()
    assert runner.state == PAUSED
    held = len(steps)
    qtbot.wait(300)
    assert len(steps) == held  # nothing happens while paused
    runner.resume()
    qtbot.waitUntil(lambda: len(steps) > held, timeout=5_000)
    runner.pause()
    runner.stop()  # stopping a paused run wakes it up
    assert runner.state == STOPPING
    run_to_end(qtbot, runner)
    assert runner.state == STOPPED


def test_an_exception_in_the_train_function_ends_as_failed(qtbot):
    def broken(config, control, run_dir=None, resume=False):
        yield from ()
        raise ValueError("boom")

    runner = TrainingRunner(broken)
    finished = []
    runner.event_received.connect(
        lambda e: finished.append(e) if e.type == "run_finished" else None
    )
    runner.start(config())
    run_to_end(qtbot, runner)
    assert runner.state == FAILED
    assert "ValueError: boom" in finished[0].message and "Traceback" in finished[0].error


def test_a_failed_run_reported_by_the_engine_ends_as_failed(qtbot):
    runner = TrainingRunner(make_fake_train(fail_message="Model folder not found: /nope."))
    runner.start(config())
    run_to_end(qtbot, runner)
    assert runner.state == FAILED
