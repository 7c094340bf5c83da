"""The built-in demo: disjoint problem pools, the shipped model, `grpo-desktop eval`, and learning.

The shipped weights are read from the package (importlib.resources) with the hub offline; the
slow test runs a shortened demo and checks that GRPO raises held-out accuracy and the reward.
"""

from __future__ import annotations

import json
import os
from importlib import resources

import pytest

from grpo_desktop.cli import main
from grpo_desktop.engine.config.demo import DEMO_STEPS, demo_config
from grpo_desktop.engine.data.arithmetic import (
    POOLS,
    arithmetic_problems,
    arithmetic_splits,
    pool_of,
    pool_size,
    problem_count,
)
from grpo_desktop.engine.data.dataset import load_data


def _pool(question: str) -> str:
    a, b = question.removeprefix("What is ").removesuffix("?").split(" × ")
    return pool_of(int(a), int(b))


# ----------------------------------------------------------------------------- problem pools


def test_pools_split_every_level_two_problem_once():
    # Every problem is in exactly one pool; the shares are about 10 / 50 / 40 %.
    sizes = {p: pool_size(2, p) for p in POOLS}
    assert sum(sizes.values()) == problem_count(2) == 8100
    assert 0.08 < sizes["test"] / 8100 < 0.12 and 0.45 < sizes["sft"] / 8100 < 0.55
    # A fixed hash, not a seed: the lessons' 17 × 24 is always a GRPO training problem.
    assert pool_of(17, 24) == "train"
    for pool in POOLS:
        drawn = arithmetic_problems(50, 2, seed=4, pool=pool)
        assert {_pool(p.question) for p in drawn} == {pool}
        assert drawn == arithmetic_problems(50, 2, seed=4, pool=pool)
    everything = arithmetic_problems(sizes["test"], 2, seed=1, pool="test")
    assert len({p.question for p in everything}) == sizes["test"]
    with pytest.raises(ValueError, match="'test' pool"):
        arithmetic_problems(sizes["test"] + 1, 2, seed=1, pool="test")
    with pytest.raises(ValueError, match="no pools"):
        arithmetic_problems(5, 1, pool="sft")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_demo_data_never_meets_the_sft_pool(seed):
    # Training problems come from the train pool and held-out ones from the test pool, whatever
    # the run's seed: neither overlaps the problems the demo model was supervised on.
    data = load_data(demo_config().data, seed=seed)
    assert {_pool(e.problem) for e in data.train} == {"train"}
    assert {_pool(e.problem) for e in data.eval} == {"test"}
    train, held = arithmetic_splits(100, 20, 2, seed)
    assert not {p.question for p in train} & {p.question for p in held}


# ----------------------------------------------------------------------------- the shipped model


def test_shipped_demo_model_loads_offline_and_answers_in_format(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import torch

    from grpo_desktop.engine.grpo.evaluate import evaluate
    from grpo_desktop.engine.models.loading import builtin_model_path, load_policy
    from grpo_desktop.engine.variants.eval_target import held_out_examples

    shipped = resources.files("grpo_desktop") / "resources" / "demo_model"
    assert builtin_model_path("demo") == str(shipped)  # the package's copy, not a random model
    weights = shipped / "model.safetensors"
    assert weights.is_file() and os.path.getsize(str(weights)) <= 20 * 2**20
    cfg = demo_config().replace(lora={"enabled": False}, algorithm={"beta": 0.0})
    policy = load_policy(cfg)
    assert policy.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())
    examples = held_out_examples(cfg, 8, seed=0)
    result = evaluate(policy, examples, cfg, step=0, n_samples=8)
    assert result.format_rate >= 0.75, result.samples
    first = result.samples[0]["completion"]
    assert first.startswith("<think>") and "</think><answer>" in first, first


@pytest.mark.slow  # about a minute on 2 cores; eval itself is covered by the next test
def test_eval_demo_prints_one_json_line(capsys):
    assert main(["eval", "--demo", "--n", "8", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["n"] == 8 and result["seed"] == 3
    for key in ("accuracy", "format_rate", "format_rate_t1"):
        assert 0.0 <= result[key] <= 1.0


def test_eval_reads_a_runs_latest_checkpoint(tmp_path, capsys, micro_model_dir):
    out = str(tmp_path / "run")
    cfg = demo_config().replace(
        model={"name_or_path": micro_model_dir},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 4},
        run={"max_steps": 2, "checkpoint_every": 1, "eval_every": 0},
        data={"eval_size": 2},
    )
    path = tmp_path / "cfg.json"
    path.write_text(cfg.to_json())
    assert main(["train", str(path), "--out", out, "--quiet", "--seed", "5"]) == 0
    capsys.readouterr()
    assert main(["eval", out, "--n", "4", "--no-sample"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["step"], result["n"]) == (2, 4) and "format_rate_t1" not in result
    with open(os.path.join(out, "config.json")) as fh:
        assert json.load(fh)["run"]["seed"] == 5


def test_eval_needs_exactly_one_target(capsys):
    assert main(["eval"]) == 2
    assert "--demo" in capsys.readouterr().err


def test_demo_preset_is_valid_and_sized_for_a_laptop():
    cfg = demo_config()
    assert cfg.validate() == []
    assert cfg.run.max_steps == DEMO_STEPS
    assert (cfg.rewards.accuracy_weight, cfg.rewards.format_weight) == (1.0, 0.2)


# ----------------------------------------------------------------------------- GRPO learns


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_short_demo_run_raises_accuracy_and_reward():
    from grpo_desktop.engine.grpo.trainer import train

    cfg = demo_config().replace(
        run={"max_steps": 60, "eval_every": 0, "seed": 1}, data={"eval_size": 100}
    )
    events = list(train(cfg))
    assert events[-1].status == "completed", events[-1].message
    evals = [e for e in events if e.type == "eval"]
    rewards = [e.metrics["reward"] for e in events if e.type == "step"]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert evals[-1].accuracy >= evals[0].accuracy + 0.10, [e.accuracy for e in evals]
    assert last > first + 0.1, rewards
