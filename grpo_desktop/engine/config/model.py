"""Config sections for what is trained on: model, LoRA, quantization and data.

Each field is an `option()`: a dataclass field whose metadata carries the label, the help text
(written for a hobbyist: what it does, what happens if you raise it) and bounds or choices. The
GUI form, its tooltips and `validate()` are generated from this metadata. Torch-free.

Try it:  python -c "from grpo_desktop.engine.config import LoraConfig; print(LoraConfig())"
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


def option(
    default: Any,
    *,
    label: str,
    help: str,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] | None = None,
    advanced: bool = False,
    optional: bool = False,
) -> Any:
    """A dataclass field with the metadata the validator and the GUI form read."""
    meta = {"label": label, "help": help, "advanced": advanced, "optional": optional}
    if min is not None:
        meta["min"] = min
    if max is not None:
        meta["max"] = max
    if choices is not None:
        meta["choices"] = choices
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ModelConfig:
    name_or_path: str = option(
        "builtin:demo",
        label="Model",
        help="A local folder with a Hugging Face model, a hub id such as Qwen/Qwen2.5-0.5B-Instruct, "
        "a GGUF model file (from llama.cpp, LM Studio or Ollama: imported once into the app's "
        "cache), or builtin:demo for the small arithmetic model that ships with the app.",
    )
    dtype: str = option(
        "auto",
        label="Precision",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="Number format of the weights. auto picks bfloat16 on GPUs that support it and float32 "
        "on the CPU. Lower precision halves memory; float16 can be unstable in training. Full "
        "fine-tuning in bfloat16 on the CPU keeps float32 weights and runs the training passes' "
        "matrix products in bfloat16: faster on CPUs with AMX (recent Xeons), rounded like a GPU's.",
        advanced=True,
    )
    sampling_precision: str = option(
        "same",
        label="Sampling precision",
        choices=("same", "bfloat16"),
        help="Number format of the products while answers are sampled on the CPU. same: the "
        "weights' own format, so answers come from exactly the model being trained. bfloat16: "
        "the decode rounds weights and activations to bfloat16 (the prompt and held-out "
        "evaluation stay exact): on CPUs with bfloat16 instructions (AMX or AVX-512 BF16: Intel "
        "Xeon since Sapphire Rapids, AMD Zen 4 and later) a model of 100M+ parameters samples "
        "about 1.2-1.4× faster, since its decode mostly reads weights. Answers then come from a very "
        "slightly different model than the one scored (logits move by about 1 %), as when a GPU "
        "server samples for a trainer. While sampling it holds a bfloat16 copy of the weights "
        "(half their float32 size). Other CPUs, GPUs, bfloat16 or 4/8-bit weights, models under "
        "about 8M parameters (the demo: there it would be slower) and models other than Llama, "
        "Qwen2 and SmolLM2 sample as with same; the run log says which.",
        advanced=True,
    )
    device: str = option(
        "auto",
        label="Device",
        choices=("auto", "cpu", "cuda"),
        help="Where training runs. auto uses the GPU when there is one.",
        advanced=True,
    )
    gradient_checkpointing: bool = option(
        False,
        label="Gradient checkpointing",
        help="Recompute activations in the backward pass instead of storing them: much less memory "
        "for long completions, about 30 % slower steps.",
        advanced=True,
    )
    trust_remote_code: bool = option(
        False,
        label="Trust remote code",
        help="Let the model folder run its own Python code. Only turn this on for models whose "
        "authors you trust: the code runs with your permissions.",
        advanced=True,
    )


@dataclass
class LoraConfig:
    enabled: bool = option(
        True,
        label="Use LoRA",
        help="Train small low-rank adapters instead of every weight. Uses far less memory, and the "
        "reference model for the KL penalty comes for free (the model with the adapter switched off). "
        "Turn off for full fine-tuning of tiny models.",
    )
    r: int = option(
        16,
        label="LoRA rank",
        min=1,
        max=1024,
        help="Size of the adapters. Higher ranks can learn more but use more memory; 8-64 is typical.",
    )
    alpha: float = option(
        32.0,
        label="LoRA alpha",
        min=0.0,
        max=4096.0,
        help="Scale of the adapter's contribution (effective scale alpha / rank). Usually 2 × rank; "
        "raising it acts like a larger learning rate for the adapters.",
        advanced=True,
    )
    dropout: float = option(
        0.0,
        label="LoRA dropout",
        min=0.0,
        max=0.9,
        help="Randomly drops adapter inputs during training to reduce overfitting. 0 is usual for RL.",
        advanced=True,
    )
    target_modules: str = option(
        "all-linear",
        label="Target modules",
        help="Which layers get adapters: all-linear (recommended), or a comma-separated list of "
        "module names such as q_proj,v_proj.",
        advanced=True,
    )


@dataclass
class QuantizationConfig:
    mode: str = option(
        "none",
        label="Quantization",
        choices=("none", "8bit", "4bit"),
        help="Load the frozen base weights in 8 or 4 bits (QLoRA, 4-bit NF4) to fit larger models in "
        "GPU memory. Needs LoRA and bitsandbytes; 4-bit is the usual choice on a consumer GPU.",
    )
    double_quant: bool = option(
        True,
        label="Double quantization",
        help="Also quantize the 4-bit scaling constants: saves about 0.4 bits per weight.",
        advanced=True,
    )


@dataclass
class DataConfig:
    source: str = option(
        "arithmetic",
        label="Data source",
        choices=("arithmetic", "file", "disk", "hub", "task"),
        help="arithmetic: built-in multiplication problems, nothing to download. file: a JSONL, CSV "
        "or Parquet file. disk: a folder saved with datasets' save_to_disk. hub: a dataset id from the "
        "Hugging Face hub (works offline when it is in the local cache). task: problems generated "
        "by a reasoning-gym task (countdown, knights_knaves, ...), scored by the task's own checker; "
        'needs pip install "grpo-desktop[tasks]".',
    )
    path: str = option(
        "",
        label="Path or id",
        help="The file, folder or hub dataset id (for example openai/gsm8k). Not used for arithmetic.",
    )
    subset: str = option(
        "",
        label="Subset",
        help="Configuration name of a hub dataset, e.g. main for openai/gsm8k. Usually empty.",
        advanced=True,
    )
    split: str = option(
        "train",
        label="Split",
        help="Which split of the dataset to train on (train, test, ...). Held-out problems are taken from it.",
    )
    prompt_column: str = option(
        "question", label="Prompt column", help="The column that holds the problem text."
    )
    answer_column: str = option(
        "answer",
        label="Answer column",
        help="The column that holds the reference answer. GSM8K-style answers ending in '#### 42' "
        "are reduced to the final number.",
    )
    system_prompt: str = option(
        "Think step by step inside <think></think>, then give only the final result inside "
        "<answer></answer>.",
        label="System prompt",
        help="Instructions put before every problem. Tell the model the format the format reward "
        "checks for.",
    )
    example_problem: str = option(
        "",
        label="Worked example: problem",
        help="An example problem shown to the model before every real one, as an earlier turn of "
        "the conversation, followed by the worked example's answer. Small models copy a format "
        "they see far better than one they are only told about. Leave both example fields empty "
        "for none.",
    )
    example_answer: str = option(
        "",
        label="Worked example: answer",
        help="The perfect answer to the example problem, as the model should write it. Keep it in "
        "exactly the format the format reward checks, e.g. <think>7 × 8 = 56</think> "
        "<answer>56</answer>: the model copies what it sees. Leave empty for no example.",
    )
    answer_prefix: str = option(
        "",
        label="Answer starts with",
        help="Text written for the model at the start of every answer, which it then continues "
        "(a prefill), e.g. <think> to start it inside the reasoning tag, as DeepSeek-R1-Zero's "
        "template does. A model that never writes the tags when only told about them then "
        "writes the rest of the format often enough for the format reward to teach it, with no "
        "worked example. Rewards, held-out evaluation, Try and the rollout inspector see this "
        "text followed by what the model wrote. Leave empty for none.",
    )
    eval_size: int = option(
        64,
        label="Held-out problems",
        min=0,
        max=100000,
        help="Problems kept out of training and used to measure accuracy with greedy decoding. This "
        "side evaluation shows whether the model really improves or only games the reward.",
    )
    max_prompt_length: int = option(
        512,
        label="Max prompt tokens",
        min=8,
        max=32768,
        help="Prompts longer than this are cut from the left.",
        advanced=True,
    )
    arithmetic_difficulty: int = option(
        2,
        label="Arithmetic difficulty",
        min=1,
        max=5,
        help="Digits per factor in the built-in problems: 1 gives 7 × 8, 2 gives 17 × 24, "
        "3 gives 317 × 24.",
    )
    arithmetic_size: int = option(
        2000,
        label="Arithmetic problems",
        min=10,
        max=1000000,
        help="How many built-in problems to generate for training.",
        advanced=True,
    )
    task: str = option(
        "basic_arithmetic",
        label="Task",
        help="The reasoning-gym task that generates the problems when the source is task, e.g. "
        "basic_arithmetic, countdown (reach a number with the given ones), knights_knaves (who "
        "lies?) or gsm_symbolic (grade-school word problems). Each answer is scored by the task's "
        "own checker, with partial credit where the task gives it.",
    )
    task_options: dict = option(
        {},
        label="Task settings",
        help="The task's own parameters (its difficulty knobs, e.g. min_terms and max_digits for "
        "basic_arithmetic); empty keeps the task's defaults. The Dataset panel shows a form for "
        "them.",
        advanced=True,
    )
    task_size: int = option(
        2000,
        label="Task problems",
        min=10,
        max=1000000,
        help="How many task problems to generate for training. The held-out problems come from a "
        "different seed and never repeat a training problem.",
    )
    task_seed: int = option(
        0,
        label="Task seed",
        min=0,
        max=2**31 - 1,
        help="Which problems the task generates: the same seed gives the same problems, so runs "
        "can be compared. Change it for a fresh set.",
        advanced=True,
    )
