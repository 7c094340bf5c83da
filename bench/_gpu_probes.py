"""The checks of `bench/gpu.py --all` that run inside one process each (EOS handling, full
fine-tuning with float32 master weights, decode speed, the memory estimate).

Each probe takes a plain dict (the spec) and returns a dict of figures; a probe raises
`ProbeFailed` when what it checks does not hold (the figures go with it), any other exception
when it could not run. bench/gpu_checks.py runs each one in its own process under its time
budget and reads the last JSON line of stdout. On the CPU (`--dry-run-cpu`) the same code runs
on tiny models. Not meant to be imported by the engine; runs nothing by itself.

    python bench/gpu_checks.py --probe NAME --spec JSON
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from _workload import Workload, dataset_file, model_dir, our_config, problems, shaped_dir

# A random model's answers are all wrong (no spread, no gradient): score distinct characters.
SPREAD = "def check(completion, answer, prompt):\n    return float(len(set(completion)))\n"


class ProbeFailed(Exception):
    """What the probe checks does not hold; `figures` says what was seen."""

    def __init__(self, message: str, figures: dict[str, Any]) -> None:
        super().__init__(message)
        self.figures = figures


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _reset_peak(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()


def _peak_mb(device: str) -> float:
    if device != "cuda":
        return float("nan")
    import torch

    return torch.cuda.max_memory_allocated() / 2**20


def _cfg(spec: dict, **sections):
    from grpo_desktop.engine.config import TrainConfig

    model = {"name_or_path": spec["model"], "device": spec["device"], "dtype": spec["dtype"]}
    return TrainConfig().replace(model=model, **sections)


def _train(cfg, run_dir: str | None = None) -> list:
    from grpo_desktop.engine.control import TrainControl
    from grpo_desktop.engine.events import RunFinished
    from grpo_desktop.engine.grpo.trainer import train

    events = list(train(cfg, TrainControl(), run_dir=run_dir))
    last = events[-1]
    if not isinstance(last, RunFinished) or last.status != "completed":
        raise RuntimeError(f"the run ended {getattr(last, 'status', '?')}: {last.message}")
    return events


def eos(spec: dict) -> dict:
    """A model built to emit <|end_of_text|> (in generation_config's EOS ids, not the
    tokenizer's) stops after one token in sampling, evaluation and a training step."""
    import torch

    from grpo_desktop.engine.data.dataset import Example, build_prompt
    from grpo_desktop.engine.events import StepMetrics
    from grpo_desktop.engine.grpo.evaluate import evaluate
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.sampling.rollout import (
        generate_completions,
        stop_ids,
        tokenize_prompts,
    )

    end_of_text = 128001
    cfg = _cfg(
        spec,
        algorithm={"max_completion_length": 8, "num_generations": 2, "prompts_per_step": 2},
        data={"eval_size": 0, "arithmetic_size": 20},
        rewards={"accuracy_weight": 0.0, "format_weight": 0.0, "custom_checker": SPREAD},
        run={"max_steps": 1, "eval_every": 0, "checkpoint_every": 100},
    )
    policy = load_policy(cfg)
    stops = stop_ids(policy.model, policy.tokenizer)
    texts = [build_prompt(policy.tokenizer, q) for q in ("What is 2 + 2?", "Name a colour.")]
    ids, mask = tokenize_prompts(policy.tokenizer, texts, 64, policy.device)
    ids, mask = ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)  # (4, P)
    torch.manual_seed(0)
    comps = generate_completions(policy.model, policy.tokenizer, ids, mask, max_new_tokens=8)
    result = evaluate(policy, [Example("What is 2 + 2?", "4")], cfg, step=0)
    del policy
    lengths = [m.get("completions/mean_length") for m in _metrics(_train(cfg), StepMetrics)]
    figures = {
        "tokenizer_eos": stops[0],
        "stop_ids": stops,
        "sampled_ids": comps.completion_ids.tolist(),
        "sampled_lengths": comps.lengths.tolist(),
        "eval_mean_length": result.mean_length,
        "train_mean_length": lengths,
    }
    ok = (
        end_of_text in stops
        and comps.completion_ids.tolist() == [[end_of_text]] * 4
        and result.mean_length == 1.0
        and lengths == [1.0]
    )
    if not ok:
        raise ProbeFailed("a completion did not stop at <|end_of_text|> (id 128001)", figures)
    return figures


