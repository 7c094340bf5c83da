"""The training loop end to end on tiny local models: learning, events, stop, pause, resume."""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch

from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.events import read_events
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.ops import kernels
from tests.support.toy import toy_config


def run_all(cfg, control=None, **kw):
    return list(train(cfg, control or TrainControl(), **kw))


def test_events_cover_a_run_and_are_logged(tiny_model_dir, tmp_path):
    run_dir = str(tmp_path / "run")
    events = run_all(toy_config(tiny_model_dir), run_dir=run_dir)
    kinds = [e.type for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert events[-1].status == "completed", events[-1].message
    threads = torch.get_num_threads()
    assert events[0].device == f"cpu ({threads} threads, {kernels.library()})"  # whose products
    assert kinds.count("step") == 4 and kinds.count("rollouts") == 4
    assert kinds.count("eval") == 2  # at the start and at the end
    sandbox = [e.message for e in events if e.type == "log" and "separate process" in e.message]
    assert len(sandbox) == 1 and sandbox[0].startswith("The custom checker runs in a separate")
    rollouts = [e for e in events if e.type == "rollouts"][0]
    assert len(rollouts.rows) == 2 * 4
    row = rollouts.rows[0]
    # Each group's prompt is stored once per step, not in each of its G rows.
    assert "prompt" not in row and len(rollouts.prompts) == 2
    assert rollouts.full_rows()[5]["prompt"] == rollouts.prompts[1]  # rows 4..7: group 1
    assert set(row) >= {
        "group",
        "completion",
        "answer",
        "rewards",
        "reward",
        "advantage",
        "length",
        "truncated",
        "error",
    }
    assert set(row["rewards"]) == {"custom"}
    # Advantages of a group sum to zero (population std, every reward scored).
    by_group = {}
    for r in rollouts.rows:
        by_group.setdefault(r["group"], []).append(r["advantage"])
    assert all(abs(sum(v)) < 1e-6 for v in by_group.values())
    step = [e for e in events if e.type == "step"][0]
    for name in (
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "loss",
        "grad_norm",
        "entropy",
        "learning_rate",
        "completions/mean_length",
        "completions/clipped_ratio",
        "clip_ratio/region_mean",
        "num_tokens",
        "step_time",
        "rewards/custom/mean",
    ):
        assert name in step.metrics, name
    assert sum(step.advantage_hist["counts"]) == 8
    logged = read_events(os.path.join(run_dir, "events.jsonl"))
    assert [e.type for e in logged] == kinds
    with open(os.path.join(run_dir, "config.json")) as fh:
        assert json.load(fh)["run"]["max_steps"] == 4
    ckpts = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    assert ckpts == ["step-00000002", "step-00000004"]
    assert os.path.isfile(
        os.path.join(run_dir, "checkpoints", ckpts[-1], "adapter", "adapter_model.safetensors")
    )


def test_reward_rises_on_a_learnable_task(tiny_model_dir):
    # Full fine-tuning: on a random 0.1M model the embeddings are the quickest lever (LoRA on
    # all linear layers learns this toy task too, but needs many more steps).
    cfg = toy_config(
        tiny_model_dir,
        run={"max_steps": 16, "checkpoint_every": 100},
        data={"eval_size": 0},
        lora={"enabled": False},
        algorithm={"learning_rate": 0.01, "num_generations": 8},
    )
    rewards = [e.metrics["reward"] for e in run_all(cfg) if e.type == "step"]
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.1, rewards


def test_stop_finishes_the_step_and_checkpoints(tiny_model_dir, tmp_path):
    control = TrainControl()
    cfg = toy_config(tiny_model_dir, run={"max_steps": 50, "checkpoint_every": 100})
    events = []
    for ev in train(cfg, control, run_dir=str(tmp_path)):
        events.append(ev)
        if ev.type == "step" and ev.step == 2:
            control.stop()
    assert events[-1].status == "stopped" and events[-1].step == 2
    assert [e.step for e in events if e.type == "checkpoint"] == [2]
    assert not any(e.type == "step" and e.step > 2 for e in events)


def test_pause_holds_between_steps_and_resume_continues(tiny_model_dir):
    control = TrainControl()
    cfg = toy_config(tiny_model_dir, run={"max_steps": 3, "checkpoint_every": 100})
    gen = train(cfg, control)
    steps = []
    for ev in gen:
        if ev.type == "step":
            steps.append(ev.step)
            if ev.step == 1:
                control.pause()
                break
    # While paused the generator blocks before step 2; resume from another thread after a moment.
    timer = threading.Timer(0.3, control.resume)
    timer.start()
    assert control.paused
    rest = list(gen)
    timer.join()
    assert [e.step for e in rest if e.type == "step"] == [2, 3]
    assert rest[-1].status == "completed"


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_resume_reproduces_the_uninterrupted_run(tiny_model_dir, tmp_path, lora):
    cfg = toy_config(
        tiny_model_dir,
        run={"max_steps": 4, "checkpoint_every": 2},
        lora={"enabled": lora},
        algorithm={"beta": 0.04},
    )
    full = run_all(cfg, run_dir=str(tmp_path / "full"))
    # Interrupted run: stop after step 2 (checkpointed), then resume to 4.
    control = TrainControl()
    part_dir = str(tmp_path / "part")
    for ev in train(cfg, control, run_dir=part_dir):
        if ev.type == "step" and ev.step == 2:
            control.stop()
    resumed = run_all(cfg, run_dir=part_dir, resume=True)
    assert resumed[0].type == "run_started" and resumed[0].start_step == 2 and resumed[0].resumed

    def rollouts(events, step):
        return [e.full_rows() for e in events if e.type == "rollouts" and e.step == step][0]

    for step in (3, 4):
        a, b = rollouts(full, step), rollouts(resumed, step)
        assert [r["prompt"] for r in a] == [r["prompt"] for r in b]
        assert [r["completion"] for r in a] == [r["completion"] for r in b]
    for key in ("loss", "kl", "grad_norm", "learning_rate"):
        a = [e.metrics[key] for e in full if e.type == "step" and e.step == 4][0]
        b = [e.metrics[key] for e in resumed if e.type == "step" and e.step == 4][0]
        assert a == pytest.approx(b, abs=1e-5), key


def test_bad_dataset_ends_the_run_as_failed_with_a_message(tiny_model_dir, tmp_path):
    cfg = toy_config(tiny_model_dir, data={"source": "file", "path": str(tmp_path / "no.jsonl")})
    events = run_all(cfg)
    assert events[-1].type == "run_finished" and events[-1].status == "failed"
    assert "no.jsonl" in events[-1].message and events[-1].error is None


def test_kl_and_variants_run(tiny_model_dir):
    for algo in (
        {"beta": 0.04, "loss_type": "bnpo"},
        {"loss_type": "dr_grpo", "scale_rewards": "none", "num_iterations": 2},
        {
            "loss_type": "dapo",
            "epsilon_high": 0.28,
            "dynamic_sampling": True,
            "micro_batch_size": 3,
        },
        {"importance_sampling_level": "sequence", "num_iterations": 2, "std_type": "sample"},
    ):
        cfg = toy_config(
            tiny_model_dir,
            algorithm=algo,
            run={"max_steps": 2, "checkpoint_every": 10},
            data={"eval_size": 0},
        )
        events = run_all(cfg)
        assert events[-1].status == "completed", (algo, events[-1].message, events[-1].error)
        steps = [e for e in events if e.type == "step"]
        if algo.get("beta"):
            assert steps[0].metrics["kl"] >= 0.0
        assert all(e.metrics["grad_norm"] == e.metrics["grad_norm"] for e in steps)


def test_resume_after_a_crash_logs_each_step_once(tiny_model_dir, tmp_path):
    import shutil

    run_dir = str(tmp_path / "run")
    cfg = toy_config(tiny_model_dir, run={"max_steps": 3, "checkpoint_every": 2})
    run_all(cfg, run_dir=run_dir)
    # As if the process died after logging step 3 but before its checkpoint was written.
    shutil.rmtree(os.path.join(run_dir, "checkpoints", "step-00000003"))
    resumed = run_all(cfg.replace(run={"max_steps": 4}), run_dir=run_dir, resume=True)
    assert resumed[0].start_step == 2
    logged = read_events(os.path.join(run_dir, "events.jsonl"))
    assert [e.step for e in logged if e.type == "step"] == [1, 2, 3, 4]
    assert [e.step for e in logged if e.type == "rollouts"] == [1, 2, 3, 4]


def test_stop_after_ends_exactly_after_that_step(micro_model_dir):
    control = TrainControl()
    control.stop_after(2)
    cfg = toy_config(micro_model_dir, run={"max_steps": 10, "checkpoint_every": 100},
                     data={"eval_size": 0})  # fmt: skip
    events = run_all(cfg, control)
    assert [e.step for e in events if e.type == "step"] == [1, 2]
    assert events[-1].status == "stopped" and events[-1].step == 2
