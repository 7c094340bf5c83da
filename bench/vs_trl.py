"""GRPO Desktop's engine against TRL's GRPOTrainer on identical work, on the CPU.

    python bench/vs_trl.py --quick          # ~3M model, LoRA, 2 rounds: under 3 minutes on 2 cores
    python bench/vs_trl.py                  # both sizes (~3M, ~25M) × LoRA r 16 / full fine-tuning
    python bench/vs_trl.py --sizes small --modes full --rounds 3 --json out.json

Both sides train the same randomly initialised Llama (engine.models.tiny, local char tokenizer)
on the same prompts and settings (bench/_workload.py says exactly what is matched). Every run is
a worker process (`--worker ours|trl`), so peak RSS is each side's own; the sides alternate
within each round so background load hits both alike; each worker's first step is an untimed
warm-up. Printed per configuration: median s/step, completions/s and tokens/s of each side, the
ratio ours/TRL, peak RSS, median process CPU time per step, the load average, and our step by
phase beside TRL's generation time. The last line is `ratio_completions_per_s=X.XX` (ours ÷ TRL;
with several configurations, the smallest). Not on GPUs (bench/gpu.py) or the GUI.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _workload import Workload, dataset_file, model_dir  # noqa: E402

from grpo_desktop import OPENMP_SPINCOUNT  # noqa: E402 (the tree's, put on sys.path by _workload)

PHASE_LABELS = {
    "time/generate": "generation",
    "time/rewards": "rewards",
    "time/ref": "reference log-probs",
    "time/update": "policy forward+backward",
    "time/optimizer": "optimizer",
}


def run_side(side: str, w: Workload, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--config", w.to_json()]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env["HF_DATASETS_OFFLINE"] = "1"
    # Both sides get the OpenMP spin the app sets when grpo_desktop is imported (see
    # grpo_desktop/__init__.py), whichever imports torch first: the same runtime for both.
    env.setdefault("GOMP_SPINCOUNT", OPENMP_SPINCOUNT)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{side} worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def wait_for_quiet(limit: float, max_wait: float) -> float:
    """Poll the 1-minute load average until it is below `limit` or `max_wait` seconds passed."""
    deadline = time.time() + max_wait
    load = os.getloadavg()[0]
    while load >= limit and time.time() < deadline:
        time.sleep(15)
        load = os.getloadavg()[0]
    return load


def measure(w: Workload, rounds: int, timeout: float, log) -> dict:
    runs: dict[str, list[dict]] = {"ours": [], "trl": []}
    loads = []
    for r in range(rounds):
        order = ("ours", "trl") if r % 2 == 0 else ("trl", "ours")
        for side in order:
            load = os.getloadavg()[0]
            loads.append(load)
            t0 = time.perf_counter()
            out = run_side(side, w, timeout)
            runs[side].append(out)
            med = statistics.median(out["step_times"])
            products = f", products: {out['products']}" if "products" in out else ""
            if "decode_kernels" in out:  # ops/native.py's fused decode kernels, or why not
                products += f"; {out['decode_kernels'].split(' (')[0]}"
            log(
                f"  {w.label} round {r + 1} {side:4s}: median {med:.3f} s/step "
                f"(load {load:.2f}, worker {time.perf_counter() - t0:.0f} s{products})"
            )
    return summarise(w, runs, loads)


def summarise(w: Workload, runs: dict[str, list[dict]], loads: list[float]) -> dict:
    out: dict = {"workload": dataclasses.asdict(w), "label": w.label, "load_avg": loads}
    for side, results in runs.items():
        times = [t for res in results for t in res["step_times"]]
        med = statistics.median(times)
        cpu = [t for res in results for t in res.get("cpu_times", [])]
        gen = [t for res in results for t in res.get("generate_times", [])]
        out[side] = {
            "generate_s": statistics.median(gen) if gen else float("nan"),
            "step_times": times,
            "median_s": med,
            "median_cpu_s": statistics.median(cpu) if cpu else float("nan"),
            "completions_per_s": w.completions_per_step / med,
            "tokens_per_s": w.tokens_per_step / med,
            "peak_rss_mb": max(res["peak_rss_mb"] for res in results),
            "threads": results[0]["threads"],
        }
    phases = {}
    for key in PHASE_LABELS:
        values = [v for res in runs["ours"] for v in res["phases"][key]]
        phases[key] = statistics.median(values)
    phases["other"] = max(0.0, out["ours"]["median_s"] - sum(phases.values()))
    out["ours"]["phases"] = phases
    out["ours"]["mean_length"] = statistics.mean(
        v for res in runs["ours"] for v in res["mean_length"]
    )
    out["prompts_match"] = all(res["prompts_match"] for res in runs["trl"])
    out["ratio_completions_per_s"] = (
        out["ours"]["completions_per_s"] / out["trl"]["completions_per_s"]
    )
    out["ratio_peak_rss"] = out["ours"]["peak_rss_mb"] / out["trl"]["peak_rss_mb"]
    out["ratio_cpu_time"] = out["trl"]["median_cpu_s"] / out["ours"]["median_cpu_s"]
    return out


def format_table(results: list[dict]) -> str:
    head = (
        "| config | side | s/step (median) | completions/s | tokens/s | peak RSS MB | "
        "ours/TRL completions/s | CPU s/step | load avg |\n|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for res in results:
        load = f"{min(res['load_avg']):.2f}–{max(res['load_avg']):.2f}"
        for side in ("ours", "trl"):
            s = res[side]
            ratio = f"**{res['ratio_completions_per_s']:.2f}×**" if side == "ours" else ""
            cpu = f"{s['median_cpu_s']:.3f}"
            cpu += f" ({res['ratio_cpu_time']:.2f}×)" if side == "ours" else ""
            lines.append(
                f"| {res['label']} | {side} | {s['median_s']:.3f} | {s['completions_per_s']:.1f} | "
                f"{s['tokens_per_s']:.0f} | {s['peak_rss_mb']:.0f} | {ratio} | "
                f"{cpu} | {load if side == 'ours' else ''} |"
            )
    return "\n".join(lines)


def format_breakdown(results: list[dict]) -> str:
    keys = [*PHASE_LABELS, "other"]
    names = [*PHASE_LABELS.values(), "other"]
    lines = [
        "| config | " + " | ".join(names) + " | step | TRL's generation |",
        "|---" * (len(names) + 3) + "|",
    ]
    for res in results:
        ph, step = res["ours"]["phases"], res["ours"]["median_s"]
        cells = [f"{ph[k]:.3f} ({100 * ph[k] / step:.0f}%)" for k in keys]
        trl_gen = res["trl"]["generate_s"]
        lines.append(
            f"| {res['label']} | " + " | ".join(cells) + f" | {step:.3f} | {trl_gen:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="~3M model, LoRA, 2 rounds, 3 steps")
    p.add_argument("--sizes", default="small,medium")
    p.add_argument("--modes", default="lora,full")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="timed steps per worker run")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--C", type=int, default=64)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--loss-type", default="grpo")
    p.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: default)")
    p.add_argument("--wait-load", type=float, default=0.0, help="wait until load avg is below this")
    p.add_argument("--max-wait", type=float, default=1800.0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per worker run")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", choices=("ours", "trl"), help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        from _workers import run_worker

        print(json.dumps(run_worker(args.worker, args.config)), flush=True)
        return 0

    if args.quick:
        sizes, modes = ["small"], ["lora"]
        rounds, steps = min(args.rounds, 2), args.steps or 3
    else:
        sizes, modes = args.sizes.split(","), args.modes.split(",")
        rounds, steps = args.rounds, args.steps or 4

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results = []
    for size in sizes:
        model_dir(size)
        dataset_file()
        for mode in modes:
            w = Workload(
                size=size,
                lora=mode == "lora",
                B=args.B,
                G=args.G,
                C=args.C,
                steps=steps,
                warmup=args.warmup,
                beta=args.beta,
                loss_type=args.loss_type,
                threads=args.threads,
            )
            if args.wait_load > 0:
                load = wait_for_quiet(args.wait_load, args.max_wait)
                log(f"{w.label}: load average {load:.2f}")
            results.append(measure(w, rounds, args.timeout, log))

    w0 = results[0]["workload"]
    print(
        f"B={w0['B']} G={w0['G']} C={w0['C']} (pinned), loss {w0['loss_type']}, beta {w0['beta']}, "
        f"float32, {rounds} rounds × {steps} timed steps per side, "
        f"torch threads ours/TRL {results[0]['ours']['threads']}/{results[0]['trl']['threads']}, "
        f"CPU cores {os.cpu_count()}"
    )
    match = all(r["prompts_match"] for r in results)
    print(f"TRL's prompt tokens equal ours: {'yes' if match else 'NO'}")
    print(format_table(results))
    print("\nOur step, median seconds per phase:")
    print(format_breakdown(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    ratio = min(r["ratio_completions_per_s"] for r in results)
    print(f"ratio_completions_per_s={ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