def _metrics(events: list, kind) -> list[dict]:
    return [e.metrics for e in events if isinstance(e, kind)]


def full_finetune(spec: dict) -> dict:
    """Full fine-tuning of a bfloat16 model, `steps` AdamW steps at lr 1e-5: the float32 master
    weights (what the checkpoint saves) differ from the bf16 originals almost everywhere; in
    pure bf16 most updates (|Δ| ≈ 1e-5 on weights of ~0.02, whose last bit is ~1.2e-4) round
    away."""
    import tempfile

    from safetensors.torch import load_file

    cfg = _cfg(
        spec,
        lora={"enabled": False},
        data={"eval_size": 0, "arithmetic_size": 50},
        rewards={"accuracy_weight": 0.0, "format_weight": 0.0, "custom_checker": SPREAD},
        algorithm={
            "num_generations": 4,
            "prompts_per_step": 2,
            "max_completion_length": spec["C"],
            "learning_rate": 1e-5,
            "lr_scheduler": "constant",
            "warmup_steps": 0,
            "beta": 0.04,
        },
        run={"max_steps": spec["steps"], "eval_every": 0, "checkpoint_every": 1000, "seed": 3},
    )
    _reset_peak(spec["device"])
    with tempfile.TemporaryDirectory(prefix="grpo-gpu-full-") as run_dir:
        _train(cfg, run_dir)
        peak = _peak_mb(spec["device"])
        before = load_file(str(Path(spec["model"]) / "model.safetensors"))
        (saved,) = Path(run_dir, "checkpoints").glob("step-*/model/model.safetensors")
        after = load_file(str(saved))
    moved = total = 0
    dtypes = set()
    for name, old in before.items():
        new = after[name]
        dtypes.add(str(new.dtype))
        moved += int((new.float() != old.float()).sum())
        total += old.numel()
    figures = {
        "steps": spec["steps"],
        "learning_rate": 1e-5,
        "fraction_changed": moved / total,
        "saved_dtypes": sorted(dtypes),
        "original_dtype": str(next(iter(before.values())).dtype),
        "peak_cuda_mb": peak,
        "config": cfg.to_dict(),
    }
    if moved / total <= 0.95 or dtypes != {"torch.float32"}:
        raise ProbeFailed(f"only {moved / total:.1%} of the weights changed", figures)
    return figures


