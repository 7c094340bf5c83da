"""The Qt-free run history (session layer): metrics columns, resume truncation, bounded rollouts
paged back from events.jsonl, the advantage heat map, ETA and CSV export."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.events import EvalResult, LogMessage, RunFinished, RunStarted, StepMetrics
from grpo_desktop.session.history import RunHistory, replay
from grpo_desktop.session.rollouts import RolloutStore
from tests.support.fakes import fake_events, make_fake_train


def started(start_step: int = 0, total: int = 10) -> RunStarted:
    return RunStarted("r", {}, start_step, total, "cpu", "m")


def steps(n: int, total: int = 10, first: int = 1) -> list:
    return [e for s in range(first, first + n) for e in fake_events(s, total)]


def test_metrics_are_columns_with_nan_for_missing_values():
    h = replay([started(), *steps(3)])
    assert h.num_steps == 3 and h.last_step == 3
    assert list(h.steps) == [1, 2, 3]
    assert np.allclose(h.metric("kl"), [0.01, 0.02, 0.03])
    assert np.isnan(h.metric("no_such_metric")).all() and len(h.metric("no_such_metric")) == 3
    h.append(StepMetrics(4, 10, {"reward": None}, {}))  # a step lacking most metrics
    assert math.isnan(h.metric("kl")[-1]) and math.isnan(h.metric("reward")[-1])
    assert h.reward_functions() == ["accuracy", "format"]


def test_columns_grow_past_their_initial_capacity():
    h = replay([started(total=200)])
    for s in range(1, 201):
        h.append(StepMetrics(s, 200, {"reward": float(s)}, {}))
    assert h.num_steps == 200 and h.metric("reward")[-1] == 200.0
    assert np.array_equal(h.metric("reward"), np.arange(1, 201, dtype=float))


def test_a_resumed_run_supersedes_steps_after_its_start():
    h = replay([started(), *steps(5)])
    h.append(EvalResult(4, 0.5, 0.5, 8))
    h.append(started(start_step=3))  # resumed from the checkpoint of step 3
    assert h.num_steps == 3 and h.last_step == 3
    assert h.rollouts.steps == [1, 2, 3]
    assert h.evals == []
    for e in steps(2, first=4):
        h.append(e)
    assert list(h.steps) == [1, 2, 3, 4, 5]


def test_a_new_run_clears_the_history():
    h = replay([started(), *steps(2)])
    h.append(LogMessage(2, "info", "hint"))
    h.append(started())
    assert h.num_steps == 0 and h.logs == [] and h.rollouts.steps == []


def test_rollout_store_keeps_whole_steps_within_the_row_limit():
    store = RolloutStore(max_rows=20)
    for s in range(1, 6):
        dropped = store.add(s, [{"i": i} for i in range(8)])
        # 8 rows a step and 20 allowed: two whole steps stay (16 rows), a third would be 24.
        assert dropped == ([] if s <= 2 else [s - 2])
    assert store.steps_in_memory == [4, 5] and store.rows_in_memory == 16
    assert store.forgotten == 24 and store.steps == [1, 2, 3, 4, 5]
    assert store.get(1) is None  # no events file: forgotten steps are gone


def test_forgotten_steps_are_paged_back_from_events_jsonl(tmp_path):
    run_dir = tmp_path / "run"
    cfg = TrainConfig().replace(
        run={"max_steps": 6}, algorithm={"prompts_per_step": 2, "num_generations": 4}
    )
    h = RunHistory(max_rollout_rows=16, events_path=str(run_dir / "events.jsonl"))
    for event in make_fake_train()(cfg, TrainControl(), str(run_dir)):
        if event.type == "rollouts":
            h.rollouts.add(event.step, event.rows)
        else:
            h.append(event)
    assert h.rollouts.steps_in_memory == [5, 6]
    rows = h.rollouts.get(2)
    assert rows is not None and len(rows) == 8 and rows[0]["prompt"] == "What is 2 × 0?"
    assert h.rollouts.get(99) is None


def test_from_events_file_replays_a_run_with_bounded_memory(tmp_path):
    path = tmp_path / "events.jsonl"
    events = [started(total=4), *steps(4, total=4), RunFinished("completed", 4, "done")]
    text = "".join(json.dumps(e.to_dict()) + "\n" for e in events)
    path.write_text(text + '{"type": "step", "step": 5, "tot', encoding="utf-8")  # torn last line
    h = RunHistory.from_events_file(str(path), max_rollout_rows=8)
    assert h.num_steps == 4 and h.finished["status"] == "completed"
    assert h.rollouts.steps_in_memory == [4]
    assert h.rollouts.get(1)[0]["prompt"] == "What is 1 × 0?"


def test_superseded_steps_in_the_events_file_are_not_paged_back(tmp_path):
    path = tmp_path / "events.jsonl"
    first = [started(total=4), *steps(4, total=4)]
    resumed = [started(start_step=2, total=4), *steps(1, total=4, first=3)]
    path.write_text(
        "".join(json.dumps(e.to_dict()) + "\n" for e in first + resumed), encoding="utf-8"
    )
    store = RolloutStore(max_rows=8, events_path=str(path))
    assert store.get(4) is None  # logged before the resume at step 2, never redone
    assert store.get(3)[0]["prompt"] == "What is 3 × 0?"


def test_advantage_heatmap_rebins_every_step_onto_one_range():
    h = replay([started()])
    h.append(StepMetrics(1, 10, {}, {"edges": [-1.0, 0.0, 1.0], "counts": [1, 3]}))
    h.append(StepMetrics(2, 10, {}, {"edges": [-2.0, 0.0, 2.0], "counts": [2, 2]}))
    h.append(StepMetrics(3, 10, {}, {}))  # no histogram: no column
    steps_, half, grid = h.advantage_heatmap(bins=4)
    assert list(steps_) == [1, 2]
    # Centres are ±0.5 and ±1; the range is ±1 widened by a quarter bin: ±1.25, bins 0.625 wide.
    assert half == pytest.approx(1.25)
    assert grid.shape == (2, 4)
    assert np.allclose(grid.sum(axis=1), 1.0)  # shares of each step's rollouts
    assert np.allclose(grid[0], [0, 0.25, 0.75, 0])  # -0.5 -> bin 1, +0.5 -> bin 2
    assert np.allclose(grid[1], [0.5, 0, 0, 0.5])  # -1 -> bin 0, +1 -> bin 3


def test_median_step_time_counts_the_steps_own_time_only():
    """The engine's step_time, not the wall time between steps (evaluations, checkpoints)."""
    h = replay([started(total=20)])
    assert h.median_step_time() is None
    for s in range(1, 13):  # 0.6 … 1.7 s a step, 5 s of wall time each
        h.append(StepMetrics(s, 20, {"step_time": 0.5 + 0.1 * s}, {}, elapsed=5.0 * s))
    assert h.median_step_time() == (pytest.approx(1.25), 10)  # steps 3 … 12
    assert h.median_step_time(window=1) == (pytest.approx(1.7), 1)
    assert h.seconds_per_step() == pytest.approx(5.0)


def test_eta_uses_wall_time_per_step():
    h = replay([started(total=10)])
    for s in range(1, 5):
        h.append(StepMetrics(s, 10, {}, {}, elapsed=2.0 * s))
    assert h.seconds_per_step() == pytest.approx(2.0)
    assert h.eta_seconds() == pytest.approx(12.0)  # 6 steps left at 2 s


def test_csv_export_has_one_row_per_step(tmp_path):
    h = replay([started(), *steps(3)])
    h.append(EvalResult(3, 0.25, 0.5, 8))
    path = tmp_path / "history.csv"
    h.write_csv(str(path))
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    assert float(rows[1]["kl"]) == pytest.approx(0.02)
    assert rows[2]["eval_accuracy"] == "0.25" and rows[0]["eval_accuracy"] == ""
    header = list(rows[0])
    assert header[:4] == ["step", "elapsed", "reward", "reward_std"]
