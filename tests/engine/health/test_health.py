"""Health alarms (engine/health/monitors.py): each kind fires on its scripted scenario within 20 steps,
exactly once, healthy metrics raise none, a resumed run does not raise a kind again, and a real
run on the tiny model yields them into events.jsonl.

Scenarios are the run's own events as dicts (what events.jsonl holds), fed to the monitor the way
the trainer feeds it. The real demo runs (reward hacking on the lessons' hack, three healthy
runs) are in test_health_demo.py (slow).
"""

from __future__ import annotations

import json
import os
import random

import pytest

from grpo_desktop.engine.alarm_kinds import ALARMS, HEALTH_KINDS
from grpo_desktop.engine.config import SECTIONS, TrainConfig, validate
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.events import ALERT_KINDS, read_events
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.health.monitors import HealthMonitor, logged_events
from tests.support.toy import toy_config

G = 4


def started(**alerts) -> dict:
    cfg = TrainConfig().replace(alerts=alerts) if alerts else TrainConfig()
    return {"type": "run_started", "start_step": 0, "config": cfg.to_dict()}


def healthy(step: int, rng: random.Random) -> dict:
    """Metrics of a run that learns: reward and entropy drift slowly, everything else is noise."""
    return {
        "reward": 0.6 + 0.004 * step + rng.uniform(-0.05, 0.05),
        "frac_reward_zero_std": rng.choice([0.0, 0.25, 0.5]),
        "completions/clipped_ratio": rng.uniform(0.0, 0.1),
        "completions/mean_length": 100 + rng.uniform(-10, 10) + 0.2 * step,
        "kl": 0.01 + 0.0004 * step + rng.uniform(0, 0.004),
        "entropy": 0.5 - 0.001 * step + rng.uniform(-0.03, 0.03),
        "grad_norm": 0.3 + rng.uniform(-0.1, 0.1),
    }


def rollouts(step: int, groups: list[list[tuple[float, float]]]) -> dict:
    """A step's rows: each group a list of (accuracy, format) raw scores, total = acc + 0.2·fmt
    (the default weights)."""
    rows = [
        {"group": g, "rewards": {"accuracy": a, "format": f}, "reward": a + 0.2 * f}
        for g, answers in enumerate(groups)
        for a, f in answers
    ]
    return {"type": "rollouts", "step": step, "rows": rows}


def mixed_rollouts(step: int) -> dict:
    return rollouts(step, [[(1, 1), (0, 1), (0, 1), (1, 1)], [(0, 1)] * G])


def feed(monitor: HealthMonitor, events: list[dict]) -> list[tuple[int, str]]:
    return [(a.step, a.kind) for e in events for a in monitor.observe(e)]


def scenario(change, steps: int = 40, evals: dict | None = None, groups=mixed_rollouts) -> list:
    """`steps` healthy steps with `change(step, metrics)` applied to each, the held-out accuracy
    `evals` {step: accuracy}, and each step's rollouts from `groups(step)`."""
    rng = random.Random(0)
    events = [started()]
    if evals and 0 in evals:
        events.append({"type": "eval", "step": 0, "accuracy": evals[0]})
    for step in range(1, steps + 1):
        m = healthy(step, rng)
        change(step, m)
        events += [groups(step), {"type": "step", "step": step, "metrics": m}]
        if evals and step in evals:
            events.append({"type": "eval", "step": step, "accuracy": evals[step]})
    return events


def _set(name, value, after=0):
    def change(step, m):
        if step > after:
            m[name] = value(step) if callable(value) else value

    return change


def _hacked(step, m):
    m["reward"] = 0.5 + 0.03 * step  # +0.3 over the 10 steps between the evaluations


def _format_only(step):
    return rollouts(step, [[(0, 1), (0, 0), (0, 1), (0, 1)], [(1, 1), (1, 0), (1, 1), (1, 0)]])


def _all_wrong(step):
    return rollouts(
        step, [[(0, 1)] * G, [(0, 1)] * G, [(0, 0)] * G, [(1, 1), (0, 1), (0, 1), (0, 1)]]
    )


def _all_right(step):
    return rollouts(step, [[(1, 1)] * G] * 4)


def _untagged(step):
    """After step 3 no answer earns format credit (a real model that never writes the tags);
    accuracy still varies, so the groups have spread."""
    if step <= 3:
        return mixed_rollouts(step)
    return rollouts(step, [[(1, 0), (0, 0), (0, 0), (1, 0)], [(0, 0), (1, 0), (0, 0), (0, 0)]])


