"""`python bench/gpu.py --all`: every CUDA check in one command, one JSON.

    python bench/gpu.py --all --json gpu_all.json          # one H200: about 5 of its 8 min
    python bench/gpu.py --all --dry-run-cpu --json /tmp/dry.json   # the same path, tiny, on a CPU

The checks, in order, each in its own process under its own time budget (one that runs over is
stopped and recorded as failed; one that fails does not stop the others): models (builds
engine/models/shapes.py's qwen2.5-1.5b-shaped at its full 28 layers, the Llama-3-shaped model
that always emits <|end_of_text|>, and the 0.5B-shaped one), eos (that Llama stops after one
token when sampling, evaluating and training), full_finetune (AdamW at lr 1e-5 moves > 95 % of
the bf16 weights thanks to float32 master weights; in pure bf16 most updates round away), decode
(our sampler's ms/token on the 1.5B shape against the bandwidth floor, with and without CUDA
graphs), lora and qlora (ours against TRL on the 1.5B shape), and estimate (engine/estimate/fit.py
against each run's max_memory_allocated). bench/README.md has the table. The JSON holds per check
its status, seconds, budget, figures and error, rewritten after every check; `--budget` (460 s)
bounds the whole run, `--only eos,decode` runs a subset.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _gpu_metrics import gpu_metrics  # noqa: E402
from _workload import Workload, dataset_file, model_dir, our_config  # noqa: E402
from vs_trl import run_side, summarise  # noqa: E402

ORDER = ("models", "eos", "full_finetune", "decode", "lora", "qlora", "estimate")
BUDGETS = {  # seconds on one H200 (expected: about half of each)
    "models": 120,
    "eos": 60,
    "full_finetune": 90,
    "decode": 90,
    "lora": 150,
    "qlora": 180,
    "estimate": 45,
}
BUDGET = 460.0  # seconds in all: 8 minutes less the interpreter's start and the JSON
MIN_LEFT = 10.0
DRY_SCALE, DRY_BUDGET = 6.0, 2400.0  # --dry-run-cpu: 2 shared CPU cores, not an H200
EOS_TEXT = "<|end_of_text|>"


def plan(dry: bool, B: int, G: int, C: int) -> dict[str, Any]:
    """Models, device and sizes of every check: the real ones, or tiny ones for --dry-run-cpu."""
    if dry:
        return dict(
            device="cpu",
            dtype="float32",
            main="tiny",
            full="llama-3-shaped@2",
            eos="llama-3-shaped@2",
            B=2,
            G=4,
            C=8,
            steps=1,
            warmup=1,
            full_steps=2,
            full_C=4,
            decode_lengths=(2, 6),
        )
    return dict(
        device="cuda",
        dtype="bfloat16",
        main="qwen2.5-1.5b-shaped@28",
        full="qwen2.5-0.5b-shaped@2",
        eos="llama-3-shaped@2",
        B=B,
        G=G,
        C=C,
        steps=2,
        warmup=1,
        full_steps=3,
        full_C=32,
        decode_lengths=(16, 144),
    )


def probe(name: str, spec: dict, timeout: float) -> dict:
    """Run one _gpu_probes probe in its own process; its result dict (raises on a crash)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--probe", name, "--spec", json.dumps(spec)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    # Its own process group: at the budget the probe and anything it started (the reward
    # checker's process) are killed together, so no leftover child keeps the pipes open.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the {name} probe failed ({proc.returncode}):\n{stderr[-4000:]}")
    return json.loads(lines[-1])


def _workload(p: dict, quant: str) -> Workload:
    return Workload(
        size=p["main"],
        lora=True,
        B=p["B"],
        G=p["G"],
        C=p["C"],
        steps=p["steps"],
        warmup=p["warmup"],
        device=p["device"],
        dtype=p["dtype"],
        quant=quant,
    )


def check_models(p: dict, ctx: dict, budget: float) -> dict:
    spec = {"main": p["main"], "full": p["full"], "eos": p["eos"], "favour": EOS_TEXT}
    out = probe("models", spec, budget)
    if out["status"] == "ok":
        ctx["folders"] = out["figures"]["folders"]
    return out


def _need(ctx: dict) -> dict:
    if "folders" not in ctx:
        raise RuntimeError("the models check did not finish: no model to run on")
    return ctx["folders"]


def check_eos(p: dict, ctx: dict, budget: float) -> dict:
    spec = {"model": _need(ctx)["eos"], "device": p["device"], "dtype": p["dtype"]}
    return probe("eos", spec, budget)


