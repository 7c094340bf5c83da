"""The benchmark harness (bench/): summaries and tables, identical work on both sides, gpu.py's
CPU dry run and its fast failure without CUDA. The runs that start worker processes are slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import _workload  # noqa: E402
import vs_trl  # noqa: E402


def _fake_run(side: str, step: float) -> dict:
    out = {"side": side, "step_times": [step, step * 1.5, step * 0.9], "threads": 2}
    out["cpu_times"] = [t * 1.2 for t in out["step_times"]]
    out.update(peak_rss_mb=500.0 if side == "ours" else 800.0, generate_times=[step / 2])
    if side == "ours":
        phases = {"time/generate": 0.4, "time/rewards": 0.0, "time/ref": 0.1}
        phases.update({"time/update": 0.3, "time/optimizer": 0.05})
        out.update(phases={k: [v] * 3 for k, v in phases.items()}, mean_length=[64.0] * 3)
    else:
        out["prompts_match"] = True
    return out


def test_summary_uses_medians_and_ratios():
    w = _workload.Workload(B=4, G=8, C=64)
    res = vs_trl.summarise(
        w, {"ours": [_fake_run("ours", 1.0)], "trl": [_fake_run("trl", 2.0)]}, [0.5]
    )
    # Medians 1.0 s and 2.0 s: 32 completions per step -> 32/s and 16/s, ratio 2.
    assert res["ours"]["completions_per_s"] == pytest.approx(32.0)
    assert res["trl"]["tokens_per_s"] == pytest.approx(16.0 * 64)
    assert res["ratio_completions_per_s"] == pytest.approx(2.0)
    assert res["ratio_peak_rss"] == pytest.approx(500 / 800)
    assert res["ours"]["median_cpu_s"] == pytest.approx(1.2)
    assert res["ratio_cpu_time"] == pytest.approx(2.0)
    # Phases sum to 0.85 s of the 1.0 s step: the other 0.15 s is "other".
    assert res["ours"]["phases"]["other"] == pytest.approx(0.15)
    table = vs_trl.format_table([res]) + vs_trl.format_breakdown([res])
    assert "**2.00×**" in table and "0.150 (15%)" in table


def test_our_config_pins_the_work_and_trl_args_match_it(tmp_path):
    w = _workload.Workload(size="micro", lora=False, B=2, G=4, C=16, steps=2, warmup=1)
    cfg = _workload.our_config(w, "model", str(tmp_path / "data.jsonl"))
    a = cfg.algorithm
    assert (a.min_completion_length, a.max_completion_length) == (16, 16)
    assert (a.prompts_per_step, a.num_generations, cfg.run.max_steps) == (2, 4, 3)
    assert not cfg.lora.enabled and cfg.data.system_prompt == "" and cfg.data.eval_size == 0
    t = _workload.trl_args(w, str(tmp_path))
    assert t["per_device_train_batch_size"] == 8 and t["num_generations"] == 4
    assert t["generation_kwargs"] == {"min_new_tokens": 16} and t["max_completion_length"] == 16
    assert (t["beta"], t["loss_type"], t["max_steps"]) == (a.beta, a.loss_type, 3)
    rows = _workload.problems(20)
    assert len({len(r["question"]) for r in rows}) == 1  # same prompt length: order cannot matter


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_gpu_bench_stops_at_once_without_cuda(capsys):
    import gpu

    assert gpu.main(["--json", os.devnull]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def _worker(side: str, w: _workload.Workload) -> dict:
    cmd = [sys.executable, os.path.join(BENCH, "vs_trl.py"), "--worker", side]
    out = subprocess.run(cmd + ["--config", w.to_json()], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_both_workers_do_the_same_work(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    w = _workload.Workload(size="micro", B=2, G=4, C=8, steps=2, warmup=1, threads=1)
    ours, trl = _worker("ours", w), _worker("trl", w)
    assert trl["prompts_match"]  # TRL's chat-templated prompt tokens equal ours
    assert ours["mean_length"] == [8.0, 8.0]  # pinned length: EOS never shortened the work
    assert len(ours["step_times"]) == len(trl["step_times"]) == 2  # warm-up step not timed
    assert ours["peak_rss_mb"] > 0 and trl["peak_rss_mb"] > 0


@pytest.mark.slow
def test_gpu_bench_dry_run_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    out = tmp_path / "gpu.json"
    cmd = [sys.executable, os.path.join(BENCH, "gpu.py"), "--dry-run-cpu", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["dry_run"] and [r["label"] for r in data["results"]] == ["tiny/lora", "tiny/qlora"]
    assert all(r["gpu"]["ours"]["decode_tokens_per_s"] > 0 for r in data["results"])