def decode(spec: dict) -> dict:
    """Decode ms/token of our sampler (B·G rows, LoRA, the run's precision) against the floor,
    the weight bytes ÷ the measured bandwidth: through bench/decode_overhead.py's
    decode_benchmark (the static step with and without a CUDA graph, and the model's forward)
    where the tree has it, else the sampler's default path timed at two pinned lengths and
    differenced, so the prefill drops out either way."""
    from grpo_desktop.engine.data.dataset import build_prompt
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.sampling.rollout import tokenize_prompts

    w = Workload(**spec["workload"])
    cfg = our_config(w, model_dir(w.size, w.seed), dataset_file(w.seed))
    policy = load_policy(cfg)
    weight_bytes = sum(p.numel() * p.element_size() for p in policy.model.parameters())
    rows = problems(w.B, seed=w.seed)
    texts = [build_prompt(policy.tokenizer, r["question"], system_prompt="") for r in rows]
    ids, mask = tokenize_prompts(policy.tokenizer, texts, 256, policy.device)
    if not bool(mask.all()):
        raise RuntimeError("the benchmark prompts differ in length: decode_benchmark needs none")
    ids = ids.repeat_interleave(w.G, 0)  # (B*G, P)
    floor_ms = 1000 * weight_bytes / spec["bandwidth"]
    try:
        from decode_overhead import decode_benchmark
    except ImportError as exc:
        variants = {"sampler": _sampler_ms(policy, ids, spec["lengths"], w.device)}
        note = f"not measured: bench/decode_overhead.py's decode_benchmark is missing ({exc})"
    else:
        tokens = spec["lengths"][1]
        variants = {
            name: decode_benchmark(policy.model, ids, tokens, graphs, static=static, repeats=2)
            for name, graphs, static in (
                ("static_graph", True, True),
                ("static_eager", False, True),
                ("forward", False, False),
            )
        }
        note = "measured"
    for v in variants.values():
        v["x_floor"] = v["ms_per_token"] / floor_ms
        v["tokens_per_s"] = ids.size(0) / (v["ms_per_token"] / 1000)
    return {
        "rows": ids.size(0),
        "weight_bytes": weight_bytes,
        "floor_ms": floor_ms,
        "variants": variants,
        "cuda_graphs": note,
    }


def _sampler_ms(policy, ids, lengths: list[int], device: str) -> dict:
    from grpo_desktop.engine.sampling import sampler
    from grpo_desktop.engine.sampling.rollout import generate_completions

    mask = ids.new_ones(ids.shape)

    def timed(n: int) -> float:
        _sync(device)
        t0 = time.perf_counter()
        generate_completions(
            policy.model, policy.tokenizer, ids, mask, max_new_tokens=n, min_new_tokens=n
        )
        _sync(device)
        return time.perf_counter() - t0

    c1, c2 = lengths
    timed(c1)  # warm-up
    t1, t2 = timed(c1), timed(c2)
    return {"ms_per_token": 1000 * (t2 - t1) / (c2 - c1), "path": sampler.last_decode_path()}


def estimate(spec: dict) -> dict:
    """engine/estimate/fit.py's estimate_run for each of our runs' configs against the measured
    torch.cuda.max_memory_allocated of that run."""
    try:
        from grpo_desktop.engine.estimate.fit import estimate_run
    except ImportError as exc:
        return {"unavailable": f"estimate unavailable: {exc}"}
    from grpo_desktop.engine.config import TrainConfig

    out = {}
    for name, run in spec["runs"].items():
        cfg = TrainConfig.from_dict(run["config"])
        est = estimate_run(cfg)
        total = est["memory"]["total"]
        measured = run["peak_cuda_mb"] * 2**20
        out[name] = {
            "estimate_mb": total / 2**20,
            "measured_mb": run["peak_cuda_mb"],
            "estimate_over_measured": total / measured if measured == measured else None,
            "estimate_memory": est["memory"],
            "measured_rows_per_pass": run.get("rows_per_pass"),
        }
        if measured == measured:  # not NaN (the CPU dry run has no CUDA figure)
            out[name]["within_25_percent"] = abs(total / measured - 1) <= 0.25
    return out


def models(spec: dict) -> dict:
    """Build (once; cached) the models the other checks run on; their folders."""
    t0 = time.perf_counter()
    folders = {
        "main": model_dir(spec["main"]),
        "full": shaped_dir(spec["full"]),
        "eos": shaped_dir(spec["eos"], favour=spec["favour"]),
    }
    dataset_file()
    return {"folders": folders, "build_seconds": time.perf_counter() - t0}


PROBES = {
    "models": models,
    "eos": eos,
    "full_finetune": full_finetune,
    "decode": decode,
    "estimate": estimate,
}


def run_probe(name: str, spec: dict) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        return {"status": "ok", "figures": PROBES[name](spec)}
    except ProbeFailed as exc:
        return {"status": "failed", "error": str(exc), "figures": exc.figures}