SCENARIOS = {  # kind: (events, the step it must fire at)
    "reward_hacking": (scenario(_hacked, evals={0: 0.5, 4: 0.49, 8: 0.47, 12: 0.46}), 12),
    "no_signal": (scenario(_set("frac_reward_zero_std", 1.0, after=3), groups=_all_wrong), 8),
    "format_flat": (scenario(lambda s, m: None, groups=_untagged), 8),
    "truncation": (scenario(_set("completions/clipped_ratio", 0.6, after=4)), 7),
    "length_drift": (scenario(_set("completions/mean_length", 170, after=11)), 14),
    "length_collapse": (scenario(_set("completions/mean_length", 2.0, after=11)), 14),
    "kl_blowup": (scenario(_set("kl", lambda s: 0.5 if s == 12 else 0.02)), 12),
    "entropy_collapse": (scenario(_set("entropy", 0.02, after=12)), 15),
    "grad_spike": (scenario(_set("grad_norm", lambda s: 9.0 if s == 9 else 0.3)), 9),
}


@pytest.mark.parametrize("kind", HEALTH_KINDS)
def test_each_kind_fires_once_within_20_steps_of_its_scenario(kind):
    events, at = SCENARIOS[kind]
    monitor = HealthMonitor()
    raised = feed(monitor, events)  # 40 steps: the condition lasts 25+ steps past the firing
    assert raised == [(at, kind)] and at <= 20


def test_each_alert_says_what_it_means_and_what_to_try():
    for kind in HEALTH_KINDS:
        events, _ = SCENARIOS[kind]
        monitor = HealthMonitor()
        alerts = [a for e in events for a in monitor.observe(e)]
        alert = alerts[0]
        assert alert.severity == ALARMS[kind].severity and len(alert.message) > 60, kind
        assert len(alert.advice) > 40 and alert.advice[0].isupper(), kind
    assert set(HEALTH_KINDS) <= set(ALERT_KINDS) and all(ALARMS[k].explanation for k in ALARMS)


def test_messages_carry_the_numbers_of_the_run():
    def first(kind):
        monitor = HealthMonitor()
        return next(a for e in SCENARIOS[kind][0] for a in monitor.observe(e))

    hack = first("reward_hacking")
    # Reward 0.5 + 0.03·step rises 0.03 × (12 − 0) = 0.36 between the evaluations at steps 0
    # and 12; accuracy 50, 49, 47, 46 % fits a slope of −0.035 per 10 steps: it fell.
    assert "rose by 0.36 between steps 0 and 12" in hack.message
    assert "fell (50% → 46% over 4 evaluations)" in hack.message
    signal = first("no_signal")
    # Steps 4–8, 4 groups each: 3 all-wrong groups (two 0/1, one 0/0) and 1 with spread.
    assert "5 steps in a row" in signal.message and "15 of those 15" in signal.message
    assert "too hard" in signal.message and "easier problems" in signal.advice
    drift = first("length_drift")
    assert "longer" in drift.message and "Dr. GRPO" in drift.advice
    assert "tokens" in first("length_collapse").message
    assert "KL at step 12 is 0.5" in first("kl_blowup").message


def test_no_signal_says_too_easy_when_the_groups_are_all_right():
    events = scenario(_set("frac_reward_zero_std", 1.0), groups=_all_right)
    monitor = HealthMonitor()
    alerts = [a for e in events for a in monitor.observe(e)]
    assert [(a.step, a.kind) for a in alerts] == [(5, "no_signal")]
    assert "all right: the problems look too easy" in alerts[0].message
    assert "harder problems" in alerts[0].advice


def test_format_providing_the_spread_is_reward_hacking():
    # Within each group accuracy is equal, so every difference comes from format: share 100 %.
    # Pooled over 5 steps, the rule fires at step 5 (no evaluation needed).
    monitor = HealthMonitor()
    raised = feed(monitor, scenario(lambda s, m: None, steps=20, groups=_format_only))
    assert raised == [(5, "reward_hacking")]
    # The healthy groups: accuracy makes all the spread (format is 1 everywhere): share 0.
    assert feed(HealthMonitor(), scenario(lambda s, m: None, steps=20)) == []


def test_healthy_metrics_raise_nothing_in_100_steps():
    rising = {s: 0.4 + 0.004 * s for s in range(0, 101, 10)}
    assert feed(HealthMonitor(), scenario(lambda s, m: None, steps=100, evals=rising)) == []


def test_reward_rising_with_accuracy_is_not_hacking():
    evals = {0: 0.5, 4: 0.55, 8: 0.62, 12: 0.66}
    assert feed(HealthMonitor(), scenario(_hacked, steps=14, evals=evals)) == []


def _solving(step, m):
    _hacked(step, m)
    m["rewards/accuracy/mean"] = m["reward"] - 0.2  # the rise is all in right training answers


