"""The demo race (issue 28): TRL's GRPOTrainer against ours on the built-in demo, per seed.

    python bench/demo_race.py                       # seeds 0,1,2, 100 steps a side (about 25 min)
    python bench/demo_race.py --seeds 0 --steps 20 --json race.json
    python bench/demo_race.py --no-curve            # only the final scores (about 15 min)

Both sides train the shipped demo model (full fine-tuning) on the demo's task with the demo's
settings: ours is `grpo-desktop train` on the demo config, TRL is the TRL project the app exports
from the same config (`grpo-desktop export --format trl`, its `train.py`: the same model, data,
G, B, lengths, learning rate, β, loss, checkpoint every 10 steps), each in its own process, ours
first, then TRL, then ours again (below), per seed. Ours runs without its in-run evaluation
(`eval_every` 0), since the TRL project has none; both are then scored by the same command,
`grpo-desktop eval OUT --n 200 --seed 7 --no-sample` (greedy, 200 held-out problems). Printed
per seed and side: wall seconds of the training process (loading included), its training
seconds (ours: the steps' own `step_time`; TRL: its `train_runtime`), seconds per step and
held-out accuracy; then the ratios TRL ÷ ours per seed. The last line is one JSON object. CPU only; say the host and load when you
report it.

A shared 2-core host can change speed by half within minutes (bench/README.md, `demo_race.py`),
and a run of one side then the other puts that drift into the ratio. So each seed is bracketed:
ours, TRL, then ours again (the same command and seed: the same work), and the per-step ratio
is TRL's seconds per step ÷ the mean of our two runs' (`ours_again` in the JSON; `--no-bracket`
runs ours once). The accuracies and the reach come from our first run.

The race's second question, whether ours reaches TRL's final held-out accuracy in fewer seconds
than TRL's whole run takes, needs our accuracy along the way: both sides keep every checkpoint
(one each 10 steps), and each of ours is scored by the same `grpo-desktop eval` once our run has
ended, the last checkpoint's score being the final one (`--no-curve` scores only that).
`ours_reach_s` is our training seconds (the steps' `step_time`, summed) up to the first
checkpoint whose accuracy is at least TRL's final one (None if none is), and `reach_ratio` that
÷ TRL's training seconds: below 1 means ours got there sooner.
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


def ours(config: str, seed: int, out: str, n: int | None, with_curve: bool) -> dict:
    """Our run, its times from its own events, and its held-out accuracy: of the final model,
    or (`with_curve`) of each checkpoint, the last being the final model; n None: times only."""
    wall, _ = _run([*CLI, "train", config, "--seed", str(seed), "--out", out, "--quiet"])
    with open(os.path.join(out, "events.jsonl"), encoding="utf-8") as fh:
        events = [json.loads(line) for line in fh]
    step_s = {e["step"]: e["metrics"]["step_time"] for e in events if e["type"] == "step"}
    steps = list(step_s.values())
    result = {
        "wall_s": wall,
        "train_s": sum(steps),
        "s_per_step": sum(steps) / len(steps),
        "median_step_s": statistics.median(steps),
        "steps": len(steps),
    }
    if n is None:
        return result
    if with_curve:
        result["curve"] = curve(out, step_s, n)
        result["accuracy"] = result["curve"][-1]["accuracy"]
    else:
        result["accuracy"] = held_out(out, n)
    return result


def curve(out: str, step_s: dict[int, float], n: int) -> list[dict]:
    """Each checkpoint of our run `out`: its step, our training seconds up to it (`step_s`: each
    step's own time), its held-out accuracy (the same `grpo-desktop eval` as the final score)."""
    folder = os.path.join(out, "checkpoints")
    points = []
    for name in sorted(os.listdir(folder)):
        step = int(name.rsplit("-", 1)[-1])
        seconds = sum(t for s, t in step_s.items() if s <= step)
        points.append({"step": step, "train_s": seconds,
                       "accuracy": held_out(os.path.join(folder, name), n)})  # fmt: skip
    return points


def reach(points: list[dict], target: float) -> float | None:
    """Training seconds to the first checkpoint scoring at least `target`; None if none did."""
    return next((p["train_s"] for p in points if p["accuracy"] >= target), None)


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
    p.add_argument("--no-curve", action="store_true",
                   help="score only the final models, not each of our checkpoints")  # fmt: skip
    p.add_argument("--no-bracket", action="store_true",
                   help="run ours once per seed, not again after TRL's run")  # fmt: skip
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    work = args.keep or tempfile.mkdtemp(prefix="grpo-demo-race-")
    os.makedirs(work, exist_ok=True)
    _, text = _run([*CLI, "config", "--demo"])
    cfg = json.loads(text)
    cfg["run"].update(max_steps=args.steps, eval_every=0)
    if not args.no_curve:  # every checkpoint kept, on both sides alike (TRL: save_total_limit)
        every = max(1, int(cfg["run"]["checkpoint_every"]))
        cfg["run"]["keep_checkpoints"] = max(
            cfg["run"]["keep_checkpoints"], -(-args.steps // every)
        )
    config = os.path.join(work, "demo.json")
    with open(config, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh)
    project = os.path.join(work, "trl-project")
    _run([*CLI, "export", config, "--format", "trl", "--out", project, "--force", "--quiet"])
    print(f"demo race: {args.steps} steps a side, seeds {seeds}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    rows = []
    for seed in seeds:
        a = ours(config, seed, os.path.join(work, f"ours-{seed}"), args.n, not args.no_curve)
        print(f"seed {seed} ours: {a['s_per_step']:.2f} s/step, {a['wall_s']:.0f} s wall, "
              f"held-out {a['accuracy']:.1%}", flush=True)  # fmt: skip
        b = trl(project, seed, args.steps, os.path.join(work, f"trl-{seed}"), args.n)
        print(f"seed {seed} TRL:  {b['s_per_step']:.2f} s/step, {b['wall_s']:.0f} s wall, "
              f"held-out {b['accuracy']:.1%}", flush=True)  # fmt: skip
        row = {"seed": seed, "ours": a, "trl": b}
        per_step, wall = a["s_per_step"], a["wall_s"]
        if not args.no_bracket:  # ours again, after TRL: the host's drift falls on both sides
            again = ours(config, seed, os.path.join(work, f"ours-{seed}-again"), None, False)
            row["ours_again"] = again
            per_step = (per_step + again["s_per_step"]) / 2
            wall = (wall + again["wall_s"]) / 2
            print(f"seed {seed} ours again: {again['s_per_step']:.2f} s/step, "
                  f"{again['wall_s']:.0f} s wall", flush=True)  # fmt: skip
        row.update(per_step_ratio=b["s_per_step"] / per_step, wall_ratio=b["wall_s"] / wall)
        rows.append(row)
        print(f"seed {seed}: TRL ÷ ours per step {row['per_step_ratio']:.2f}, wall "
              f"{row['wall_ratio']:.2f}", flush=True)  # fmt: skip
        if not args.no_curve:
            reached = reach(a["curve"], b["accuracy"])
            row["ours_reach_s"] = reached
            row["reach_ratio"] = None if reached is None else reached / b["train_s"]
            shown = ", ".join(f"{p['step']}: {p['accuracy']:.1%}" for p in a["curve"])
            when = "never" if reached is None else f"after {reached:.0f} s"
            print(f"seed {seed} ours by step: {shown}; reached TRL's {b['accuracy']:.1%} {when} "
                  f"(TRL's run: {b['train_s']:.0f} s)", flush=True)  # fmt: skip
    summary = {
        "steps": args.steps,
        "seeds": seeds,
        "per_step_ratio": [r["per_step_ratio"] for r in rows],
        "bracketed": not args.no_bracket,
        "wall_ratio": [r["wall_ratio"] for r in rows],
        "ours_accuracy": [r["ours"]["accuracy"] for r in rows],
        "trl_accuracy": [r["trl"]["accuracy"] for r in rows],
        "ours_reach_s": [r.get("ours_reach_s") for r in rows],
        "trl_train_s": [r["trl"]["train_s"] for r in rows],
        "reach_ratio": [r.get("reach_ratio") for r in rows],
        "load_end": os.getloadavg()[0],
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"summary": summary, "runs": rows}, fh, indent=1)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
