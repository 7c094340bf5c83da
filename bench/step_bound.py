"""How fast `vs_trl.py --quick`'s step could get if its small operations cost nothing: a ceiling.

Our step on a CPU is matrix products (running near the cores' float32 peak), the attention
kernels, and the small operations between them: the norms, the rotary embedding, SiLU and its
multiply, the decode's softmax and its key/value writes. Fusing those into fewer kernels is the
only lever left on that workload (bench/README.md, session 23), and no fusion can do better than
removing them. This runs the workload's steps twice in separate processes, alternating:

- full: the engine as it is;
- bound: the same engine with those operations removed, in the decode (decode_script.py's text
  edited before it is compiled) and in the log-prob and update passes (transformers' Llama
  RMSNorm, rotary and MLP replaced by identities and a sum).

Both sides run torch's operations in the decode (GRPO_DESKTOP_NATIVE=0): the fused decode
kernels of ops/native.py are one way of realising part of this bound (bench/README.md).
The bound's arithmetic is wrong (its tokens and losses mean nothing; the completion length is
pinned, so it does the same amount of work); only its time counts. Median seconds per step
and per phase for each side, their ratio, and the last line as JSON.

    python bench/step_bound.py                 # 3 rounds of 6 timed steps per side
    python bench/step_bound.py --rounds 1 --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

PHASES = ("time/generate", "time/ref", "time/update")


def _remove_small_operations() -> None:
    """Edit the decode's script and patch transformers' Llama modules (this process only)."""
    import torch
    import transformers.models.llama.modeling_llama as llama

    from grpo_desktop.engine.sampling import decode_script, sampler

    edits = [
        ("torch.add(qk * cos, qk.roll(D // 2, dims=-1) * sin, out=qk)", "pass"),
        ("x = torch.rms_norm(h, [E], input_norms[i], eps[i])", "x = h"),
        ("normed = torch.rms_norm(h, [E], post_norms[i], eps[i])", "normed = h"),
        ("keys[i][:, :, :, L - 1] = qkv[:, H : H + Hkv]", "pass"),
        ("values[i][:, :, L - 1] = qkv[:, H + Hkv :]", "pass"),
        ("probs = torch.softmax(scores, dim=-1)", "probs = scores"),
        ("gated = torch.ops.aten.silu(gu[:, :width]).mul_(gu[:, width:])", "gated = gu[:, :width]"),
    ]
    source = decode_script.SOURCE
    for old, new in edits:
        if old not in source:
            raise SystemExit(f"decode_script.py no longer contains {old!r}: update this bench")
        source = source.replace(old, new)
    decode_script.SOURCE = source
    # Without norms the activations grow until the probabilities overflow: draw from
    # sanitised ones (one small operation a token) so that the decode goes on.
    drawing = sampler.draw

    def draw(probs, generator=None, rows=None):
        safe = torch.nan_to_num(probs, nan=1.0, posinf=1.0, neginf=0.0).clamp_(min=0.0)
        return drawing(safe, generator, rows)

    sampler.draw = draw
    llama.apply_rotary_pos_emb = lambda q, k, cos, sin, unsqueeze_dim=1: (q, k)
    llama.LlamaRMSNorm.forward = lambda self, x: x
    llama.LlamaMLP.forward = lambda self, x: self.down_proj(self.gate_proj(x) + self.up_proj(x))


def run_worker(side: str, steps: int) -> dict:
    """Train the quick workload's steps in this process; per-step seconds and phases."""
    import torch
    from _workload import Workload, dataset_file, model_dir, our_config

    from grpo_desktop.engine.control import TrainControl
    from grpo_desktop.engine.events import RunFinished, StepMetrics
    from grpo_desktop.engine.grpo.trainer import train

    if side == "bound":
        _remove_small_operations()
    w = Workload(steps=steps, warmup=1)
    cfg = our_config(w, model_dir(w.size, w.seed), dataset_file(w.seed))
    out: dict = {"side": side, "step": [], **{k: [] for k in PHASES}}
    last = time.perf_counter()
    for event in train(cfg, TrainControl()):
        if isinstance(event, StepMetrics):
            now = time.perf_counter()
            if event.step > w.warmup:
                out["step"].append(now - last)
                for k in PHASES:
                    out[k].append(float(event.metrics.get(k, 0.0)))
            last = now
        elif isinstance(event, RunFinished) and event.status != "completed":
            # The bound's nonsense arithmetic may diverge; its timed steps so far still count.
            out["ended"] = event.status
    out["threads"] = torch.get_num_threads()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6, help="timed steps per worker run")
    p.add_argument("--worker", choices=("full", "bound"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.steps)), flush=True)
        return 0
    runs: dict[str, list[dict]] = {"full": [], "bound": []}
    for r in range(args.rounds):
        for side in ("full", "bound"):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", side]
            cmd += ["--steps", str(args.steps)]
            # Both sides on torch's operations: the bound removes them from decode_script.SOURCE,
            # which the fused decode kernels (ops/native.py) would otherwise replace.
            env = dict(os.environ, GRPO_DESKTOP_NATIVE="0")
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode != 0 or not lines:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            result = json.loads(lines[-1])
            if not result["step"]:
                print(f"{side}: no timed step finished ({result.get('ended')})", file=sys.stderr)
                return 1
            runs[side].append(result)
            load = os.getloadavg()[0]
            med = statistics.median(result["step"])
            print(f"round {r + 1} {side:5s}: {med:.4f} s/step (load {load:.2f})", flush=True)
    summary: dict = {}
    for side, results in runs.items():
        summary[side] = {
            k: round(statistics.median(statistics.median(x[k]) for x in results), 4)
            for k in ("step", *PHASES)
        }
    summary["bound_share"] = round(summary["bound"]["step"] / summary["full"]["step"], 3)
    print("| side | s/step | generation | reference | update |")
    print("|---|---|---|---|---|")
    for side in ("full", "bound"):
        s = summary[side]
        row = " | ".join(f"{s[k]:.4f}" for k in ("step", *PHASES))
        print(f"| {side} | {row} |")
    print(
        f"The step without its small operations takes {summary['bound_share']:.0%} of the "
        "engine's: the most any fusion of them could give."
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
