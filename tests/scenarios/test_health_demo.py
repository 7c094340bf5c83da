"""Health alarms on real demo runs (slow: about 10 minutes on 2 free CPU cores, far more on a
busy machine): the lessons' own hack, the demo model rewarded for format alone, raises
reward_hacking; the healthy demo (seeds 0, 1, 2, 100 steps) raises none of reward_hacking,
kl_blowup or length_drift. Each test prints its figures (run with -s to see them); README,
"Health alarms", quotes them. The fast tests of every kind are in test_health.py.

    QT_QPA_PLATFORM=offscreen python -m pytest -m slow -s tests/scenarios/test_health_demo.py
"""

from __future__ import annotations

import os

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.health.monitors import HealthMonitor, logged_events

# A 100-step demo run takes 1.5 minutes on 2 free cores, over 10 on a busy machine: past the
# suite's 600 s limit per test.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def _run(cfg, run_dir: str) -> tuple[list, list]:
    events = list(train(cfg, TrainControl(), run_dir=run_dir))
    assert events[-1].type == "run_finished" and events[-1].status == "completed"
    return events, [e for e in events if e.type == "alert"]


def _rewards(events) -> list[float]:
    return [e.metrics["reward"] for e in events if e.type == "step"]


def _evals(events) -> list[tuple[int, float]]:
    return [(e.step, e.accuracy) for e in events if e.type == "eval"]


def test_the_format_only_hack_raises_reward_hacking(tmp_path):
    # The lessons' hack: accuracy weight 0, so only the tags earn reward. The reward climbs to
    # 1.0 while held-out accuracy drifts down.
    cfg = demo_config().replace(
        rewards={"accuracy_weight": 0.0, "format_weight": 1.0}, run={"max_steps": 30, "seed": 0}
    )
    run_dir = str(tmp_path / "hack")
    events, alerts = _run(cfg, run_dir)
    rewards, evals = _rewards(events), _evals(events)
    hacking = [a for a in alerts if a.kind == "reward_hacking"]
    print(f"\nhack: rewards {[round(r, 3) for r in rewards]}")
    print(f"hack: held-out accuracy {evals}")
    print(f"hack: alerts {[(a.step, a.kind) for a in alerts]}")
    assert len(hacking) == 1 and hacking[0].step <= 30
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 and evals[-1][1] < evals[0][1]
    # The other rule on its own (the log without rollouts, so no format share): the reward's
    # rise against falling held-out accuracy over the last 4 evaluations.
    monitor = HealthMonitor()
    trend = [
        (a.step, a.kind)
        for e in logged_events(os.path.join(run_dir, "events.jsonl"))
        if e["type"] != "alert"
        for a in monitor.observe(e)
    ]
    print(f"hack: from reward and held-out accuracy alone {trend}")
    assert ("reward_hacking" in {k for _, k in trend}) or evals[-1][1] >= evals[0][1] - 0.05


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_healthy_demo_raises_no_false_alarm(tmp_path, seed):
    cfg = demo_config().replace(run={"seed": seed})
    events, alerts = _run(cfg, str(tmp_path / f"seed{seed}"))
    rewards = _rewards(events)
    print(
        f"\nseed {seed}: reward first 10 {sum(rewards[:10]) / 10:.3f}, last 10 "
        f"{sum(rewards[-10:]) / 10:.3f}; held-out {_evals(events)}"
    )
    print(f"seed {seed}: alerts {[(a.step, a.kind, a.message) for a in alerts]}")
    assert not {a.kind for a in alerts} & {"reward_hacking", "kl_blowup", "length_drift"}
