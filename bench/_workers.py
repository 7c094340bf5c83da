"""One side of the comparison, run in its own process: our engine or TRL's GRPOTrainer.

Each worker trains `warmup + steps` steps of a `Workload` and returns a dict: the wall time of
every timed step (between consecutive step ends, so per-step overhead such as logging and event
building counts on both sides) and its process CPU time, the generation time of each step, our
per-phase times, the peak RSS (`ru_maxrss`, read at the end), on CUDA the peak allocated memory
and the weight bytes, and on the TRL side whether TRL's prompt tokens equal ours. A process per
side keeps each side's peak memory its own. Not meant to be imported by the engine.

    python bench/vs_trl.py --worker ours|trl --config JSON      (as bench/vs_trl.py runs it)
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from typing import Any

from _workload import (
    LORA_ALPHA,
    LORA_R,
    Workload,
    dataset_file,
    model_dir,
    our_config,
    problems,
    reward_texts,
    trl_args,
)

PHASES = ("time/generate", "time/rewards", "time/ref", "time/update", "time/optimizer")


def peak_rss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return kb / (1024 * 1024) if sys.platform == "darwin" else kb / 1024


def _set_threads(w: Workload) -> None:
    import torch

    if w.threads > 0:
        torch.set_num_threads(w.threads)


def _sync(w: Workload) -> None:
    if w.device == "cuda":
        import torch

        torch.cuda.synchronize()


def _weight_bytes(model) -> int:
    """Bytes of the weights a decode step reads (4-bit weights count their packed bytes)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _device_stats(w: Workload, model) -> dict[str, Any]:
    """Peak CUDA memory of the process and, given the model, its weight bytes (CUDA only)."""
    if w.device != "cuda":
        return {}
    import torch

    stats = {
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20,
        "device_name": torch.cuda.get_device_name(),
    }
    if model is not None:
        stats["weight_bytes"] = _weight_bytes(model)
    return stats


def run_ours(w: Workload) -> dict[str, Any]:
    import torch

    from grpo_desktop.engine.control import TrainControl
    from grpo_desktop.engine.events import RunFinished, StepMetrics
    from grpo_desktop.engine.grpo.trainer import train
    from grpo_desktop.engine.ops import kernels, native

    _set_threads(w)
    cfg = our_config(w, model_dir(w.size, w.seed), dataset_file(w.seed))
    times: list[float] = []
    cpu_times: list[float] = []
    phases: dict[str, list[float]] = {k: [] for k in PHASES}
    lengths: list[float] = []
    rows: list[float | None] = []  # completions per forward/backward pass (micro-batch)
    last, last_cpu = time.perf_counter(), time.process_time()
    for event in train(cfg, TrainControl()):
        if isinstance(event, StepMetrics):
            _sync(w)
            now, now_cpu = time.perf_counter(), time.process_time()
            times.append(now - last)
            cpu_times.append(now_cpu - last_cpu)
            last, last_cpu = now, now_cpu
            if event.step > w.warmup:
                for k in PHASES:
                    phases[k].append(float(event.metrics.get(k, 0.0)))
                lengths.append(float(event.metrics["completions/mean_length"]))
                rows.append(event.metrics.get("micro_batch_rows"))
        elif isinstance(event, RunFinished) and event.status != "completed":
            raise RuntimeError(f"our run ended {event.status}: {event.message}\n{event.error}")
    out = {
        "side": "ours",
        "step_times": times[w.warmup :],
        "cpu_times": cpu_times[w.warmup :],
        "generate_times": phases["time/generate"],
        "phases": phases,
        "mean_length": lengths,
        "micro_batch_rows": rows,
        "threads": torch.get_num_threads(),
        "peak_rss_mb": peak_rss_mb(),
        "products": kernels.describe(),
        "decode_kernels": native.describe(),
    }
    if w.device == "cuda":  # peak first: loading the model again for its size comes after
        from grpo_desktop.engine.models.loading import load_policy

        out.update(_device_stats(w, None))
        out["weight_bytes"] = _weight_bytes(load_policy(cfg).model)
    return out


def _our_prompt_ids(tokenizer, questions: list[str]) -> list[list[int]]:
    from grpo_desktop.engine.data.dataset import build_prompt

    texts = [build_prompt(tokenizer, q, system_prompt="") for q in questions]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def _trl_model(w: Workload, path: str):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, w.dtype)
    if w.quant == "4bit":
        from transformers import BitsAndBytesConfig

        quant = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_use_double_quant=True,
        )
        device_map = {"": 0} if w.device == "cuda" else {"": "cpu"}
        return AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, quantization_config=quant, device_map=device_map
        )
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(w.device)


def run_trl(w: Workload) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    _set_threads(w)
    path = model_dir(w.size, w.seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = _trl_model(w, path)
    rows = problems(seed=w.seed)
    train_rows = [
        {"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]}
        for r in rows
    ]

    def accuracy(completions, answer, **kwargs):
        return reward_texts([c[0]["content"] for c in completions], answer)

    ends: list[tuple[float, float]] = []
    generate_times: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            _sync(w)
            ends.append((time.perf_counter(), time.process_time()))

    generate = GRPOTrainer._generate_single_turn

    def timed_generate(self, *args, **kwargs):  # TRL's generation, for decode tokens/s
        _sync(w)
        t0 = time.perf_counter()
        out = generate(self, *args, **kwargs)
        _sync(w)
        generate_times.append(time.perf_counter() - t0)
        return out

    GRPOTrainer._generate_single_turn = timed_generate
    peft = None
    if w.lora:
        peft = LoraConfig(
            r=LORA_R,
            lora_alpha=LORA_ALPHA,
            lora_dropout=0.0,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
    with tempfile.TemporaryDirectory(prefix="grpo-bench-trl-") as out:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[accuracy],
            args=GRPOConfig(**trl_args(w, out)),
            train_dataset=Dataset.from_list(train_rows),
            processing_class=tokenizer,
            peft_config=peft,
            callbacks=[StepClock()],
        )
        sample = [r["prompt"] for r in train_rows[:8]]
        theirs = [list(ids) for ids in trainer._tokenize_prompts(sample)[0]]
        ours = _our_prompt_ids(tokenizer, [r["question"] for r in rows[:8]])
        _sync(w)
        start = (time.perf_counter(), time.process_time())
        trainer.train()
    marks = [start, *ends]
    times = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
    cpu_times = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
    return {
        "side": "trl",
        "step_times": times[w.warmup :],
        "cpu_times": cpu_times[w.warmup :],
        "generate_times": generate_times[w.warmup :],
        "prompts_match": theirs == ours,
        "prompt_tokens": len(ours[0]),
        "threads": torch.get_num_threads(),
        "peak_rss_mb": peak_rss_mb(),
        **_device_stats(w, trainer.model),
    }


def run_worker(side: str, config: str) -> dict[str, Any]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    w = Workload.from_json(config)
    return run_ours(w) if side == "ours" else run_trl(w)
