"""Host work per decode token: the operations dispatched and the host time of one decode step.

On a GPU a small model's decode step is bound by the host (every operation is a Python call, a
dispatch and a kernel launch), so this counts that work on the CPU, where it can be counted, for
three ways to run a step: the model's own forward (DynamicCache, LoRA unmerged), the static step
of engine/sampling/decode_static.py run eagerly (LoRA folded), and what GraphedDecode dispatches
around a CUDA graph's replay (the replay itself a no-op stand-in). Operations are counted with a
TorchDispatchMode over one step; host time is the median thread CPU time of single steps on one
thread. Models: Qwen2 with Qwen2.5-0.5B's 24 layers and 14/2 heads at hidden 112, vocabulary
1,024, and Qwen2.5-0.5B's real shape; LoRA r 16 on all linear layers, random weights, float32.
`decode_benchmark(...)` is the CUDA measurement bench/gpu.py calls. Method and figures:
bench/README.md.

    python bench/decode_overhead.py                 # both models, 8 rows
    python bench/decode_overhead.py --skip-real     # only the 24-layer small-width model
    python bench/decode_overhead.py --json decode_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from grpo_desktop.engine.sampling import decode_graph, decoders, sampler  # noqa: E402
from grpo_desktop.engine.sampling.decode_static import static_decoder  # noqa: E402

SMALL = dict(hidden=112, heads=14, kv_heads=2, intermediate=256, vocab=1024, layers=24)
REAL = dict(hidden=896, heads=14, kv_heads=2, intermediate=4864, vocab=151_936, layers=24)


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside its `with` block."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def qwen_like(shape: dict, lora_r: int = 16, seed: int = 0):
    """A Qwen2 model of `shape` with random weights under LoRA (B nonzero), float32, eval."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        tie_word_embeddings=True,
        rope_theta=1e6,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    lora = LoraConfig(r=lora_r, lora_alpha=2 * lora_r, target_modules="all-linear")
    model = get_peft_model(model, lora)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    return model.eval()


class _HostOnlyReplay(decode_graph.EagerReplay):
    """Captures and passes GraphedDecode's two checks like EagerReplay (its first two replays
    compute the step), then replays nothing: what is left per token is the host work
    GraphedDecode does around a real replay."""

    checked = 2

    def replay(self) -> None:
        if self.checked:
            self.checked -= 1
            super().replay()


def _prefill(model, ids, mask):
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # (N, P)
    logits, cache = sampler._prefill(model, ids, mask, positions)  # (N, V)
    return logits, cache, positions


def _steps(kind: str, model, ids, mask, count: int):
    """A function feeding one token (N,) per call on path `kind`, after the prefill; the
    context it needs (lora_merged for the static paths) must be active around its use."""
    _, cache, positions = _prefill(model, ids, mask)
    capacity = ids.size(1) + count + 1
    if kind == "forward":
        state = {"cache": cache, "attention": mask, "pos": positions[:, -1:] + 1}
        ones = torch.ones_like(mask[:, :1])  # (N, 1)

        def step(tokens):
            state["attention"] = torch.cat([state["attention"], ones], dim=1)  # (N, L)
            out = model(
                input_ids=tokens.unsqueeze(1),
                attention_mask=state["attention"],
                position_ids=state["pos"],
                use_cache=True,
                **{decoders.CACHE: state["cache"]},
            )
            state["cache"] = decoders.out_cache(out)
            state["pos"] = state["pos"] + 1
            return out.logits[:, -1, :]  # (N, V)

        return step
    decoder = static_decoder(model, cache, capacity, mask, positions)
    if decoder is None:
        raise RuntimeError("the static decoder does not run this model")
    if kind == "static":
        return decode_graph.GraphedDecode(decoder, graphs=False)
    return decode_graph.GraphedDecode(decoder, graphs=True, backend=_HostOnlyReplay)


