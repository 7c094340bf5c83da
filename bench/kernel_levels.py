"""The installer's portable kernel builds against this CPU's own: is x86-64-v4 (or v3) as fast?

The Linux installer carries native_decode.cpp compiled for x86-64-v4, v3 and v2
(engine/ops/native_build.py) and loads the best level the CPU runs, where an installation from
source compiles with -march=native (native.TARGET). This compiles each level this CPU runs and a
native build into a temporary folder, then times each library's kernels in its own process (one
TORCH_LIBRARY per process), the libraries alternated round by round, at the decode shapes of
`vs_trl.py --quick`'s 3M model and of SmolLM2-135M (32 rows, 70 cached keys, 2 threads). Per
library: microseconds a decode token-step spends in each kernel (every layer's call), the best
of 5 timings (up to 50 calls, about 0.1 s, each) a round, median over rounds. `linear` is a
layer's four products (q/k/v, o, gate/up, down; the output layer not included); beside it, in
every library's process, the same products through torch's F.linear (MKL), for reference.
`attend` and `attend_backward` are the log-prob passes' attention (engine/ops/fused_attention.py),
one layer's call at the training shape of 32 answers of 63 tokens after a 37-token prompt,
beside torch's sdpa forward and its forward and backward through autograd; at the same shape,
the passes' RMSNorm, rotary embedding (the queries) and SwiGLU gate (engine/ops/fused_layers.py)
forward and backward, beside torch's operations through autograd. A library without a kernel (an
older source; `attend` in the v2 build) shows a dash.

`--against FILE` adds a native build of another native_decode.cpp (an older commit's, from `git
show COMMIT:grpo_desktop/engine/ops/native_decode.cpp > old.cpp`) as a column, and says whether
each kernel's outputs on the timed inputs are the same bits as this source's native build: a
kernel change meant to keep its rounding is checked here.

    python bench/kernel_levels.py [--rounds 3] [--threads 2] [--against old.cpp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# (name, layers, hidden, heads, kv heads, head dim, intermediate)
SHAPES = [("3M", 4, 256, 8, 4, 32, 688), ("SmolLM2", 30, 576, 9, 3, 64, 1536)]

TIMER = """
import json, sys, time, torch
torch.ops.load_library(sys.argv[1])
ops = torch.ops.grpo_desktop
torch.set_num_threads(int(sys.argv[2]))
shapes = json.loads(sys.argv[3])
g = torch.Generator().manual_seed(0)
out, outputs = {}, {}
for name, layers, E, H, Hkv, D, F in shapes:
    N, L, cap = 32, 70, 101
    qkv = torch.randn(N, H + 2 * Hkv, D, generator=g)
    cos, sin = torch.randn(N, 1, D, generator=g), torch.randn(N, 1, D, generator=g)
    keys = [torch.randn(N, Hkv, D, cap, generator=g) for _ in range(layers)]
    values = [torch.randn(N, Hkv, cap, D, generator=g) for _ in range(layers)]
    gu, x, w = torch.randn(N, 2 * F, generator=g), torch.randn(N, E, generator=g), torch.randn(E, generator=g)
    weights = [torch.randn(n, k, generator=g) for n, k in [((H + 2 * Hkv) * D, E), (E, H * D), (2 * F, E), (E, F)]]
    inputs = [torch.randn(N, k, generator=g) for k in (E, H * D, E, F)]
    calls = {
        "rope_attend": lambda: [ops.rope_attend(qkv, cos, sin, keys[i], values[i], L, H, Hkv, D**-0.5, None) for i in range(layers)],
        "silu_mul": lambda: [ops.silu_mul(gu, F) for _ in range(layers)],
        "rms_norm": lambda: [ops.rms_norm(x, w, 1e-6) for _ in range(2 * layers + 1)],
        "linear": lambda: [ops.linear(a, b, None) for _ in range(layers) for a, b in zip(inputs, weights)],
        "linear: torch's F.linear": lambda: [torch.nn.functional.linear(a, b) for _ in range(layers) for a, b in zip(inputs, weights)],
    }
    # the passes' attention (32 answers of 63 tokens after a 37-token prompt), one layer's call
    Lq, P = 63, 37
    tq = torch.randn(N, Lq, H, D, generator=g).transpose(1, 2)
    tk, tv = (torch.randn(N, Hkv, P + Lq, D, generator=g) for _ in range(2))
    allowed = torch.ones(N, 1, Lq, P + Lq, dtype=torch.bool).tril(P)
    tg = [t.clone().requires_grad_() for t in (tq, tk, tv)]
    dout = torch.randn(N, Lq, H, D, generator=g)
    try:
        o, lse = ops.attend(tq, tk, tv, allowed, D**-0.5, False)
        calls["attend"] = lambda: [ops.attend(tq, tk, tv, allowed, D**-0.5, False)]
        calls["attend_backward"] = lambda: [ops.attend_backward(dout, tq, tk, tv, o, lse, allowed, D**-0.5, False)]
    except (AttributeError, RuntimeError):  # an older source or the v2 build: no attend
        pass
    sdpa = torch.nn.functional.scaled_dot_product_attention
    calls["attend: torch's sdpa"] = lambda: [sdpa(tq, tk, tv, attn_mask=allowed, enable_gqa=True)]
    calls["attend + backward: torch's"] = lambda: [sdpa(*tg, attn_mask=allowed, enable_gqa=True).backward(dout.transpose(1, 2))]
    # the passes' norm, rotary embedding and SwiGLU gate (fused_layers.py) at that shape: one
    # layer's forward and backward, beside torch's operations through autograd
    M = N * Lq
    hx, hd = torch.randn(M, E, generator=g), torch.randn(M, E, generator=g)
    rc, rs = torch.randn(N, Lq, D, generator=g), torch.randn(N, Lq, D, generator=g)
    gg, gu2, gdy = (torch.randn(M, F, generator=g) for _ in range(3))
    try:
        _, rstd = ops.norm_forward(hx, w, 1e-6)
        calls["norm + backward"] = lambda: [ops.norm_forward(hx, w, 1e-6), ops.norm_backward(hd, hx, w, rstd)]
        calls["rope + backward"] = lambda: [ops.rope_forward(tq, rc, rs), ops.rope_backward(dout.transpose(1, 2), rc, rs)]
        calls["swiglu + backward"] = lambda: [ops.swiglu_forward(gg, gu2), ops.swiglu_backward(gdy, gg, gu2)]
    except (AttributeError, RuntimeError):  # an older source: no training layers
        pass
    hg, qg, gg2, ug2 = (t.clone().requires_grad_() for t in (hx, tq, gg, gu2))
    half = lambda t: torch.cat((-t[..., D // 2 :], t[..., : D // 2]), dim=-1)
    calls["norm + backward: torch's"] = lambda: [(w * (hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + 1e-6))).backward(hd)]
    calls["rope + backward: torch's"] = lambda: [(qg * rc[:, None] + half(qg) * rs[:, None]).backward(dout.transpose(1, 2))]
    calls["swiglu + backward: torch's"] = lambda: [(torch.nn.functional.silu(gg2) * ug2).backward(gdy)]
    try:
        ops.linear
    except (AttributeError, RuntimeError):  # an older source: no products kernel
        del calls["linear"]
    for kernel, call in calls.items():
        if len(sys.argv) > 4 and "backward: torch" not in kernel:  # outputs, to compare bits
            outputs[f"{name} {kernel}"] = call()
        for _ in range(3):
            call()
        t0 = time.perf_counter()
        call()
        # up to 50 calls a timing, fewer where a call is long (SmolLM2's products: ~3)
        n = max(3, min(50, int(0.1 / max(time.perf_counter() - t0, 1e-9))))
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            best = min(best, (time.perf_counter() - t0) / n)
        out[f"{name} {kernel}"] = best * 1e6
if len(sys.argv) > 4:
    torch.save(outputs, sys.argv[4])
print(json.dumps(out))
"""


def main() -> int:
    from grpo_desktop.engine.ops import native_build

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--against", type=Path, help="another native_decode.cpp, built natively")
    args = parser.parse_args()
    flags = native_build.cpu_flags()
    from grpo_desktop.engine.ops import native

    marches = [lv.name for lv in native_build.LEVELS if lv.needs <= flags] + ["native"]
    if args.against:
        marches.append("against")
    results: dict[str, list[dict]] = {m: [] for m in marches}
    with tempfile.TemporaryDirectory() as tmp:
        libraries = {}
        for march in marches:
            libraries[march] = Path(tmp) / f"k_{march.replace('-', '_')}.so"
            target = [f"-march={march}"] if march.startswith("x86-64") else native.TARGET
            source = args.against.resolve() if march == "against" else None
            native_build.compile_library(libraries[march], target, source)
        for r in range(args.rounds):
            for march in marches if r % 2 == 0 else marches[::-1]:
                cmd = [sys.executable, "-c", TIMER, str(libraries[march]), str(args.threads)]
                saved = [str(Path(tmp) / f"out_{march}.pt")] if r == 0 and args.against else []
                proc = subprocess.run(
                    [*cmd, json.dumps(SHAPES), *saved], capture_output=True, text=True, check=True
                )
                results[march].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        if args.against:
            import torch

            ours, theirs = (torch.load(Path(tmp) / f"out_{m}.pt") for m in ("native", "against"))
            for key in ours:
                if key not in theirs:
                    print(f"{key}: not in the other source")
                    continue
                pairs = zip(ours[key], theirs[key])
                same = all(
                    all(map(torch.equal, a, b)) if isinstance(a, tuple) else torch.equal(a, b)
                    for a, b in pairs
                )
                print(f"{key}: outputs {'the same bits' if same else 'DIFFER'} (native vs against)")
    keys = list(results["native"][0])
    print(
        f"µs in each kernel, {args.threads} threads: a decode token-step's calls (32 rows, 70 keys),"
    )
    print("the attention's one layer's call (32 answers of 63 tokens after 37 prompt tokens);")
    print(f"median of {args.rounds} rounds (each the best of 5 × up to 50 calls)")
    print("| kernel | " + " | ".join(marches) + " |")
    print("|---|" + "---|" * len(marches))
    medians = {}
    for key in keys:
        row = [
            statistics.median(run[key] for run in results[m]) if key in results[m][0] else None
            for m in marches
        ]
        medians[key] = dict(zip(marches, row))
        cells = ["—" if v is None else f"{v:.1f}" for v in row]
        print(f"| {key} | " + " | ".join(cells) + " |")
    print(json.dumps(medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
