"""The work both sides of bench/vs_trl.py do, defined once: model, prompts, reward, settings.

A `Workload` pins everything that decides the cost of a GRPO step: the model (an
`engine.models.tiny` size: "small" ≈ 3M or "medium" ≈ 25M Llama, or "qwen2.5-0.5b" for
bench/gpu.py; random weights, the local char tokenizer), B prompts × G completions, the
completion length C (min = max new tokens, so EOS never shortens the work), loss type, β, LoRA
r 16 (optionally on 4-bit weights) or full fine-tuning, precision and device, one update per
batch. Every prompt ("What is the last digit of 17 × 24?") has the same number of tokens, so the
two sides' data orders cannot change the work; the reward is our accuracy reward on the last
number, a plain function on both sides. bench/README.md ("What identical work means") has the
whole list. Runs nothing itself: bench/_workers.py runs one side, bench/vs_trl.py orchestrates.

    python bench/vs_trl.py --quick
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import sys
from dataclasses import dataclass
from typing import Any

# The tree's own grpo_desktop, whether or not (or wherever) the package is installed.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(1, ROOT)

LORA_R, LORA_ALPHA = 16, 32.0
NUM_PROBLEMS = 512


@dataclass
class Workload:
    size: str = "small"  # engine.models.tiny size: small (~3M) or medium (~25M)
    lora: bool = True
    B: int = 4  # prompts per step
    G: int = 8  # completions per prompt
    C: int = 64  # completion tokens (pinned)
    steps: int = 3  # timed steps per worker run (after the warm-up steps)
    warmup: int = 1  # untimed first steps
    beta: float = 0.04
    loss_type: str = "grpo"
    learning_rate: float = 1e-5
    seed: int = 0
    threads: int = 0  # torch threads in the worker; 0 = torch's default
    gradient_checkpointing: bool = False
    device: str = "cpu"  # cpu or cuda
    dtype: str = "float32"  # weights (and TRL's bf16 flag when bfloat16)
    quant: str = "none"  # none or 4bit (QLoRA; needs lora)
    # TRL's per_device_train_batch_size (completions per forward/backward); 0 = all B·G in one
    # pass. Below B·G, gradient accumulation makes one optimizer step cover the B·G completions.
    trl_micro_batch: int = 0

    @property
    def label(self) -> str:
        mode = "qlora" if self.quant == "4bit" else "lora" if self.lora else "full"
        return f"{self.size}/{mode}"

    @property
    def completions_per_step(self) -> int:
        return self.B * self.G

    @property
    def tokens_per_step(self) -> int:
        return self.B * self.G * self.C

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Workload:
        return cls(**json.loads(text))


def problems(n: int = NUM_PROBLEMS, seed: int = 0) -> list[dict[str, str]]:
    """n questions on two-digit products: all prompts tokenize to the same length."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append(
            {"question": f"What is the last digit of {a} × {b}?", "answer": str(a * b % 10)}
        )
    return rows


def cache_dir() -> str:
    root = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return os.path.join(root, "grpo-desktop", "bench")


def model_dir(size: str, seed: int = 0) -> str:
    """The benchmark model of `size`, built once (random weights, seeded) and cached: an
    engine.models.tiny size (micro, tiny, small ≈ 3M, medium ≈ 25M Llamas; qwen2.5-0.5b), or an
    engine/models/shapes.py shape at a depth, "NAME@LAYERS" (qwen2.5-1.5b-shaped@28: the shape's
    real tokenizer behaviour; bench/memory.py's folder for the same shape and depth)."""
    if "@" in size:
        return shaped_dir(size, seed)
    from grpo_desktop.engine.models.tiny import SIZES, build_tiny_model

    arch = SIZES[size].arch or "llama"
    folder = os.path.join(cache_dir(), f"{size}-{arch}-seed{seed}")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        build_tiny_model(folder, size, seed=seed, arch=arch)
    return folder


