"""GRPO Desktop's engine against TRL's GRPOTrainer on a CUDA GPU: a Qwen2.5-0.5B-shaped model.

    python bench/gpu.py                      # bf16 LoRA and 4-bit QLoRA, G = 8, 256 tokens
    python bench/gpu.py --json gpu.json --rounds 3
    python bench/gpu.py --dry-run-cpu        # the same code path on the CPU with a tiny model
    python bench/gpu.py --all                # every CUDA check, one JSON (≤ 8 min)
    python bench/gpu.py --all --dry-run-cpu  # all of them on the CPU with tiny models

The model is engine.models.tiny's "qwen2.5-0.5b" (the real shape, random weights, the char
tokenizer padded to the real vocabulary: nothing is downloaded). Both sides do bench/vs_trl.py's
work with 256 pinned tokens, in bf16, once on bf16 and once on 4-bit NF4 base weights, each in its
own process, alternating. Reported against the targets: seconds per step (ours ≤ 0.5 × TRL's),
peak `torch.cuda.max_memory_allocated` (ours ≤ TRL's), and decode time per token against its
floor, the weight bytes ÷ the measured copy bandwidth (within 5 ×). Writes JSON (`--json`,
default gpu_results.json). Without CUDA it stops at once; `--dry-run-cpu` checks the script on the
"tiny" model, measuring nothing. `--all` runs bench/gpu_checks.py's checks instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _gpu_metrics import gpu_metrics, memory_bandwidth  # noqa: E402
from _workload import Workload, dataset_file, model_dir  # noqa: E402
from vs_trl import run_side, summarise  # noqa: E402


def format_table(results: list[dict]) -> str:
    lines = [
        "| config | side | s/step | peak CUDA MB | decode tok/s | decode step ms | floor ms | "
        "× floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        g = res["gpu"]
        for side in ("ours", "trl"):
            d = g[side]
            lines.append(
                f"| {res['label']} | {side} | {res[side]['median_s']:.3f} | "
                f"{d['peak_cuda_mb']:.0f} | {d['decode_tokens_per_s']:.0f} | "
                f"{d['decode_step_ms']:.2f} | {d['decode_floor_ms']:.2f} | "
                f"{d['decode_vs_floor']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run-cpu", action="store_true", help="tiny model on the CPU: checks only")
    p.add_argument("--modes", default="lora,qlora")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--C", type=int, default=256)
    p.add_argument("--timeout", type=float, default=1200.0)
    p.add_argument("--json", default="gpu_results.json")
    p.add_argument("--all", action="store_true", help="every CUDA check (bench/gpu_checks.py)")
    p.add_argument("--only", default="", help="with --all: these checks only (comma-separated)")
    p.add_argument("--budget", type=float, default=None, help="with --all: seconds in all")
    p.add_argument("--budget-scale", type=float, default=1.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    import torch

    dry = args.dry_run_cpu
    if not dry and not torch.cuda.is_available():
        print(
            "bench/gpu.py needs a CUDA GPU and PyTorch sees none (torch "
            f"{torch.__version__}). Run it on a CUDA machine, or check the script here with "
            "--dry-run-cpu.",
            file=sys.stderr,
        )
        return 2
    if args.all:
        from gpu_checks import run_all

        return run_all(args, lambda device: memory_bandwidth(device, 64 if dry else 1024))
    device = "cpu" if dry else "cuda"
    size, dtype = ("tiny", "float32") if dry else ("qwen2.5-0.5b", "bfloat16")
    C, steps, warmup = (8, 1, 1) if dry else (args.C, args.steps, args.warmup)
    rounds = 1 if dry else args.rounds
    model_dir(size)
    dataset_file()
    bandwidth = memory_bandwidth(device, mib=64 if dry else 1024)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results = []
    for mode in args.modes.split(","):
        w = Workload(
            size=size,
            lora=True,
            B=args.B,
            G=args.G,
            C=C,
            steps=steps,
            warmup=warmup,
            device=device,
            dtype=dtype,
            quant="4bit" if mode == "qlora" else "none",
        )
        runs: dict[str, list[dict]] = {"ours": [], "trl": []}
        for r in range(rounds):
            for side in ("ours", "trl") if r % 2 == 0 else ("trl", "ours"):
                t0 = time.perf_counter()
                runs[side].append(run_side(side, w, args.timeout))
                log(f"  {w.label} round {r + 1} {side}: {time.perf_counter() - t0:.0f} s")
        res = summarise(w, runs, [os.getloadavg()[0]])
        res["runs"] = runs
        res["gpu"] = gpu_metrics(res, w, bandwidth)
        results.append(res)

    name = "CPU dry run (tiny model: no meaning)" if dry else torch.cuda.get_device_name()
    print(f"{name}; B={args.B} G={args.G} C={C}; {dtype}; bandwidth {bandwidth / 1e9:.0f} GB/s")
    print(format_table(results))
    for res in results:
        g = res["gpu"]
        print(
            f"{res['label']}: step ours/TRL {g['step_ratio']:.2f}, peak memory ours/TRL "
            f"{g['memory_ratio']:.2f}, targets {json.dumps(g['targets'])}"
        )
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump({"device": name, "dry_run": dry, "results": results}, fh, indent=1)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
