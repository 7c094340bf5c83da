"""The demo race (issue 28): TRL's GRPOTrainer against ours on the built-in demo, per seed.

    python bench/demo_race.py                       # seeds 0,1,2, 100 steps a side (about 15 min)
    python bench/demo_race.py --seeds 0 --steps 20 --json race.json

Both sides train the shipped demo model (full fine-tuning) on the demo's task with the demo's
settings: ours is `grpo-desktop train` on the demo config, TRL is the TRL project the app exports
from the same config (`grpo-desktop export --format trl`, its `train.py`: the same model, data,
G, B, lengths, learning rate, β, loss, checkpoint every 10 steps), each in its own process, ours
first, then TRL, per seed. Ours runs without its in-run evaluation (`eval_every` 0), since the
TRL project has none; both are then scored by the same command, `grpo-desktop eval OUT --n 200
--seed 7 --no-sample` (greedy, 200 held-out problems). Printed per seed and side: wall seconds of
the training process (loading included), its training seconds (ours: the steps' own
`step_time`; TRL: its `train_runtime`), seconds per step and held-out accuracy; then the ratios
TRL ÷ ours per seed. The last line is one JSON object. CPU only; say the host and load when you
report it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CLI = [sys.executable, "-m", "grpo_desktop"]


def _run(cmd: list[str], cwd: str | None = None) -> tuple[float, str]:
    """Wall seconds and stdout of `cmd`; SystemExit with its stderr when it fails."""
    t0 = time.perf_counter()
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0, proc.stdout


def held_out(folder: str, n: int) -> float:
    _, out = _run([*CLI, "eval", folder, "--n", str(n), "--seed", "7", "--no-sample"])
    return json.loads(out.strip().splitlines()[-1])["accuracy"]


def ours(config: str, seed: int, out: str, n: int) -> dict:
    wall, _ = _run([*CLI, "train", config, "--seed", str(seed), "--out", out, "--quiet"])
    with open(os.path.join(out, "events.jsonl"), encoding="utf-8") as fh:
        events = [json.loads(line) for line in fh]
    steps = [e["metrics"]["step_time"] for e in events if e["type"] == "step"]
    return {
        "wall_s": wall,
        "train_s": sum(steps),
        "s_per_step": sum(steps) / len(steps),
        "median_step_s": statistics.median(steps),
        "steps": len(steps),
        "accuracy": held_out(out, n),
    }


def trl(project: str, seed: int, steps: int, out: str, n: int) -> dict:
    cmd = [sys.executable, "train.py", "--output_dir", out, "--seed", str(seed)]
    wall, _ = _run([*cmd, "--max_steps", str(steps)], cwd=project)
    with open(os.path.join(out, "trainer_state.json"), encoding="utf-8") as fh:
        state = json.load(fh)
    runtime = next(e["train_runtime"] for e in state["log_history"] if "train_runtime" in e)
    done = state["global_step"]
    return {
        "wall_s": wall,
        "train_s": runtime,
        "s_per_step": runtime / done,
        "steps": done,
        "accuracy": held_out(out, n),  # its final model
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--n", type=int, default=200, help="held-out problems for the final score")
    p.add_argument("--json", help="also write everything here")
    p.add_argument("--keep", help="keep the runs in this folder (default: a temporary one)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    work = args.keep or tempfile.mkdtemp(prefix="grpo-demo-race-")
    os.makedirs(work, exist_ok=True)
    _, text = _run([*CLI, "config", "--demo"])
    cfg = json.loads(text)
    cfg["run"].update(max_steps=args.steps, eval_every=0)
    config = os.path.join(work, "demo.json")
    with open(config, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh)
    project = os.path.join(work, "trl-project")
    _run([*CLI, "export", config, "--format", "trl", "--out", project, "--force", "--quiet"])
    print(f"demo race: {args.steps} steps a side, seeds {seeds}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    rows = []
    for seed in seeds:
        a = ours(config, seed, os.path.join(work, f"ours-{seed}"), args.n)
        print(f"seed {seed} ours: {a['s_per_step']:.2f} s/step, {a['wall_s']:.0f} s wall, "
              f"held-out {a['accuracy']:.1%}", flush=True)  # fmt: skip
        b = trl(project, seed, args.steps, os.path.join(work, f"trl-{seed}"), args.n)
        print(f"seed {seed} TRL:  {b['s_per_step']:.2f} s/step, {b['wall_s']:.0f} s wall, "
              f"held-out {b['accuracy']:.1%}", flush=True)  # fmt: skip
        rows.append({"seed": seed, "ours": a, "trl": b, "per_step_ratio": b["s_per_step"] /
                     a["s_per_step"], "wall_ratio": b["wall_s"] / a["wall_s"]})  # fmt: skip
        print(f"seed {seed}: TRL ÷ ours per step {rows[-1]['per_step_ratio']:.2f}, wall "
              f"{rows[-1]['wall_ratio']:.2f}", flush=True)  # fmt: skip
    summary = {
        "steps": args.steps,
        "seeds": seeds,
        "per_step_ratio": [r["per_step_ratio"] for r in rows],
        "wall_ratio": [r["wall_ratio"] for r in rows],
        "ours_accuracy": [r["ours"]["accuracy"] for r in rows],
        "trl_accuracy": [r["trl"]["accuracy"] for r in rows],
        "load_end": os.getloadavg()[0],
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"summary": summary, "runs": rows}, fh, indent=1)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
