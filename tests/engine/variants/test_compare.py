"""Compare before and after (engine/variants/compare.py, engine/variants/compare_table.py, `eval --compare`).

The numbers are checked against hand-derived values; the comparison itself runs the built-in
demo model on conftest's tiny real runs (`trained_run`: LoRA, where side B is an adapter
switched on over the one base model, and full fine-tuning, where a checkpoint is a second
model) and must agree with `grpo-desktop eval` on the same problems; the command line is run
as a user runs it, in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.variants.compare_table import (
    BOTH_RIGHT,
    BOTH_WRONG,
    BROKEN,
    FIXED,
    CompareRow,
    category,
    mcnemar_exact_p,
    read_csv,
    summarize,
    wilson_interval,
    write_csv,
)
from tests.support.paths import ROOT


@pytest.fixture
def run_dir(trained_run) -> str:
    """A LoRA run of the demo model with checkpoints at steps 1 and 2."""
    return trained_run(lora=True)


# ----------------------------------------------------------------------------- the numbers


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # center (p + z²/2n)/(1 + z²/n), half z/(1 + z²/n)·√(p(1−p)/n + z²/4n²), z = 1.95996:
        (5, 10, 0.236593, 0.763407),  # symmetric around ½
        (0, 10, 0.0, 0.277533),  # upper = z²/(n + z²) = 3.8415/13.8415
        (10, 10, 0.722467, 1.0),  # the mirror image of 0/10
        (31, 100, 0.227797, 0.406261),  # the "31 % [23–41 %]"
        (1, 3, 0.061492, 0.792340),
    ],
)
def test_wilson_interval_matches_hand_computed_values(k, n, low, high):
    got = wilson_interval(k, n)
    assert got == pytest.approx((low, high), abs=1e-6)


def test_wilson_interval_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)  # nothing measured: anything is possible
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_mcnemar_exact_p():
    # 3 fixed, 0 broken: P(all 3 discordant go one way) = 2 · (½)³ = 0.25
    assert mcnemar_exact_p(3, 0) == pytest.approx(0.25)
    # 5 vs 1: 2 · (C(6,0) + C(6,1)) / 2⁶ = 2 · 7/64
    assert mcnemar_exact_p(5, 1) == pytest.approx(14 / 64)
    assert mcnemar_exact_p(4, 4) == 1.0 and mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(29, 7) == pytest.approx(3.1255e-4, rel=1e-3)


def test_categories_and_summary():
    assert [category(a, b) for a, b in [(0, 1), (1, 0), (1, 1), (0, 0)]] == [
        FIXED,
        BROKEN,
        BOTH_RIGHT,
        BOTH_WRONG,
    ]
    flags = [(0, 1)] * 3 + [(1, 0)] + [(1, 1)] * 2 + [(0, 0)] * 4
    rows = [CompareRow(f"p{i}", "1", "1", bool(a), "1", bool(b)) for i, (a, b) in enumerate(flags)]
    s = summarize(rows, "Base model", "Step 100")
    assert s.counts == {FIXED: 3, BROKEN: 1, BOTH_RIGHT: 2, BOTH_WRONG: 4}
    assert (s.a.correct, s.b.correct, s.n) == (3, 5, 10)
    # 3/10 → [11–60 %], 5/10 → [24–76 %] (Wilson, as above)
    assert s.text() == (
        "Base model: 30 % [11–60 %] → Step 100: 50 % [24–76 %], 3 fixed, 1 broken (of 10)"
    )
    d = s.to_dict()
    assert (d["fixed"], d["broken"], d["both_right"], d["both_wrong"]) == (3, 1, 2, 4)
    assert d["a"]["interval_95"] == [0.1078, 0.6032] and d["mcnemar_p"] == 0.625


def test_csv_round_trip(tmp_path):
    rows = [
        CompareRow('What is "3, 4"?', "7", "7", True, None, False, "a\nmultiline, quoted", ""),
        CompareRow("Größe × 2 ≈ ?", "½", "½", True, "¼", False, "<answer>½</answer>", "¼"),
    ]
    path = str(tmp_path / "t.csv")
    write_csv(path, rows)
    assert read_csv(path) == rows
    with open(path, encoding="utf-8") as fh:
        assert fh.readline().strip() == (
            "problem,gold,answer_a,correct_a,answer_b,correct_b,category,completion_a,completion_b"
        )
    import csv

    with open(path, encoding="utf-8", newline="") as fh:
        records = list(csv.DictReader(fh))
    assert [r["category"] for r in records] == [BROKEN, BROKEN]
    assert records[0]["correct_a"] == "1" and records[0]["answer_b"] == ""


# ----------------------------------------------------------------------------- a real comparison


def test_base_vs_checkpoint_on_the_demo_agrees_with_eval(run_dir):
    from grpo_desktop.engine.variants.compare import compare_run
    from grpo_desktop.engine.variants.eval_target import evaluate_target

    seen = []
    c = compare_run(run_dir, "base", "latest", n=12, seed=4, progress=lambda d, t: seen.append(d))
    assert (c.a.key, c.b.key, c.b.step, len(c.rows), c.cancelled) == (
        "base",
        "step-2",
        2,
        12,
        False,
    )
    assert seen == sorted(seen) and seen[-1] == 24  # two answers per problem
    # real answers in the lessons' format from the base model, scored by the run's check
    assert all(r.completion_a.startswith("<think>") for r in c.rows)
    for r in c.rows:
        assert r.correct_a == (r.answer_a == r.gold) and r.correct_b == (r.answer_b == r.gold)
    assert c.summary.a.correct + c.summary.counts[FIXED] - c.summary.counts[BROKEN] == (
        c.summary.b.correct
    )
    # `grpo-desktop eval` on the same problems: the same accuracy for each side
    after = evaluate_target(run_dir, n=12, seed=4, sample_t1=False)
    before = evaluate_target(None, n=12, seed=4, sample_t1=False)  # the demo = this run's base
    assert after["step"] == 2
    assert c.summary.b.accuracy == pytest.approx(after["accuracy"], abs=1e-4)
    assert c.summary.a.accuracy == pytest.approx(before["accuracy"], abs=1e-4)


def test_two_full_fine_tuning_checkpoints_on_a_problem_file(trained_run, tmp_path):
    from grpo_desktop.engine.variants.compare import compare_run

    problems = tmp_path / "p.jsonl"
    lines = [{"question": "What is 12 × 34?", "answer": "408"}, {"question": "What is 17 × 4?"}]
    lines.append({"question": "What is 25 × 25?", "answer": "625"})
    problems.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    c = compare_run(trained_run(lora=False), "1", "step-2", n=5, problems=str(problems))
    assert (c.a.label, c.b.label, c.source) == ("Step 1", "Step 2", str(problems))
    # the row without an answer is skipped, as in training
    assert [(r.problem, r.gold) for r in c.rows] == [
        ("What is 12 × 34?", "408"),
        ("What is 25 × 25?", "625"),
    ]


def test_cancel_stops_during_the_first_side(run_dir):
    from grpo_desktop.engine.variants.compare import compare_run

    cancel = threading.Event()
    seen = []

    def progress(done, total):
        seen.append(done)
        cancel.set()  # the user presses Cancel as soon as anything is answered

    c = compare_run(run_dir, n=8, progress=progress, cancel=cancel)
    assert c.cancelled and c.rows == [] and c.asked == 8
    assert seen and max(seen) < 8  # stopped inside side A's batch, not after it


def test_bad_sides_and_files_say_what_to_choose(run_dir, tmp_path):
    from grpo_desktop.engine.variants.compare import compare_run

    with pytest.raises(UserError, match=r"no checkpoint '7'.*base, latest, or a step: 1, 2"):
        compare_run(run_dir, "base", "7")
    with pytest.raises(UserError, match="Both sides are Step 2"):
        compare_run(run_dir, "latest", "2")
    with pytest.raises(UserError, match="Data file not found"):
        compare_run(run_dir, problems=str(tmp_path / "missing.jsonl"))
    with pytest.raises(UserError, match=r"\.jsonl, \.json, \.csv or \.parquet"):
        compare_run(run_dir, problems=str(tmp_path / "notes.txt"))
    other = tmp_path / "other.csv"
    other.write_text("prompt,solution\nWhat is 2 × 3?,6\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"no column 'question' or 'answer'\. Its columns are: "
                       r"prompt, solution\..*rename the file's columns"):  # fmt: skip
        compare_run(run_dir, problems=str(other))
    empty = _run_without_checkpoints(tmp_path)
    with pytest.raises(UserError, match="has no checkpoint yet"):
        compare_run(empty)


def _run_without_checkpoints(tmp_path) -> str:
    from grpo_desktop.engine.config.demo import demo_config

    run = tmp_path / "fresh"
    run.mkdir()
    (run / "config.json").write_text(demo_config().to_json(), encoding="utf-8")
    (run / "events.jsonl").write_text("", encoding="utf-8")
    return str(run)


# ----------------------------------------------------------------------------- the command line


def _cli(*args, cwd) -> subprocess.CompletedProcess:
    root = ROOT
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "eval", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=240,
    )


@pytest.mark.timeout(300)
def test_cli_compare_prints_json_and_writes_the_table(run_dir, tmp_path):
    proc = _cli(run_dir, "--compare", "base", "--n", "4", "--seed", "4", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    table = tmp_path / "compare-base-vs-step-2.csv"  # the default: the current folder
    assert summary["table"] == str(table) and f"to {table}" in proc.stderr
    assert (summary["n"], summary["a"]["step"], summary["b"]["step"]) == (4, None, 2)
    rows = read_csv(str(table))
    assert len(rows) == 4
    assert summary["b"]["correct"] == sum(r.correct_b for r in rows)
    counts = {k: summary[k] for k in ("fixed", "broken", "both_right", "both_wrong")}
    assert counts == {k.replace(" ", "_"): v for k, v in summarize(rows, "", "").counts.items()}


def test_cli_compare_unknown_step_exits_2_listing_the_steps(run_dir, tmp_path, capsys, monkeypatch):
    from grpo_desktop.cli import main

    monkeypatch.chdir(tmp_path)  # where a default table would go
    assert main(["eval", run_dir, "--compare", "base", "--against", "9"]) == 2
    captured = capsys.readouterr()
    assert "no checkpoint '9'" in captured.err and "1, 2" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert not list(tmp_path.iterdir())  # no table written
    assert main(["eval", run_dir, "--compare", "base", "--problems", "nope.csv"]) == 2
    assert "Data file not found: nope.csv" in capsys.readouterr().err
    # a checkpoint folder instead of the run: that checkpoint is side B
    checkpoint = os.path.join(run_dir, "checkpoints", "step-00000001")
    assert main(["eval", checkpoint, "--compare", "base", "--n", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["b"]["step"], summary["n"]) == (1, 2)
    assert summary["table"] == str(tmp_path / "compare-base-vs-step-1.csv")
    assert len(read_csv(summary["table"])) == 2


def test_cli_compare_needs_a_run_and_its_options_need_compare(capsys, tmp_path):
    from grpo_desktop.cli import main

    assert main(["eval", "--demo", "--compare", "base"]) == 2
    assert "needs a run folder" in capsys.readouterr().err
    assert main(["eval", "--demo", "--table", "x.csv"]) == 2
    assert "only go with --compare" in capsys.readouterr().err
    assert main(["eval", str(_run_without_checkpoints(tmp_path)), "--compare", "base"]) == 2
    assert "has no checkpoint yet" in capsys.readouterr().err
