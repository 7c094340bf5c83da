"""A TRL GRPOTrainer output_dir read as the app's events (session/trl_run.py), on real TRL files.

tests/fixtures/trl_run is a real 3-step TRL 1.16 run reduced to what the app reads (its README
says how it was made: tests/support/trl_tiny_run.py). The live-follow tests copy it into a fresh folder
file by file, in the order TRL writes them, and poll in between; the damaged-file tests cut real
files short. The slow test runs TRL itself and reads what it wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from grpo_desktop.session.history import RunHistory, replay
from grpo_desktop.session.trl_completions import (
    fit_weights,
    message_text,
    prompt_text,
    read_completions,
)
from grpo_desktop.session.trl_run import STALE_S, TrlRunReader, is_trl_run
from grpo_desktop.session.trl_state import read_state, step_metrics
from tests.support.paths import FIXTURES, SUPPORT

FIXTURE = os.path.join(FIXTURES, "trl_run")
COMPLETIONS = os.path.join(FIXTURE, "completions")
STEPS, ROWS, G = 3, 6, 3  # the fixture: 3 steps, 6 completions a step, groups of 3


def _types(events) -> list[str]:
    return [e.type for e in events]


def _copy(name: str, dest: str) -> None:
    target = os.path.join(dest, name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(os.path.join(FIXTURE, name), target)


def _snapshot(folder: str) -> dict[str, tuple[int, int]]:
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            st = os.stat(os.path.join(root, f))
            out[os.path.join(root, f)] = (st.st_size, st.st_mtime_ns)
    return out


def test_the_fixture_reads_as_every_step_rollout_and_the_end():
    assert is_trl_run(FIXTURE)
    before = _snapshot(FIXTURE)
    reader = TrlRunReader(FIXTURE)
    events = reader.poll()
    assert _snapshot(FIXTURE) == before  # read-only
    types = _types(events)
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("step") == STEPS and types.count("rollouts") == STEPS
    history = replay(events)
    assert history.steps.tolist() == [1.0, 2.0, 3.0]
    assert history.total_steps == STEPS
    # The plotted values are TRL's own, from the top-level trainer_state.json.
    logged = step_metrics(read_state(os.path.join(FIXTURE, "trainer_state.json")))
    for name in ("reward", "reward_std", "loss", "kl", "entropy", "completions/mean_length"):
        assert history.metric(name).tolist() == [logged[s][name] for s in (1, 2, 3)]
    assert sorted(history.reward_functions()) == ["digits", "tagged"]
    # elapsed is the sum of TRL's step_time
    times = [logged[s]["step_time"] for s in (1, 2, 3)]
    assert history.metric("elapsed")[-1] == pytest.approx(sum(times))
    assert history.finished["status"] == "completed"
    assert reader.poll() == []  # nothing changed: nothing new


def test_rollout_rows_are_the_parquet_rows_grouped_by_prompt():
    path = os.path.join(COMPLETIONS, "completions_00002.parquet")
    raw = pq.read_table(path).to_pylist()
    step, prompts, rows = read_completions(path, {"digits", "tagged"})
    assert step == 2 and len(rows) == ROWS == len(raw)
    assert len(prompts) == ROWS // G  # each prompt's G completions sit together
    assert [r["group"] for r in rows] == [0, 0, 0, 1, 1, 1]
    for row, rec in zip(rows, raw, strict=True):
        assert row["completion"] == rec["completion"][0]["content"]
        assert row["advantage"] == rec["advantage"]
        parts = {k: rec[k] for k in ("digits", "tagged")}
        assert row["rewards"] == parts
        assert row["reward"] == pytest.approx(rec["digits"] + rec["tagged"])
    # a conversational prompt reads question first (as the app's own runs show it), then the
    # system prompt
    assert prompts[0] == "What is 5+5?\n\nsystem: Answer with a number."
    # advantages of a group sum to ~0 (TRL's group-normalised advantages): the grouping is right
    for g in range(len(prompts)):
        assert abs(sum(r["advantage"] for r in rows if r["group"] == g)) < 1e-5


def test_a_part_that_could_not_score_is_none_and_the_total_the_rest():
    # TRL writes a reward function's None as NaN; hand-made row: digits 0.5, tagged NaN.
    import pyarrow as pa

    table = pa.table(
        {
            "step": [4, 4],
            "prompt": ["p", "p"],
            "completion": ["a1", ""],
            "digits": [0.5, float("nan")],
            "tagged": [1.0, float("nan")],
            "answer": ["2", "2"],
            "extracted": [1.0, None],  # (the exported projects log the answer the checker read)
            "advantage": [0.7, -0.7],
        }
    )
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"c-{os.getpid()}.parquet")
    pq.write_table(table, path)
    try:
        _, _, rows = read_completions(path, None)  # no log history yet: float columns = rewards
    finally:
        os.remove(path)
    assert rows[0]["rewards"] == {"digits": 0.5, "tagged": 1.0} and rows[0]["reward"] == 1.5
    assert rows[1]["rewards"] == {"digits": None, "tagged": None} and rows[1]["reward"] is None
    assert rows[0]["answer"] == "2"  # an answer column is the reference answer, not a reward
    assert rows[0]["extracted"] == "1.0" and rows[1]["extracted"] is None


def test_message_text():
    assert message_text("plain") == "plain" == prompt_text("plain")
    assert message_text([{"role": "assistant", "content": "42"}]) == "42"
    two = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    assert message_text(two) == "system: S\nuser: Q"
    assert prompt_text(two) == "Q\n\nsystem: S"
    assert prompt_text([{"role": "user", "content": "Q"}]) == "Q"


def test_live_follow_gives_only_what_is_new(tmp_path):
    run = str(tmp_path / "out")
    os.makedirs(run)
    reader = TrlRunReader(run)
    assert _types(reader.poll()) == ["run_started"]  # an empty folder: nothing yet
    # TRL logs steps 1 and 2 (their parquet files), then saves checkpoint-2.
    _copy("completions/completions_00001.parquet", run)
    _copy("completions/completions_00002.parquet", run)
    assert is_trl_run(run)
    assert _types(reader.poll()) == ["rollouts", "rollouts"]
    _copy("checkpoint-2/trainer_state.json", run)
    events = reader.poll()
    assert _types(events) == ["step", "step"] and [e.step for e in events] == [1, 2]
    # The step's advantage histogram comes from its completions, read before.
    assert sum(events[1].advantage_hist["counts"]) == ROWS
    _copy("completions/completions_00003.parquet", run)
    assert [(e.type, e.step) for e in reader.poll()] == [("rollouts", 3)]
    assert reader.poll() == []
    _copy("checkpoint-3/trainer_state.json", run)
    assert [(e.type, e.step) for e in reader.poll() if e.type != "alert"] == [("step", 3)]
    _copy("trainer_state.json", run)  # save_state() at the end: the summary entry
    assert _types(reader.poll()) == ["run_finished"]
    assert reader.poll() == []


def test_a_parquet_being_written_is_skipped_then_read(tmp_path):
    run = str(tmp_path / "out")
    _copy("checkpoint-2/trainer_state.json", run)
    _copy("completions/completions_00001.parquet", run)
    whole = Path(COMPLETIONS, "completions_00002.parquet").read_bytes()
    half = os.path.join(run, "completions", "completions_00002.parquet")
    with open(half, "wb") as fh:
        fh.write(whole[: len(whole) // 2])
    reader = TrlRunReader(run)
    events = reader.poll()
    assert [(e.type, e.step) for e in events if e.type == "rollouts"] == [("rollouts", 1)]
    assert "log" not in _types(events)  # fresh: maybe still being written, no warning yet
    with open(half, "wb") as fh:
        fh.write(whole)
    assert [(e.type, e.step) for e in reader.poll()] == [("rollouts", 2)]


def test_a_file_that_stays_damaged_is_reported_once(tmp_path):
    run = str(tmp_path / "out")
    _copy("checkpoint-2/trainer_state.json", run)
    _copy("completions/completions_00001.parquet", run)
    broken = os.path.join(run, "completions", "completions_00002.parquet")
    with open(broken, "wb") as fh:
        fh.write(b"PAR1 not really")
    old = time.time() - STALE_S - 5
    os.utime(broken, (old, old))  # unchanged for a while: damaged, not being written
    reader = TrlRunReader(run)
    warnings = [e for e in reader.poll() if e.type == "log"]
    assert len(warnings) == 1 and warnings[0].level == "warning"
    assert "completions_00002.parquet" in warnings[0].message
    assert "cannot be read" in warnings[0].message
    assert reader.problems() == [broken]
    assert [e for e in reader.poll() if e.type == "log"] == []  # said once


def test_a_truncated_newest_state_falls_back_to_the_older_checkpoint(tmp_path):
    run = str(tmp_path / "out")
    _copy("checkpoint-2/trainer_state.json", run)
    text = Path(FIXTURE, "checkpoint-3", "trainer_state.json").read_text()
    os.makedirs(os.path.join(run, "checkpoint-3"))
    cut = os.path.join(run, "checkpoint-3", "trainer_state.json")
    with open(cut, "w") as fh:
        fh.write(text[: len(text) // 2])
    reader = TrlRunReader(run)
    assert [e.step for e in reader.poll() if e.type == "step"] == [1, 2]
    with open(cut, "w") as fh:
        fh.write(text)
    assert [e.step for e in reader.poll() if e.type == "step"] == [3]
    for _ in range(3):  # a few polls more: the cut file is whole now, no warning ever
        assert [e for e in reader.poll() if e.type == "log"] == []


def test_a_shorter_history_resumes_from_there(tmp_path):
    run = str(tmp_path / "out")
    _copy("checkpoint-3/trainer_state.json", run)
    reader = TrlRunReader(run)
    events = reader.poll()
    history = replay(events)
    assert history.last_step == 3
    # The run is restarted from checkpoint-2: a new checkpoint-4 holds only steps 1-2 so far
    # (hand-made from checkpoint-2's state, as if TRL wrote it after resuming).
    state = json.loads(Path(FIXTURE, "checkpoint-2", "trainer_state.json").read_text())
    os.makedirs(os.path.join(run, "checkpoint-4"))
    with open(os.path.join(run, "checkpoint-4", "trainer_state.json"), "w") as fh:
        json.dump(state, fh)
    # TRL logs step 3 again: its completions file is rewritten.
    _copy("completions/completions_00003.parquet", run)
    more = reader.poll()
    assert more[0].type == "run_started" and more[0].resumed and more[0].start_step == 2
    for e in more:
        history.append(e)
    assert history.last_step == 2
    assert history.rollouts.steps == [3]  # the redone step's rollouts come after the restart


def test_steps_beyond_the_memory_bound_are_paged_from_the_parquet_files():
    reader = TrlRunReader(FIXTURE)
    history = RunHistory(max_rollout_rows=ROWS)  # room for one step: 1 and 2 are forgotten
    history.rollouts.loader = reader.step_rows
    for event in reader.poll():
        history.append(event)
    assert history.rollouts.steps_in_memory == [3] and history.rollouts.forgotten == 2 * ROWS
    rows = history.rollouts.get(1)
    raw = pq.read_table(os.path.join(COMPLETIONS, "completions_00001.parquet")).to_pylist()
    assert [r["completion"] for r in rows] == [r["completion"][0]["content"] for r in raw]
    assert rows[0]["prompt"].endswith("\n\nsystem: Answer with a number.")
    assert history.rollouts.get(9) is None


def test_reward_weights_are_worked_out_from_the_log():
    # The fixture ran with TRL's default weights: the fit says 1 and 1.
    steps = step_metrics(read_state(os.path.join(FIXTURE, "trainer_state.json")))
    assert fit_weights(steps, ["digits", "tagged"]) == {"digits": 1.0, "tagged": 1.0}
    # By hand: reward = 1·a + 0.2·b at each step (0.5 + 0.2 = 0.7, 1 + 0.1 = 1.1, 0 + 0.2).
    made = {1: {"reward": 0.7, "rewards/a/mean": 0.5, "rewards/b/mean": 1.0},
            2: {"reward": 1.1, "rewards/a/mean": 1.0, "rewards/b/mean": 0.5},
            3: {"reward": 0.2, "rewards/a/mean": 0.0, "rewards/b/mean": 1.0}}  # fmt: skip
    assert fit_weights(made, ["a", "b"]) == {"a": 1.0, "b": 0.2}
    # two steps fit any two weights exactly, so they prove nothing
    assert fit_weights({1: made[1], 2: made[2]}, ["a", "b"]) is None
    made[3]["reward"] = 0.5  # no weights give all three steps' rewards
    assert fit_weights(made, ["a", "b"]) is None


def test_a_weighted_run_totals_its_rows_with_the_weights(tmp_path):
    # The fixture as if run with reward_weights=[1, 0.5]: TRL's logged reward is
    # digits_mean + 0.5 * tagged_mean (TRL's nanmean: an answer tagged could not score adds 0).
    run = str(tmp_path / "out")
    for step in (1, 2, 3):
        _copy(f"completions/completions_{step:05d}.parquet", run)
    state = json.loads(Path(FIXTURE, "trainer_state.json").read_text())
    for entry in state["log_history"]:
        if "rewards/digits/mean" in entry:
            entry["reward"] = entry["rewards/digits/mean"] + 0.5 * entry["rewards/tagged/mean"]
    Path(run, "trainer_state.json").write_text(json.dumps(state))
    reader = TrlRunReader(run)
    events = reader.poll()
    assert reader.monitor.weights == {"digits": 1.0, "tagged": 0.5}  # the alarms weigh as TRL
    (note,) = [e for e in events if e.type == "log"]
    assert "digits × 1, tagged × 0.5" in note.message
    rows = next(e for e in events if e.type == "rollouts" and e.step == 2).rows
    raw = pq.read_table(os.path.join(COMPLETIONS, "completions_00002.parquet")).to_pylist()
    for row, rec in zip(rows, raw, strict=True):
        assert row["reward"] == pytest.approx(rec["digits"] + 0.5 * rec["tagged"])


def test_health_alarms_are_computed_on_the_run():
    events = TrlRunReader(FIXTURE).poll()
    alerts = [e for e in events if e.type == "alert"]
    # Every completion of the fixture hit max_completion_length (clipped_ratio 1.0 each step):
    # the truncation alarm needs 3 steps running, so it is raised at step 3, once.
    assert [(a.kind, a.step) for a in alerts] == [("truncation", 3)]


@pytest.mark.slow
def test_a_real_trl_run_reads_back(tmp_path):
    out = str(tmp_path / "trl-out")
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, os.path.join(SUPPORT, "trl_tiny_run.py"), out, "--steps", "2"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    print(f"TRL run: {time.perf_counter() - t0:.1f} s")
    history = replay(TrlRunReader(out).poll())
    assert history.steps.tolist() == [1.0, 2.0]
    assert sorted(history.rollouts.steps) == [1, 2]
    assert len(history.rollouts.get(2)) == ROWS
    assert history.finished["status"] == "completed"


@pytest.mark.slow
def test_a_trl_run_followed_while_it_trains(tmp_path):
    """TRL trains 6 steps (a checkpoint every 2, a reward that takes 0.5 s) while the reader
    polls every 0.2 s: the steps arrive in several polls as the checkpoints are written, every
    poll's files are read whole or skipped (no warning), and the end is the whole run."""
    out = str(tmp_path / "trl-out")
    cmd = [sys.executable, os.path.join(SUPPORT, "trl_tiny_run.py"), out, "--steps", "6"]
    cmd += ["--reward-delay", "0.5"]  # a step takes over half a second: polls fall between
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reader, events, polls_with_steps = TrlRunReader(out), [], 0
    try:
        while proc.poll() is None:
            new = reader.poll()
            polls_with_steps += any(e.type == "step" for e in new)
            events += new
            time.sleep(0.2)
    finally:
        proc.wait(timeout=300)
    assert proc.returncode == 0
    events += reader.poll()
    history = replay(events)
    assert history.steps.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert sorted(history.rollouts.steps) == [1, 2, 3, 4, 5, 6]
    assert polls_with_steps >= 2  # live: checkpoint-2, -4, -6 came in different polls
    assert [e for e in events if e.type == "log" and e.level == "warning"] == []
    assert history.finished["status"] == "completed"