def test_a_rise_that_right_training_answers_explain_needs_held_out_accuracy_to_fall():
    # Held-out accuracy 100 problems wide wobbles by ±5 points: flat is not enough here ...
    flat = {0: 0.5, 4: 0.52, 8: 0.49, 12: 0.5}
    assert feed(HealthMonitor(), scenario(_solving, steps=14, evals=flat)) == []
    # ... nor a fall within that noise (fitted: 50, 48, 46, 43 % is −0.07 over 12 steps) ...
    wobble = {0: 0.5, 4: 0.48, 8: 0.46, 12: 0.43}
    assert feed(HealthMonitor(), scenario(_solving, steps=14, evals=wobble)) == []
    # ... a fall of 10 points or more is (fitted: 50, 46, 41, 37 % is −0.13 over 12 steps).
    falling = {0: 0.5, 4: 0.46, 8: 0.41, 12: 0.37}
    assert feed(HealthMonitor(), scenario(_solving, steps=14, evals=falling)) == [
        (12, "reward_hacking")
    ]


def test_steps_without_signal_do_not_make_the_next_gradient_a_spike():
    # Zero-advantage steps have grad norm 0: they are left out of the running median.
    def change(step, m):
        m["grad_norm"] = 0.0 if step % 3 else 0.3

    assert feed(HealthMonitor(), scenario(change)) == []


def test_thresholds_are_settings_and_alarms_can_be_switched_off():
    events, _ = SCENARIOS["truncation"]
    off = [started(enabled=False)] + events[1:]
    assert feed(HealthMonitor(), off) == []
    later = [started(truncation_share=0.7)] + events[1:]  # 60 % truncated is below 70 %
    assert feed(HealthMonitor(), later) == []
    patient = [started(steps_in_a_row=6)] + events[1:]
    assert feed(HealthMonitor(), patient) == [(10, "truncation")]


def test_a_resumed_run_does_not_raise_a_kind_again(tmp_path):
    events, at = SCENARIOS["truncation"]
    first = HealthMonitor()
    logged = []
    for e in events[: 2 * 20 + 1]:  # the run stops after step 20 ...
        logged += [e, *(a.to_dict() for a in first.observe(e))]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in logged), encoding="utf-8")
    again = HealthMonitor()
    again.replay(logged_events(str(path)))  # ... and continues: the log is replayed first
    assert "truncation" in again.raised
    assert feed(again, events[2 * 20 + 1 :]) == []
    # Replaying a log without the alert (raised by an older version): it can fire after resume.
    fresh = HealthMonitor()
    fresh.replay([e for e in logged if e["type"] != "alert"])
    assert feed(fresh, events[2 * 20 + 1 :]) == [(21, "truncation")]


def test_alerts_settings_are_advanced_validated_and_round_trip():
    fields = SECTIONS["alerts"].__dataclass_fields__
    assert [n for n, f in fields.items() if not f.metadata["advanced"]] == ["enabled"]
    cfg = TrainConfig().replace(alerts={"kl_factor": 4.0, "no_signal_steps": 7})
    assert TrainConfig.from_json(cfg.to_json()) == cfg
    assert TrainConfig.from_dict({"run": {}}).alerts.kl_factor == 10.0  # older configs
    bad = TrainConfig().replace(alerts={"length_collapse_share": 0.6})
    (msg,) = validate(bad)
    assert "Collapsed length share" in msg and "e.g." in msg
    assert any(
        "at most 1.0" in m for m in validate(TrainConfig().replace(alerts={"format_share": 2}))
    )


def test_a_real_run_with_answers_cut_off_raises_truncation_once(tiny_model_dir, tmp_path):
    # 2-token answers from a random model never finish: every completion hits the limit, so the
    # alarm fires at step 3 (three steps in a row), once, and is logged like any event.
    run_dir = str(tmp_path / "run")
    cfg = toy_config(
        tiny_model_dir,
        rewards={"accuracy_weight": 1.0, "custom_checker": ""},  # no checker process to start
        algorithm={"max_completion_length": 2},
        run={"max_steps": 3, "checkpoint_every": 10},
    )
    events = list(train(cfg, TrainControl(), run_dir=run_dir))
    alerts = [e for e in events if e.type == "alert"]
    assert [(a.step, a.kind) for a in alerts] == [(3, "truncation")]
    assert "of the answers at step 3 hit the length limit" in alerts[0].message
    i = events.index(alerts[0])
    assert events[i - 1].type == "step" and events[i - 1].step == 3  # right after its step
    logged = [e for e in read_events(os.path.join(run_dir, "events.jsonl")) if e.type == "alert"]
    assert logged == alerts
