"""bench/demo_race.py through its real command line: one step a side on the demo (ours, then the
TRL project the app exports from the same settings), both scored by `grpo-desktop eval`, and
each of our checkpoints too: the seconds ours took to reach TRL's final accuracy; ours runs again
after TRL, and the per-step ratio is against the mean of our two runs.
Slow: run with `python -m pytest -m slow tests/bench/test_demo_race.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import BENCH

pytest.importorskip("trl")


@pytest.mark.slow  # about 45 s: a TRL run and four processes
@pytest.mark.timeout(600)
def test_one_step_a_side_prints_both_sides_and_a_summary(tmp_path):
    out = tmp_path / "race.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(BENCH, "demo_race.py"), "--seeds", "3", "--steps", "1",
         "--n", "4", "--json", str(out), "--keep", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=580, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 1 and summary["seeds"] == [3]
    (run,) = json.loads(out.read_text())["runs"]
    for side in ("ours", "trl"):
        assert run[side]["steps"] == 1 and run[side]["train_s"] > 0
        assert run[side]["accuracy"] in (0.0, 0.25, 0.5, 0.75, 1.0)  # 4 problems
    # bracketed: ours ran again after TRL (times only), and the ratio is against the mean of both
    again = run["ours_again"]
    assert again["steps"] == 1 and again["train_s"] > 0 and "accuracy" not in again
    ours_per_step = (run["ours"]["s_per_step"] + again["s_per_step"]) / 2
    assert summary["bracketed"] is True
    assert summary["per_step_ratio"] == [run["trl"]["s_per_step"] / ours_per_step]
    # our accuracy along the way: the one checkpoint, its training seconds, whether it reached
    # TRL's final accuracy and how soon against TRL's whole run
    (point,) = run["ours"]["curve"]
    assert point["step"] == 1 and point["accuracy"] == run["ours"]["accuracy"]
    assert point["train_s"] == pytest.approx(run["ours"]["train_s"])
    if point["accuracy"] >= run["trl"]["accuracy"]:
        assert run["ours_reach_s"] == pytest.approx(point["train_s"])
        assert run["reach_ratio"] == pytest.approx(point["train_s"] / run["trl"]["train_s"])
    else:
        assert run["ours_reach_s"] is None and run["reach_ratio"] is None
    assert summary["reach_ratio"] == [run["reach_ratio"]]
    # both trained with the seed given, and the TRL side is the exported project's own run
    for name in ("ours-3", "ours-3-again"):
        with open(tmp_path / "runs" / name / "config.json", encoding="utf-8") as fh:
            assert json.load(fh)["run"]["seed"] == 3
    state = json.loads((tmp_path / "runs" / "trl-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert os.path.isfile(tmp_path / "runs" / "trl-project" / "train.py")
