"""Save and open times of a large session: 1,000 steps × 64 rollouts, and its size on disk.

Writes a synthetic session bundle whose run log looks like a real one (every step's metrics and
advantage histogram, 64 rollouts with ~150-character completions), then measures what Save does
(session.json rewritten atomically; the history is already on disk), what training adds per
step (one rollouts and one step line), and opening (load the document and rebuild the history
the window shows: every step's metrics, the newest rollouts in memory, older ones paged from
disk on demand), so a long run stays quick to save and reopen.

    python bench/session_io.py [--steps 1000] [--rollouts 64]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.events import Rollouts, RunStarted, StepMetrics
from grpo_desktop.session.document import load_session, new_session, save_session
from grpo_desktop.session.history import RunHistory


def _rows(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        right = rng.random() < 0.5
        ans = a * b if right else a * b - 10
        tens, ones = b // 10 * 10, b % 10
        work = f"{a}×{b} = {a}×{tens} + {a}×{ones} = {a * tens} + {a * ones} = {ans}"
        text = f"<think>{work}</think><answer>{ans}</answer>"
        rows.append({
            "group": i // 8, "prompt": f"What is {a} × {b}?", "completion": text,
            "answer": str(a * b), "rewards": {"accuracy": float(right), "format": 1.0},
            "reward": float(right) + 0.2, "advantage": rng.uniform(-2, 2), "length": len(text),
            "truncated": False, "error": None,
        })  # fmt: skip
    return rows


def write_run(path: str, steps: int, rollouts: int) -> float:
    rng = random.Random(0)
    t_append = []
    with open(path, "w", encoding="utf-8") as fh:
        cfg = demo_config().to_dict()
        fh.write(RunStarted("bench", cfg, 0, steps, "cpu", "builtin:demo").to_json() + "\n")
        for s in range(1, steps + 1):
            metrics = {k: rng.random() for k in (
                "reward", "reward_std", "frac_reward_zero_std", "kl", "entropy", "loss",
                "grad_norm", "learning_rate", "completions/mean_length", "step_time")}  # fmt: skip
            hist = {
                "edges": [-3 + 0.3 * i for i in range(22)],
                "counts": [rng.randint(0, 9) for _ in range(21)],
            }
            t0 = time.perf_counter()
            fh.write(Rollouts(s, _rows(rng, rollouts)).to_json() + "\n")
            fh.write(StepMetrics(s, steps, metrics, hist).to_json() + "\n")
            fh.flush()
            t_append.append(time.perf_counter() - t0)
    return statistics.median(t_append)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--rollouts", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        doc = new_session(os.path.join(tmp, "big.grpo"), demo_config())
        os.makedirs(doc.run_dir)
        append = write_run(doc.events_path, args.steps, args.rollouts)
        saves = []
        for _ in range(5):
            t0 = time.perf_counter()
            doc = save_session(doc)
            saves.append(time.perf_counter() - t0)
        opens = []
        for _ in range(3):
            t0 = time.perf_counter()
            back = load_session(doc.path)
            history = RunHistory.from_events_file(back.events_path)
            opens.append(time.perf_counter() - t0)
        size = sum(
            os.path.getsize(os.path.join(b, f)) for b, _, fs in os.walk(doc.path) for f in fs
        )
        t0 = time.perf_counter()
        old = history.rollouts.get(1)  # an old step, paged from disk
        page = time.perf_counter() - t0
        print(
            f"session: {args.steps} steps × {args.rollouts} rollouts, "
            f"{size / 2**20:.1f} MiB on disk"
        )
        print(f"save (median of 5): {statistics.median(saves) * 1000:.1f} ms")
        print(f"append one step while training (median): {append * 1000:.2f} ms")
        print(f"open (median of 3): {statistics.median(opens):.2f} s, {history.num_steps} steps")
        print(f"page in step 1's {len(old or [])} rollouts: {page * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
