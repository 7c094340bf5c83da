"""Plot demo runs: mean reward per step, smoothed, with the held-out accuracy of each evaluation.

    pip install matplotlib          # for this script only; the app does not need it
    python scripts/plot_demo_runs.py runs/seed0 runs/seed1 runs/seed2 --out docs/demo_reward.png

Reads each run folder's events.jsonl (the `step` events' `reward` metric and the `eval` events'
accuracy); a resumed run's superseded events are not filtered out, so plot whole runs. Writes one
PNG (the README's figure). Does not train or evaluate anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def read_run(run_dir: str) -> tuple[list[int], list[float], list[int], list[float]]:
    """(steps, mean reward per step, eval steps, held-out accuracy) of one run folder."""
    steps, rewards, eval_steps, accuracy = [], [], [], []
    with open(os.path.join(run_dir, "events.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            event = json.loads(line)
            if event["type"] == "step":
                steps.append(event["step"])
                rewards.append(event["metrics"]["reward"])
            elif event["type"] == "eval":
                eval_steps.append(event["step"])
                accuracy.append(event["accuracy"])
    return steps, rewards, eval_steps, accuracy


def smooth(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run folders (one line per run)")
    p.add_argument("--out", default="docs/demo_reward.png")
    p.add_argument("--window", type=int, default=10, help="steps in the moving average")
    p.add_argument("--title", default="GRPO on the built-in demo, 2 CPU cores")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(args.runs):
        steps, rewards, eval_steps, accuracy = read_run(run)
        color = colors[i % len(colors)]
        name = os.path.basename(os.path.normpath(run))
        ax.plot(steps, rewards, color=color, alpha=0.2, linewidth=0.8)
        ax.plot(steps, smooth(rewards, args.window), color=color, label=f"{name}: mean reward")
        ax.plot(
            eval_steps,
            accuracy,
            "o--",
            color=color,
            markersize=5,
            linewidth=0.8,
            label=f"{name}: held-out accuracy",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("reward (max 1.2) / accuracy")
    ax.set_ylim(0, 1.25)
    ax.grid(alpha=0.3)
    ax.set_title(args.title)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1024:.0f} KB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
