"""Ours against TRL's GRPOTrainer on the Qwen2.5-0.5B-shaped model with its real vocabulary,
each side with its own default micro-batching, side by side in one run.

    python bench/realistic.py --quick                 # a check of the script: tiny work, ~2 min
    nice -n 10 python bench/realistic.py --wait-load 1.0 --json realistic.json  # 25-40 min idle

The model is engine/models/shapes.py's qwen2.5-0.5b-shaped (the real 151,936-row vocabulary and
byte-level BPE tokenizer) with `--layers` random layers (2 to 4), cached in bench/memory.py's
folder. Both sides do bench/_workload.py's work on the CPU in float32 (LoRA r 16, B 4 × G 8,
exactly 256 tokens, β 0.04, one update per batch); only how each splits the 32 completions into
passes differs: ours micro-batch "auto", TRL its installed GRPOConfig's default
`per_device_train_batch_size` with gradient accumulation up to the 32. Each side runs in its own
worker process (ours first), after `--warmup` untimed steps. Prints a markdown table (peak RSS,
s/step, generation time, rows per pass) and the ratios ours/TRL against the targets (≤ 0.6×
each), with the load average; `--json` writes everything. Not on a GPU (bench/gpu.py), not
between checkouts (bench/memory.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _workload import Workload, dataset_file, model_dir  # noqa: E402
from vs_trl import run_side, summarise, wait_for_quiet  # noqa: E402

SHAPE = "qwen2.5-0.5b-shaped"
TARGET = 0.6  # ours ÷ TRL, peak RSS and s/step


def trl_defaults() -> dict:
    """The batching defaults of the installed TRL's GRPOConfig, read from its dataclass fields."""
    import trl
    from trl import GRPOConfig

    names = (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "steps_per_generation",
        "generation_batch_size",
        "num_generations",
        "gradient_checkpointing",
    )
    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    return {"trl_version": trl.__version__, **{n: fields[n].default for n in names}}


def workload(args: argparse.Namespace, trl_micro_batch: int) -> Workload:
    return Workload(
        size=f"{SHAPE}@{args.layers}",
        lora=True,
        B=args.B,
        G=args.G,
        C=args.C,
        steps=args.steps,
        warmup=args.warmup,
        beta=0.04,
        threads=args.threads,
        trl_micro_batch=trl_micro_batch,
    )


def compare(w: Workload, defaults: dict, rounds: int, timeout: float, log) -> dict:
    """Both sides, `rounds` times (ours first in even rounds), summarised as vs_trl does."""
    runs: dict[str, list[dict]] = {"ours": [], "trl": []}
    loads = []
    for r in range(rounds):
        for side in ("ours", "trl") if r % 2 == 0 else ("trl", "ours"):
            loads.append(os.getloadavg()[0])
            t0 = time.perf_counter()
            runs[side].append(run_side(side, w, timeout))
            log(f"  round {r + 1} {side}: worker {time.perf_counter() - t0:.0f} s")
    res = summarise(w, runs, loads)
    res["runs"] = runs
    res["trl_defaults"] = defaults
    res["ratio_step_time"] = res["ours"]["median_s"] / res["trl"]["median_s"]
    res["targets"] = {
        f"peak RSS <= {TARGET} x TRL": res["ratio_peak_rss"] <= TARGET,
        f"s/step <= {TARGET} x TRL": res["ratio_step_time"] <= TARGET,
    }
    return res


def _verdict(ratio: float) -> str:
    return f"**{ratio:.2f}×** ({'met' if ratio <= TARGET else 'missed'})"


def format_table(res: dict) -> str:
    w, d = res["workload"], res["trl_defaults"]
    n = w["B"] * w["G"]
    micro = w["trl_micro_batch"] or n
    rows = [r for run in res["runs"]["ours"] for r in run.get("micro_batch_rows", []) if r]
    ours_mb = f"auto: {int(rows[-1])} rows per pass" if rows else "auto"
    trl_mb = f"{micro} per pass × {n // micro} accumulated (TRL {d['trl_version']} default)"
    lines = [
        f"{SHAPE}, {w['size'].split('@')[1]} layers, LoRA r 16, beta {w['beta']}, "
        f"B x G = {w['B']} x {w['G']}, {w['C']} completion tokens (pinned), float32 CPU, "
        f"{w['warmup']} warm-up + {w['steps']} timed steps per side, {os.cpu_count()} CPUs, "
        f"load average {min(res['load_avg']):.2f}–{max(res['load_avg']):.2f}",
        f"TRL's prompt tokens equal ours: {'yes' if res['prompts_match'] else 'NO'}",
        "",
        "| side | micro-batching | peak RSS MiB | s/step (median) | each timed step s | "
        "generation s |",
        "|---|---|---|---|---|---|",
    ]
    for side, mb in (("ours", ours_mb), ("trl", trl_mb)):
        s = res[side]
        each = ", ".join(f"{t:.1f}" for t in s["step_times"])
        lines.append(
            f"| {side} | {mb} | {s['peak_rss_mb']:.0f} | {s['median_s']:.2f} | {each} | "
            f"{s['generate_s']:.2f} |"
        )
    lines.append(
        f"| ours/TRL (target ≤ {TARGET}×) | | {_verdict(res['ratio_peak_rss'])} | "
        f"{_verdict(res['ratio_step_time'])} | | |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny work (B 2 × G 8, 8 tokens, 1 step)")
    p.add_argument("--layers", type=int, default=2, help="decoder layers, 2 to 4 (default 2)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per side (default 2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed first steps per side")
    p.add_argument("--rounds", type=int, default=1, help="runs per side, alternating")
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--C", type=int, default=256)
    p.add_argument(
        "--trl-micro-batch",
        type=int,
        default=0,
        help="TRL's per_device_train_batch_size (default: its GRPOConfig default)",
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: default)")
    p.add_argument("--wait-load", type=float, default=0.0, help="wait until load avg is below this")
    p.add_argument("--max-wait", type=float, default=1800.0)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per worker run")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    if not 2 <= args.layers <= 4:
        p.error(f"--layers must be 2 to 4, not {args.layers}")
    if args.quick:
        args.B, args.G, args.C = 2, 8, 8
        args.steps = args.steps or 1
    args.steps = args.steps or 2

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    defaults = trl_defaults()
    micro = args.trl_micro_batch or defaults["per_device_train_batch_size"]
    if (args.B * args.G) % micro:
        p.error(f"B × G = {args.B * args.G} must be a multiple of TRL's micro-batch {micro}")
    w = workload(args, micro)
    log(f"model: {model_dir(w.size)}")
    dataset_file()
    if args.wait_load > 0:
        log(f"load average {wait_for_quiet(args.wait_load, args.max_wait):.2f}")
    res = compare(w, defaults, args.rounds, args.timeout, log)
    if args.quick:
        print("--quick: tiny work, a check of the script, not a measurement")
    print(format_table(res))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=1)
    print(
        f"ratio_peak_rss={res['ratio_peak_rss']:.2f} ratio_step_time={res['ratio_step_time']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
