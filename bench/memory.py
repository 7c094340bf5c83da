"""Peak memory and seconds per step of one GRPO run on a Qwen2.5-0.5B-shaped model, per checkout.

The model is engine/models/shapes.py's qwen2.5-0.5b-shaped (Qwen2.5-0.5B's width and real
151,936-token vocabulary, 2 random layers, cached under ~/.cache/grpo-desktop/bench/), on the
app's default settings but for what the measurement pins: β 0.04, B × G = 4 × 8, exactly 128
completion tokens, no evaluation or checkpoints. Each checkout runs in its own process
(`--worker`, PYTHONPATH set to it), so peak RSS (`ru_maxrss`) is that run's own: a before/after
comparison of a change. Prints a table row per checkout (peak RSS, each step's seconds, the last
step's phases, rows per pass, the library of float32 CPU products) and the load average around
each run; `--repeat N` alternates N runs per checkout, as peak RSS varies by a few hundred MB.
Does not compare with TRL (bench/vs_trl.py does) and runs nothing on a GPU.

    git worktree add /tmp/before COMMIT
    python bench/memory.py --checkout before=/tmp/before --checkout after=.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHAPE = "qwen2.5-0.5b-shaped"
PHASES = ("time/generate", "time/ref", "time/update", "time/optimizer")


def model_folder(layers: int) -> str:
    """The shaped model, built once with this tree's engine/models/shapes.py (seed 0)."""
    cache = os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "grpo-desktop", "bench"
    )
    folder = os.path.join(cache, f"{SHAPE}-{layers}l-seed0")
    if not os.path.isfile(os.path.join(folder, "config.json")) or _untied(folder):
        sys.path.insert(0, ROOT)
        from grpo_desktop.engine.models.shapes import build_shaped

        build_shaped(folder, SHAPE, layers=layers, seed=0)
    return folder


def _untied(folder: str) -> bool:
    """A folder an early shapes.py wrote: lm_head saved apart from the embedding it is tied to
    (loaded untied, a second 545 MB matrix in float32): build it again."""
    from safetensors import safe_open

    path = os.path.join(folder, "model.safetensors")
    if not os.path.isfile(path):
        return True
    with safe_open(path, "pt") as fh:
        return "lm_head.weight" in set(fh.keys())


def settings(folder: str, args: argparse.Namespace) -> dict:
    return {
        "model": {"name_or_path": folder},
        "data": {"eval_size": 0},
        "algorithm": {
            "prompts_per_step": args.B,
            "num_generations": args.G,
            "max_completion_length": args.C,
            "min_completion_length": args.C,
            "beta": 0.04,
            **({"micro_batch_size": args.micro_batch} if args.micro_batch is not None else {}),
        },
        "lora": {"enabled": not args.full},
        "run": {"max_steps": args.steps, "eval_every": 0, "checkpoint_every": 1000, "seed": 0},
    }


def worker(spec: dict) -> dict:
    """One run in this process: the code under test is whatever `grpo_desktop` imports as."""
    import grpo_desktop
    from grpo_desktop.engine.config import TrainConfig
    from grpo_desktop.engine.events import RunFinished, StepMetrics
    from grpo_desktop.engine.grpo.trainer import train

    cfg = TrainConfig().replace(**spec)
    times, phases, rows = [], [], []
    last = time.perf_counter()
    for event in train(cfg):
        if isinstance(event, StepMetrics):
            now = time.perf_counter()
            times.append(now - last)
            last = now
            phases.append({k: event.metrics.get(k, 0.0) for k in PHASES})
            rows.append(event.metrics.get("micro_batch_rows"))
        elif isinstance(event, RunFinished) and event.status != "completed":
            raise RuntimeError(f"run ended {event.status}: {event.message}\n{event.error}")
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    from grpo_desktop.engine.ops import kernels

    return {
        "products": kernels.library(),
        "code": os.path.dirname(os.path.dirname(os.path.abspath(grpo_desktop.__file__))),
        "peak_rss_mb": kib / 1024,
        "step_times": times,
        "phases": phases,
        "rows_per_pass": rows,
    }


def _commit(path: str) -> str:
    out = subprocess.run(
        ["git", "-C", path, "log", "-1", "--format=%h"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", path, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def run_checkout(label: str, path: str, spec: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(path))
    load_before = os.getloadavg()[0]
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{label} ({path}) failed:\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out.update(label=label, commit=_commit(path), load=(load_before, os.getloadavg()[0]))
    return out


def table(results: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"{SHAPE}, {args.layers} layers, {'full' if args.full else 'LoRA'}, beta 0.04, "
        f"B x G = {args.B} x {args.G}, {args.C} completion tokens, {args.steps} steps, "
        f"{os.cpu_count()} CPUs",
        "| run | code | peak RSS MB | s/step (each) | generate | ref | update | rows/pass | "
        "products | load 1m |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        steps = ", ".join(f"{t:.1f}" for t in r["step_times"])
        last = r["phases"][-1]
        rows = r["rows_per_pass"][-1]
        lines.append(
            f"| {r['label']} | {r['commit']} | {r['peak_rss_mb']:.0f} | {steps} | "
            f"{last['time/generate']:.1f} | {last['time/ref']:.1f} | {last['time/update']:.1f} | "
            f"{'-' if rows is None else int(rows)} | {r['products']} | "
            f"{r['load'][0]:.1f} → {r['load'][1]:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument(
        "--checkout",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="a checkout to measure (repeatable; default: this tree)",
    )
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--C", type=int, default=128)
    p.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    p.add_argument("--micro-batch", type=int, default=None, help="fixed rows per pass")
    p.add_argument("--repeat", type=int, default=1, help="runs per checkout, alternating")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    spec = settings(model_folder(args.layers), args)
    checkouts = [c.split("=", 1) for c in args.checkout] or [["this tree", ROOT]]
    results = [
        run_checkout(label, path, spec) for _ in range(args.repeat) for label, path in checkouts
    ]
    print(table(results, args))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
