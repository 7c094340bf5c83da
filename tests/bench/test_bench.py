"""The benchmark harness (bench/): summaries and tables, identical work on both sides, gpu.py's
CPU dry run and its fast failure without CUDA. The runs that start worker processes are slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.support.paths import BENCH

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


# --------------------------------------------------- bench/realistic.py, TRL's micro-batching


def test_trl_micro_batch_accumulates_to_one_optimizer_step(tmp_path):
    w = _workload.Workload(B=4, G=8, trl_micro_batch=8)
    t = _workload.trl_args(w, str(tmp_path))
    # 32 completions, 8 per pass: 4 passes accumulated into one optimizer step.
    assert (t["per_device_train_batch_size"], t["gradient_accumulation_steps"]) == (8, 4)
    t = _workload.trl_args(_workload.Workload(B=4, G=8), str(tmp_path))
    assert (t["per_device_train_batch_size"], t["gradient_accumulation_steps"]) == (32, 1)
    with pytest.raises(ValueError, match="not a multiple"):
        _workload.trl_args(_workload.Workload(B=4, G=8, trl_micro_batch=5), str(tmp_path))


def test_realistic_table_gives_ratios_against_the_targets():
    import realistic

    w = _workload.Workload(size="qwen2.5-0.5b-shaped@2", B=4, G=8, C=256, trl_micro_batch=8)
    ours, trl = _fake_run("ours", 1.0), _fake_run("trl", 2.0)
    ours["micro_batch_rows"] = [32.0] * 3
    res = vs_trl.summarise(w, {"ours": [ours], "trl": [trl]}, [0.5])
    res["runs"] = {"ours": [ours], "trl": [trl]}
    res["trl_defaults"] = {"trl_version": "1.16.0", "per_device_train_batch_size": 8}
    res["ratio_step_time"] = res["ours"]["median_s"] / res["trl"]["median_s"]
    table = realistic.format_table(res)
    # Peak RSS 500 / 800 MiB = 0.625 > 0.6: missed; median s/step 1.0 / 2.0 = 0.5: met.
    assert "**0.62×** (missed)" in table and "**0.50×** (met)" in table
    assert "| ours | auto: 32 rows per pass | 500 | 1.00 |" in table
    assert "8 per pass × 4 accumulated (TRL 1.16.0 default)" in table


@pytest.mark.slow
def test_trl_default_micro_batch_is_what_grpo_config_uses(tmp_path):
    import realistic
    from trl import GRPOConfig

    d = realistic.trl_defaults()
    cfg = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    assert d["per_device_train_batch_size"] == cfg.per_device_train_batch_size
    assert d["gradient_accumulation_steps"] == cfg.gradient_accumulation_steps
    # steps_per_generation defaults to the accumulation: one generation per optimizer step.
    assert d["steps_per_generation"] is None and cfg.steps_per_generation == 1


@pytest.mark.slow
def test_trl_worker_generates_once_per_accumulated_step(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    w = _workload.Workload(size="micro", B=2, G=4, C=8, steps=2, warmup=1, threads=1)
    w.trl_micro_batch = 4  # 8 completions as 2 passes of 4
    trl = _worker("trl", w)
    assert trl["prompts_match"] and len(trl["step_times"]) == 2
    assert len(trl["generate_times"]) == 2  # one generation of all 8 per optimizer step


# ------------------------------------------------------------------------ bench/gpu.py --all


def test_gpu_all_records_failures_and_budget_overruns_and_goes_on():
    import gpu_checks

    p = gpu_checks.plan(True, 4, 8, 256)
    rec = gpu_checks.run_check("eos", p, {"bandwidth": 1e9}, 30.0)  # no models check ran
    assert rec["status"] == "failed" and "the models check did not finish" in rec["error"]
    ctx = {"bandwidth": 1e9, "folders": {"eos": "/nonexistent", "full": "", "main": ""}}
    rec = gpu_checks.run_check("eos", p, ctx, 0.3)  # a process stopped at its budget
    assert rec["status"] == "failed" and rec["error"] == "stopped at its time budget (0.3 s)"
    assert rec["budget_s"] == 0.3 and rec["seconds"] < 5
    rec = gpu_checks.run_check("estimate", p, {"bandwidth": 1e9}, 30.0)
    assert rec["status"] == "failed" and "no run of ours finished" in rec["error"]


def test_gpu_all_skips_what_the_budget_leaves_no_time_for(tmp_path):
    import gpu

    out = tmp_path / "all.json"
    code = gpu.main(["--all", "--dry-run-cpu", "--budget", "5", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 1 and data["dry_run"] and data["budget_s"] == 5
    assert list(data["checks"]) == list(_gpu_order())
    assert {r["status"] for r in data["checks"].values()} == {"skipped"}
    assert data["checks"]["eos"]["error"].startswith("skipped: ")


def _gpu_order() -> tuple[str, ...]:
    import gpu_checks

    return gpu_checks.ORDER


@pytest.mark.slow
def test_gpu_all_dry_run_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    out = tmp_path / "all.json"
    cmd = [sys.executable, os.path.join(BENCH, "gpu.py"), "--all", "--dry-run-cpu"]
    proc = subprocess.run(cmd + ["--json", str(out)], capture_output=True, text=True)
    data = json.loads(out.read_text())
    checks = data["checks"]
    assert proc.returncode == 0, {n: r["error"] for n, r in checks.items()}
    assert list(checks) == list(_gpu_order())
    assert checks["eos"]["figures"]["sampled_lengths"] == [1.0] * 4
    assert checks["eos"]["figures"]["train_mean_length"] == [1.0]
    assert checks["full_finetune"]["figures"]["fraction_changed"] > 0.95
    assert all(v["ms_per_token"] > 0 for v in checks["decode"]["figures"]["variants"].values())
    for mode in ("lora", "qlora"):
        f = checks[mode]["figures"]
        assert f["prompts_match"] and f["ours"]["s_per_step"] > 0 and f["trl"]["s_per_step"] > 0
    assert checks["estimate"]["status"] in ("ok", "unavailable")
    assert "not a measurement" in proc.stdout


def test_step_bound_removes_the_small_operations_it_names_from_the_decode_it_runs():
    # bench/step_bound.py edits decode_script.py's text before it is compiled: every edit must
    # still find its line (it stops with a message otherwise), and the edited step must compile
    # and leave out the operations it claims to. Run in a subprocess: the edit patches modules.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import step_bound, torch\n"
        "from grpo_desktop.engine.sampling import decode_script\n"
        "before = decode_script.SOURCE\n"
        "step_bound._remove_small_operations()\n"
        "after = decode_script.SOURCE\n"
        "assert after != before\n"
        "for op in ('rms_norm(h, [E], input', 'softmax', 'silu', 'roll', 'L - 1] ='):\n"
        "    assert op in before and op not in after, op\n"
        "torch.jit.CompilationUnit(after)\n"
        "import transformers.models.llama.modeling_llama as llama\n"
        "q = torch.randn(2, 3); assert llama.apply_rotary_pos_emb(q, q, 0, 0)[0] is q\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, BENCH], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")


@pytest.mark.slow
def test_step_bound_times_both_sides_and_reports_the_share():
    cmd = [sys.executable, os.path.join(BENCH, "step_bound.py"), "--rounds", "1", "--steps", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    for side in ("full", "bound"):
        assert summary[side]["step"] > 0 and summary[side]["time/generate"] > 0
    assert 0 < summary["bound_share"] < 1.5
