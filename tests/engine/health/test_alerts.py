"""Checker failures are never silent: alert events from the real engine, the CLI and the rules.

A checker that raises on every rollout used to end "Finished all steps", exit 0, with no warning;
one that always hangs made each step take B·G·timeout with no give-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.events import Alert, event_from_dict, read_events
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.health.checker_watch import CheckerWatch, is_timeout
from tests.support.toy import toy_config

RAISES = "def check(completion, answer, prompt):\n    raise ValueError('no digits here')\n"
HANGS = (
    "import time\n\ndef check(completion, answer, prompt):\n    time.sleep(60)\n    return 1.0\n"
)
TIMEOUT = "check() timed out after 0.2 s"


def test_errors_on_more_than_a_quarter_warn_once_with_the_first_error():
    watch = CheckerWatch(timeout_s=5.0)
    alerts, stop = watch.after_step(1, [None, None, None, "ValueError: x"])  # 1 of 4: not > 25 %
    assert alerts == [] and stop is None
    alerts, stop = watch.after_step(2, [None, "ValueError: first", "KeyError: second", None])
    assert [a.kind for a in alerts] == ["checker_errors"] and stop is None
    assert alerts[0].severity == "warning" and "2 of 4" in alerts[0].message
    assert "ValueError: first" in alerts[0].message and "Test checker" in alerts[0].advice
    assert watch.after_step(3, ["ValueError: again"] * 4) == ([], None)  # once per run


def test_every_call_timing_out_two_steps_running_stops_the_run():
    watch = CheckerWatch(timeout_s=0.2)
    alerts, stop = watch.after_step(1, [TIMEOUT] * 4)
    assert {a.kind for a in alerts} == {"checker_timeouts", "checker_errors"} and stop is None
    timeouts = next(a for a in alerts if a.kind == "checker_timeouts")
    assert timeouts.severity == "critical" and "0.2 s each" in timeouts.message
    alerts, stop = watch.after_step(2, [None] + [TIMEOUT] * 3)  # one call answered: no streak
    assert alerts == [] and stop is None
    watch.after_step(3, [TIMEOUT] * 4)
    alerts, stop = watch.after_step(4, [TIMEOUT] * 4)
    assert [a.kind for a in alerts] == ["checker_timeouts"]
    assert stop is not None and "timed out on every answer for 2 steps" in stop
    assert "time limit" in stop
    assert is_timeout(TIMEOUT) and not is_timeout("ValueError: timed") and not is_timeout(None)


def test_alert_events_round_trip_through_json():
    alert = Alert(3, "checker_errors", "warning", "it failed", "fix it")
    data = json.loads(alert.to_json())
    assert data == {
        "type": "alert",
        "step": 3,
        "kind": "checker_errors",
        "severity": "warning",
        "message": "it failed",
        "advice": "fix it",
    }
    assert event_from_dict(data) == alert


def test_a_checker_that_always_raises_raises_an_alert_in_the_run(tiny_model_dir, tmp_path):
    run_dir = str(tmp_path / "run")
    cfg = toy_config(tiny_model_dir, run={"max_steps": 2, "checkpoint_every": 10})
    cfg = cfg.replace(rewards={"custom_checker": RAISES})
    events = list(train(cfg, TrainControl(), run_dir=run_dir))
    alerts = [e for e in events if e.type == "alert"]
    assert [(a.kind, a.step) for a in alerts] == [("checker_errors", 1)]
    assert "8 of 8" in alerts[0].message and "no digits here" in alerts[0].message
    assert events[-1].status == "completed"  # it finishes, but not silently
    logged = [e for e in read_events(os.path.join(run_dir, "events.jsonl")) if e.type == "alert"]
    assert logged == alerts  # the same events reach events.jsonl (and so sessions)
    step = next(e for e in events if e.type == "step")
    assert step.metrics["checker_error_rate"] == 1.0


def test_a_checker_that_always_hangs_stops_the_run_after_two_steps(tiny_model_dir, tmp_path):
    cfg = toy_config(tiny_model_dir, run={"max_steps": 5, "checkpoint_every": 10})
    cfg = cfg.replace(
        rewards={"custom_checker": HANGS, "checker_timeout_s": 0.2},
        algorithm={"num_generations": 2, "prompts_per_step": 1},
    )
    events = list(train(cfg, TrainControl(), run_dir=str(tmp_path / "run")))
    kinds = [(e.kind, e.step) for e in events if e.type == "alert"]
    assert ("checker_timeouts", 1) in kinds and ("checker_timeouts", 2) in kinds
    finished = events[-1]
    assert finished.status == "failed" and finished.step == 2 and finished.error is None
    assert "timed out on every answer" in finished.message
    assert any(e.type == "checkpoint" and e.step == 2 for e in events)  # nothing is lost


def test_the_cli_prints_alerts_even_when_quiet_and_fails_on_a_hanging_checker(
    tiny_model_dir, tmp_path
):
    cfg = toy_config(tiny_model_dir, run={"max_steps": 3, "checkpoint_every": 10})
    cfg = cfg.replace(
        rewards={"custom_checker": HANGS, "checker_timeout_s": 0.2},
        algorithm={"num_generations": 2, "prompts_per_step": 1},
        lora={"enabled": False},  # a process without LoRA never imports peft (2-3 s of CPU)
    )
    path = tmp_path / "hangs.json"
    path.write_text(cfg.to_json(), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "train", str(path), "--out", str(tmp_path / "r")]
        + ["--trust-checker", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GRPO_DESKTOP_CONFIG_DIR": str(tmp_path / "cfg")},
    )
    assert proc.returncode == 2, proc.stderr
    assert "critical: Your checker timed out on every answer of step 1" in proc.stderr
    assert "timed out on every answer for 2 steps in a row" in proc.stderr