def check_full_finetune(p: dict, ctx: dict, budget: float) -> dict:
    spec = {"model": _need(ctx)["full"], "device": p["device"], "dtype": "bfloat16"}
    spec.update(steps=p["full_steps"], C=p["full_C"])
    out = probe("full_finetune", spec, budget)
    if "config" in out.get("figures", {}):
        ctx.setdefault("runs", {})["full_finetune"] = {
            "config": out["figures"].pop("config"),
            "peak_cuda_mb": out["figures"]["peak_cuda_mb"],
        }
    return out


def check_decode(p: dict, ctx: dict, budget: float) -> dict:
    _need(ctx)
    import dataclasses

    spec = {
        "workload": dataclasses.asdict(_workload(p, "none")),
        "lengths": list(p["decode_lengths"]),
        "bandwidth": ctx["bandwidth"],
    }
    return probe("decode", spec, budget)


def _side_by_side(p: dict, ctx: dict, budget: float, quant: str) -> dict:
    """Ours then TRL on the same work; each side's failure is recorded apart."""
    _need(ctx)
    w = _workload(p, quant)
    deadline = time.perf_counter() + budget
    runs: dict[str, list[dict]] = {"ours": [], "trl": []}
    errors = {}
    for side, share in (("ours", 0.4), ("trl", 1.0)):
        left = deadline - time.perf_counter()
        try:
            runs[side].append(run_side(side, w, max(1.0, left * share)))
        except Exception as exc:  # noqa: BLE001 - recorded, the other side still runs
            errors[side] = _error_text(exc)
    figures: dict[str, Any] = {"workload": w.label, "errors": errors}
    if runs["ours"]:
        cfg = our_config(w, model_dir(w.size, w.seed), dataset_file(w.seed))
        ours = runs["ours"][0]
        ctx.setdefault("runs", {})[w.label] = {
            "config": cfg.to_dict(),
            "peak_cuda_mb": ours.get("peak_cuda_mb", float("nan")),
            "rows_per_pass": (ours.get("micro_batch_rows") or [None])[-1],
        }
    if errors:
        figures["runs"] = runs
        side = ", ".join(errors)
        return {"status": "failed", "error": f"{side} failed: {errors}", "figures": figures}
    res = summarise(w, runs, [os.getloadavg()[0]])
    res["runs"] = runs
    res["gpu"] = gpu_metrics(res, w, ctx["bandwidth"])
    figures.update(
        {
            side: {
                "s_per_step": res[side]["median_s"],
                "step_times": res[side]["step_times"],
                **res["gpu"][side],
            }
            for side in ("ours", "trl")
        }
    )
    figures.update(
        step_ratio=res["gpu"]["step_ratio"],
        memory_ratio=res["gpu"]["memory_ratio"],
        targets=res["gpu"]["targets"],
        prompts_match=res["prompts_match"],
    )
    return {"status": "ok", "figures": figures}


def check_lora(p: dict, ctx: dict, budget: float) -> dict:
    return _side_by_side(p, ctx, budget, "none")


def check_qlora(p: dict, ctx: dict, budget: float) -> dict:
    return _side_by_side(p, ctx, budget, "4bit")


def check_estimate(p: dict, ctx: dict, budget: float) -> dict:
    runs = ctx.get("runs", {})
    if not runs:
        raise RuntimeError("no run of ours finished, so there is no measured memory to compare")
    out = probe("estimate", {"runs": runs}, budget)
    if "unavailable" in out.get("figures", {}):
        return {"status": "unavailable", "error": out["figures"]["unavailable"], "figures": {}}
    return out


CHECKS = {name: globals()[f"check_{name}"] for name in ORDER}


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"stopped at its time budget ({exc.timeout:.3g} s)"
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[-4000:]


def run_check(name: str, p: dict, ctx: dict, budget: float) -> dict:
    """One check under `budget` seconds: its record for the JSON (never raises)."""
    t0 = time.perf_counter()
    try:
        out = CHECKS[name](p, ctx, budget)
        if "status" not in out:  # an in-process check's figures
            out = {"status": "ok", "figures": out}
    except Exception as exc:  # noqa: BLE001 - one failure must not lose the other checks
        out = {"status": "failed", "error": _error_text(exc), "figures": {}}
    return {
        "status": out["status"],
        "seconds": round(time.perf_counter() - t0, 2),
        "budget_s": round(budget, 1),
        "figures": out.get("figures", {}),
        "error": out.get("error"),
    }