def shaped_dir(size: str, seed: int = 0, favour: str | None = None) -> str:
    """engine/models/shapes.py's NAME at LAYERS layers ("NAME@LAYERS"), built once into a
    temporary folder and renamed, so an interrupted build never leaves a folder that looks
    complete."""
    import shutil

    from grpo_desktop.engine.models.shapes import build_shaped

    name, layers = size.split("@")
    tag = "" if favour is None else "-favour-" + hashlib.sha256(favour.encode()).hexdigest()[:8]
    folder = os.path.join(cache_dir(), f"{name}-{int(layers)}l-seed{seed}{tag}")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        tmp = f"{folder}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        build_shaped(tmp, name, layers=int(layers), seed=seed, favour=favour)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    return folder


def dataset_file(seed: int = 0) -> str:
    """The prompts as JSONL (question/answer columns) for our engine's file source."""
    text = "".join(json.dumps(row) + "\n" for row in problems(seed=seed))
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    path = os.path.join(cache_dir(), f"problems-{digest}.jsonl")
    if not os.path.isfile(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return path


def reward_texts(completions: list[str], answers: list[str]) -> list[float | None]:
    """The reward both sides compute: our accuracy reward on the last number of the text."""
    from grpo_desktop.engine.rewards.functions import accuracy_reward

    return accuracy_reward(completions, answers, mode="last_number")


def our_config(w: Workload, model: str, data: str) -> Any:
    """Our TrainConfig for the workload: no eval, no checkpoint I/O in the timed steps."""
    from grpo_desktop.engine.config import TrainConfig

    return TrainConfig().replace(
        model={
            "name_or_path": model,
            "dtype": w.dtype,
            "device": w.device,
            "gradient_checkpointing": w.gradient_checkpointing,
        },
        lora={"enabled": w.lora, "r": LORA_R, "alpha": LORA_ALPHA, "dropout": 0.0},
        quantization={"mode": w.quant},
        data={"source": "file", "path": data, "system_prompt": "", "eval_size": 0},
        rewards={"accuracy_weight": 1.0, "format_weight": 0.0, "answer_extraction": "last_number"},
        algorithm={
            "num_generations": w.G,
            "prompts_per_step": w.B,
            "max_completion_length": w.C,
            "min_completion_length": w.C,
            "temperature": 1.0,
            "top_p": 1.0,
            "learning_rate": w.learning_rate,
            "lr_scheduler": "constant",
            "beta": w.beta,
            "loss_type": w.loss_type,
            "scale_rewards": "group",
            "std_type": "sample",  # as TRL
            "num_iterations": 1,
            "micro_batch_size": 0,
        },
        run={
            "max_steps": w.warmup + w.steps,
            "seed": w.seed,
            "eval_every": 0,
            "checkpoint_every": 1_000_000,
            "checkpoint_minutes": 0.0,
        },
    )


def trl_args(w: Workload, output_dir: str) -> dict[str, Any]:
    """GRPOConfig keyword arguments doing the same work as `our_config` (TRL 1.16 semantics:
    per_device_train_batch_size counts completions; with gradient_accumulation_steps 1 the
    generation batch is B·G completions and there is one optimizer step per generation batch).
    With `trl_micro_batch` below B·G, TRL takes that many completions per forward/backward and
    accumulates B·G ÷ it of them per optimizer step; steps_per_generation follows the
    accumulation, so it still generates B·G completions once per optimizer step."""
    n = w.B * w.G
    micro = w.trl_micro_batch or n
    if n % micro:
        raise ValueError(f"B·G = {n} is not a multiple of TRL's micro-batch {micro}.")
    return dict(
        output_dir=output_dir,
        per_device_train_batch_size=micro,
        num_generations=w.G,
        gradient_accumulation_steps=n // micro,
        num_iterations=1,
        max_completion_length=w.C,
        generation_kwargs={"min_new_tokens": w.C},
        temperature=1.0,
        top_p=1.0,
        top_k=0,  # no top-k: the full distribution, as ours
        beta=w.beta,
        use_bias_correction_kl=False,  # plain k3, as ours
        loss_type=w.loss_type,
        scale_rewards="group",
        learning_rate=w.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=w.warmup + w.steps,
        use_cpu=w.device == "cpu",
        bf16=w.dtype == "bfloat16",
        fp16=False,
        gradient_checkpointing=w.gradient_checkpointing,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
        seed=w.seed,
    )
