"""Events: JSON-safe (no NaN, no tensors), round trip, torn last line tolerated."""

from __future__ import annotations

import json
import math

import pytest

from grpo_desktop.engine.events import (
    EvalResult,
    RunFinished,
    StepMetrics,
    event_from_dict,
    read_events,
)


def test_nan_becomes_null_and_round_trips():
    ev = StepMetrics(3, 10, {"reward": math.nan, "loss": 0.5}, {"edges": [0.0, 1.0], "counts": [2]})
    line = ev.to_json()
    data = json.loads(line)
    assert data["type"] == "step" and data["metrics"]["reward"] is None
    back = event_from_dict(data)
    assert back.metrics == {"reward": None, "loss": 0.5} and back.step == 3


def test_read_events_tolerates_a_torn_last_line(tmp_path):
    path = tmp_path / "events.jsonl"
    good = [EvalResult(0, 0.25, 0.5, 8), RunFinished("completed", 1)]
    path.write_text("\n".join(e.to_json() for e in good) + '\n{"type": "step", "ste')
    events = read_events(str(path))
    assert [e.type for e in events] == ["eval", "run_finished"]


def test_read_events_rejects_damage_in_the_middle(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("garbage\n" + RunFinished("completed", 1).to_json() + "\n")
    with pytest.raises(ValueError, match="line 1"):
        read_events(str(path))


def test_truncate_keeps_each_step_once(tmp_path):
    from grpo_desktop.engine.events import CheckpointSaved, RunStarted, truncate_events_after

    path = tmp_path / "events.jsonl"
    events = [RunStarted("a", {}, 0, 5, "cpu", "m")]
    for step in (1, 2, 3):
        events.append(StepMetrics(step, 5, {"loss": float(step)}))
    events.append(CheckpointSaved(2, "checkpoints/step-00000002"))
    path.write_text("\n".join(e.to_json() for e in events) + '\n{"type": "step", "st')
    assert truncate_events_after(str(path), 2) == 4  # run_started, steps 1-2, checkpoint 2
    kept = read_events(str(path))
    assert [e.type for e in kept] == ["run_started", "step", "step", "checkpoint"]
    assert truncate_events_after(str(path), 0) == 0 and path.read_text() == ""