def summary_lines(checks: dict) -> list[str]:
    lines = ["| check | status | seconds | budget s | figures or error |", "|---|---|---|---|---|"]
    for name, rec in checks.items():
        f = rec["figures"]
        note = rec["error"] or ""
        if rec["status"] == "ok":
            note = _headline(name, f)
        lines.append(
            f"| {name} | {rec['status']} | {rec['seconds']:.0f} | {rec['budget_s']:.0f} | "
            f"{note.splitlines()[-1][:160] if note else ''} |"
        )
    return lines


def _headline(name: str, f: dict) -> str:
    if name == "eos":
        return f"lengths {f['sampled_lengths']}, eval {f['eval_mean_length']}"
    if name == "full_finetune":
        return f"{f['fraction_changed']:.1%} of weights changed in {f['steps']} steps"
    if name == "decode":
        parts = [
            f"{k} {v['ms_per_token']:.2f} ms/token ({v['x_floor']:.1f}× floor)"
            for k, v in f["variants"].items()
        ]
        return "; ".join(parts) + f"; floor {f['floor_ms']:.3f} ms"
    if name in ("lora", "qlora"):
        return (
            f"s/step ours {f['ours']['s_per_step']:.2f} / TRL {f['trl']['s_per_step']:.2f} "
            f"({f['step_ratio']:.2f}×), peak MB {f['ours']['peak_cuda_mb']:.0f} / "
            f"{f['trl']['peak_cuda_mb']:.0f}"
        )
    if name == "estimate":
        return "; ".join(
            f"{k}: {v['estimate_mb']:.0f} MB est. vs {v['measured_mb']:.0f}" for k, v in f.items()
        )
    return ""


def run_all(args, bandwidth_fn) -> int:
    """Every check (or `--only`'s), the JSON rewritten after each; exit code 0 when every check
    that ran is ok (or unavailable), 1 otherwise."""
    start = time.perf_counter()
    p = plan(args.dry_run_cpu, args.B, args.G, args.C)
    scale = args.budget_scale * (DRY_SCALE if args.dry_run_cpu else 1.0)
    total = args.budget or (DRY_BUDGET if args.dry_run_cpu else BUDGET)
    names = args.only.split(",") if args.only else list(ORDER)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        print(f"Unknown check(s) {unknown}: choose from {', '.join(ORDER)}.", file=sys.stderr)
        return 2
    if "models" not in names:
        names.insert(0, "models")  # every other check needs the models (cached: quick)
    ctx: dict[str, Any] = {"bandwidth": bandwidth_fn(p["device"])}
    result = {
        "device": _device_name(p["device"]),
        "dry_run": bool(args.dry_run_cpu),
        "plan": p,
        "bandwidth_gb_s": ctx["bandwidth"] / 1e9,
        "budget_s": total,
        "checks": {},
    }
    for name in [n for n in ORDER if n in names]:
        left = total - (time.perf_counter() - start)
        if left < MIN_LEFT:
            rec = {"status": "skipped", "seconds": 0.0, "budget_s": 0.0, "figures": {}}
            rec["error"] = f"skipped: {left:.0f} s of the {total:.0f} s budget left"
        else:
            budget = min(BUDGETS[name] * scale, left)
            print(f"{name}: up to {budget:.0f} s", file=sys.stderr, flush=True)
            rec = run_check(name, p, ctx, budget)
        result["checks"][name] = rec
        result["seconds"] = round(time.perf_counter() - start, 1)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1, default=str)
    if args.dry_run_cpu:
        print("--dry-run-cpu: tiny models on the CPU, a check of the script, not a measurement")
    print(f"{result['device']}; {result['seconds']:.0f} s of {total:.0f} s")
    print("\n".join(summary_lines(result["checks"])))
    print(f"wrote {args.json}")
    bad = [n for n, r in result["checks"].items() if r["status"] in ("failed", "skipped")]
    return 1 if bad else 0


def _device_name(device: str) -> str:
    if device != "cuda":
        return "CPU dry run (tiny models: no meaning)"
    import torch

    return torch.cuda.get_device_name()


def main(argv: list[str] | None = None) -> int:
    """Only the probe entry point: `--probe NAME --spec JSON` (run_all is reached via gpu.py)."""
    import argparse

    p = argparse.ArgumentParser(description="A probe of bench/gpu.py --all (internal).")
    p.add_argument("--probe", required=True)
    p.add_argument("--spec", required=True)
    args = p.parse_args(argv)
    from _gpu_probes import run_probe

    print(json.dumps(run_probe(args.probe, json.loads(args.spec)), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
