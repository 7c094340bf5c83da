"""A checker that hangs on every answer fails fast (issue 26 §5): once the first calls of a batch
(a training step's answers) all time out, the rest of that batch is not called, each answer an
error that says so (worded as a time-out, so the run's checker watch still stops the run after
two such steps). A checker that hangs on some answers only is still called on every answer.

Measured here on a 12-answer batch with a 0.5 s limit, against the same process with the give-up
turned off (every answer waited for, as before): the batch costs 3 limits instead of 12 (here
6.8 s -> 1.6 s). The real `grpo-desktop score` in a subprocess shows what a user sees. On the
demo run (32 answers a step, the 5 s default limit) with a checker that sleeps: 167 s a step
before, 22 s after; the run stops after its two steps at 50 s instead of 340 s.
"""

from __future__ import annotations

import json
import time

from grpo_desktop.engine.checker.runner import GIVE_UP_AFTER, CheckerProcess
from grpo_desktop.engine.config.demo import demo_config
from tests.support.hazards import cli

HANGS = (
    "import time\n\ndef check(completion, answer, prompt):\n    time.sleep(60)\n    return 0.0\n"
)
HANGS_ON = (
    "import time\n\ndef check(completion, answer, prompt):\n"
    "    if completion.startswith('hang'):\n        time.sleep(60)\n    return 1.0\n"
)
LIMIT, N = 0.5, 12


def _batch(completions: list[str]) -> tuple[list[str], list[str], list[str]]:
    return completions, ["4"] * len(completions), ["What is 2 + 2?"] * len(completions)


def _timed(proc: CheckerProcess, completions: list[str]):
    t0 = time.perf_counter()
    results = proc.check_many(*_batch(completions))
    return results, time.perf_counter() - t0


def test_a_batch_stops_calling_a_checker_whose_first_calls_all_time_out():
    with CheckerProcess(HANGS, timeout_s=LIMIT, give_up_after=0) as before:
        waited, before_s = _timed(before, ["x"] * N)
    with CheckerProcess(HANGS, timeout_s=LIMIT) as after:
        results, after_s = _timed(after, ["x"] * N)
        again, _ = _timed(after, ["x"] * 4)  # the next batch (step) tries again
    assert all(r.value is None and "timed out after 0.5 s" in r.error for r in waited)
    assert len(results) == N and all(r.value is None and r.timed_out for r in results)
    first, rest = results[:GIVE_UP_AFTER], results[GIVE_UP_AFTER:]
    assert all(r.error.startswith("check() timed out after 0.5 s") for r in first)
    assert all(r.error.startswith("not called: check() timed out on the first 3") for r in rest)
    assert again[0].error.startswith("check() timed out")  # called again, not skipped
    assert before_s >= N * LIMIT and after_s < GIVE_UP_AFTER * LIMIT + 3.0
    assert after_s < before_s / 2, (before_s, after_s)
    print(f"\n{N} answers, {LIMIT} s limit: {before_s:.1f} s before, {after_s:.1f} s after")


def test_a_checker_that_hangs_on_some_answers_is_called_on_every_answer():
    completions = ["hang", "hang", "4", "hang", "4", "4"]
    with CheckerProcess(HANGS_ON, timeout_s=LIMIT) as proc:
        results = proc.check_many(*_batch(completions))
    assert [r.value for r in results] == [None, None, 1.0, None, 1.0, 1.0]
    assert all("not called" not in (r.error or "") for r in results)


def test_score_says_which_answers_were_not_called(tmp_path):
    cfg = demo_config().replace(
        rewards={"custom_checker": HANGS, "custom_weight": 0.5, "checker_timeout_s": LIMIT}
    )
    config = tmp_path / "hangs.json"
    config.write_text(json.dumps(cfg.to_dict()))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"completion": f"<answer>{i}</answer>",
                                           "answer": "4"}) + "\n" for i in range(N)))  # fmt: skip
    out = tmp_path / "scores.jsonl"
    t0 = time.perf_counter()
    code, err = cli("score", str(config), "--input", str(samples), "--output", str(out),
                    "--trust-checker")  # fmt: skip
    seconds = time.perf_counter() - t0
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    errors = [r["error"] for r in rows]
    assert len(rows) == N and all(e and "timed out" in e for e in errors), errors
    assert sum("not called" in e for e in errors) == N - GIVE_UP_AFTER
    assert seconds < 60  # 12 answers x (0.5 s + a fresh process) were waited for before