@torch.no_grad()
def measure(model, rows: int, prompt: int, tokens: int, vocab: int) -> list[dict]:
    """ops/token and ms/token for each path on `rows` prompts of `prompt` tokens."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, prompt), generator=generator)  # (N, P)
    mask = torch.ones_like(ids)  # (N, P)
    mask[0, : prompt // 2] = 0  # one left-padded row
    feed = torch.randint(0, vocab, (tokens + 4, rows), generator=generator)  # (T, N)
    out = []
    for kind in ("forward", "static", "graph"):
        merged = sampler.lora_merged(model) if kind != "forward" else _nothing()
        with merged:
            step = _steps(kind, model, ids, mask, tokens + 4)
            for t in range(2):  # warm-up (the graph path captures and checks on these two)
                step(feed[t])
            times, walls = [], []
            for t in range(2, tokens + 2):
                c0, w0 = time.thread_time(), time.perf_counter()
                step(feed[t])
                times.append(time.thread_time() - c0)
                walls.append(time.perf_counter() - w0)
            counter = OpCounter()
            with counter:
                step(feed[tokens + 2])
        out.append(
            {
                "path": kind,
                "ops_per_token": counter.count,
                "ms_per_token": 1e3 * statistics.median(times),
                "wall_ms_per_token": 1e3 * statistics.median(walls),
            }
        )
    return out


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def decode_benchmark(
    model, prompt_ids: torch.Tensor, tokens: int, graphs: bool, *, repeats: int = 3,
    static: bool = True,
) -> dict:  # fmt: skip
    """Decode ms per token of the engine's sampler for `model` on `prompt_ids` (N, P) (already
    on the model's device, no padding), `tokens` tokens per row with no early stop: LoRA folded
    as rollout.py does, the static step with (`graphs`) or without CUDA graphs, or with
    `static=False` the model's forward (the path before the static step). Each figure is
    (time of a `tokens`-token call − time of a 1-token call) ÷ (tokens − 1), median of `repeats`
    after one warm-up, so the prefill is excluded and the per-call capture and check are
    included. Returns ms_per_token, path (what actually ran: sampler.last_decode_path()),
    graphs, rows, tokens, repeats and, on CUDA, peak_memory_mb of the last call."""
    device = prompt_ids.device
    mask = torch.ones_like(prompt_ids)  # (N, P)
    saved = (sampler.STATIC_DECODE, sampler.LEAN_DECODE, decode_graph.GRAPHS)
    sampler.STATIC_DECODE = "always" if static else "never"  # "always": the CPU too (a dry run)
    sampler.LEAN_DECODE = False
    decode_graph.GRAPHS = graphs
    cuda = device.type == "cuda"

    def timed(n: int) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with sampler.lora_merged(model):
            sampler.sample_tokens(
                model, prompt_ids, mask, max_new_tokens=n, min_new_tokens=n, eos_id=[-1],
                pad_id=0, temperature=1.0,
            )  # fmt: skip
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    was_training = model.training
    model.eval()
    try:
        timed(tokens)
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        per_token = []
        for _ in range(repeats):
            full = timed(tokens)
            path = sampler.last_decode_path()
            per_token.append((full - timed(1)) / max(1, tokens - 1))
    finally:
        sampler.STATIC_DECODE, sampler.LEAN_DECODE, decode_graph.GRAPHS = saved
        model.train(was_training)
    result = {
        "ms_per_token": 1e3 * statistics.median(per_token),
        "path": path,
        "graphs": graphs,
        "rows": prompt_ids.size(0),
        "tokens": tokens,
        "repeats": repeats,
    }
    if cuda:
        result["peak_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--tokens", type=int, default=16, help="timed steps per path (small model)")
    p.add_argument("--real-tokens", type=int, default=4, help="timed steps per path (real shape)")
    p.add_argument("--skip-real", action="store_true", help="skip the real 0.5B shape")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # a GPU's host side is one thread; steadier on a shared machine
    models = [("24 layers, hidden 112, vocab 1,024", SMALL, args.tokens)]
    if not args.skip_real:
        models.append(("Qwen2.5-0.5B shape, vocab 151,936", REAL, args.real_tokens))
    results = []
    for label, shape, tokens in models:
        t0 = time.perf_counter()
        model = qwen_like(shape)
        print(f"built {label} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        for row in measure(model, args.rows, args.prompt, tokens, shape["vocab"]):
            results.append({"model": label, **row})
        del model
    load = os.getloadavg()[0]
    print(f"{args.rows} rows, prompt {args.prompt}, LoRA r 16 on all linear layers, float32, "
          f"1 thread, load average {load:.1f}")  # fmt: skip
    print("| model | path | ops/token | host CPU ms/token | wall ms/token |\n|---|---|---|---|---|")
    for r in results:
        ms = f"{r['ms_per_token']:.3f} | {r['wall_ms_per_token']:.3f}"
        print(f"| {r['model']} | {r['path']} | {r['ops_per_token']:,} | {ms} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"rows": args.rows, "prompt": args.prompt, "load": load, "results": results}, fh
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
