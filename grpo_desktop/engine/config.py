"""Training configuration: nested dataclasses whose field metadata drives validation and the GUI.

Every field carries a label, help text written for a hobbyist, and bounds or choices. The
hyperparameter form and its tooltips are generated from this metadata, and `validate()` turns
bad values into messages that say what is wrong and how to fix it.

Deliberately torch-free (enforced by import-linter) so the GUI and session layer start fast.

Try it:  python -c "from grpo_desktop.engine.config import preset; print(preset('dapo').to_json())"
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from grpo_desktop.engine.errors import ConfigError

SCHEMA_VERSION = 1


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
        "or builtin:demo for the small arithmetic model that ships with the app.",
    )
    dtype: str = option(
        "auto",
        label="Precision",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="Number format of the weights. auto picks bfloat16 on GPUs that support it and float32 "
        "on the CPU. Lower precision halves memory; float16 can be unstable in training.",
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
        choices=("arithmetic", "file", "disk", "hub"),
        help="arithmetic: built-in multiplication problems, nothing to download. file: a JSONL, CSV "
        "or Parquet file. disk: a folder saved with datasets' save_to_disk. hub: a dataset id from the "
        "Hugging Face hub (works offline when it is in the local cache).",
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


@dataclass
class RewardsConfig:
    accuracy_weight: float = option(
        1.0,
        label="Accuracy weight",
        min=0.0,
        max=100.0,
        help="Weight of the reward for a correct final answer. This is the real learning signal: "
        "keep it the largest weight.",
    )
    format_weight: float = option(
        0.2,
        label="Format weight",
        min=0.0,
        max=100.0,
        help="Weight of the reward for reasoning in think tags and answering in answer tags. Keep it "
        "small: at or above the accuracy weight the cheapest win is to emit tags instead of solving.",
    )
    answer_extraction: str = option(
        "auto",
        label="Answer extraction",
        choices=("auto", "answer_tag", "boxed", "last_number"),
        help="Where the final answer is read from: auto tries the answer tags, then \\boxed{}, then "
        "the last number in the text.",
    )
    think_tag: str = option(
        "think",
        label="Reasoning tag",
        help="Name of the tag that holds the reasoning: think checks for <think>…</think>.",
    )
    answer_tag: str = option(
        "answer",
        label="Answer tag",
        help="Name of the tag that holds the final answer: answer checks for <answer>…</answer>.",
    )
    numeric_tolerance: float = option(
        1e-6,
        label="Numeric tolerance",
        min=0.0,
        max=1.0,
        help="Relative tolerance when both answers are plain numbers.",
        advanced=True,
    )
    custom_weight: float = option(
        1.0,
        label="Custom checker weight",
        min=0.0,
        max=100.0,
        help="Weight of your own checker's score (only used when checker code is given).",
    )
    custom_checker: str = option(
        "",
        label="Custom checker",
        help="Python source defining check(completion, answer, prompt) -> float. It runs in a separate "
        "process; errors, time-outs and non-numbers are shown per rollout and never count as 0.",
    )
    checker_timeout_s: float = option(
        5.0,
        label="Checker time limit (s)",
        min=0.05,
        max=600.0,
        help="A call to your checker that takes longer than this is stopped and scored 'no score'.",
        advanced=True,
    )


@dataclass
class AlgorithmConfig:
    num_generations: int = option(
        8,
        label="Group size G",
        min=2,
        max=256,
        help="Completions sampled per prompt. The group's mean reward is the baseline, so larger "
        "groups find rare successes more often, at the cost of more generation per step.",
    )
    prompts_per_step: int = option(
        4,
        label="Prompts per step B",
        min=1,
        max=1024,
        help="Problems per training step. Each step generates B × G completions.",
    )
    max_completion_length: int = option(
        128,
        label="Max completion tokens",
        min=1,
        max=32768,
        help="Completions are cut at this length and count as truncated. Too short and every answer "
        "is cut off, which teaches nothing.",
    )
    temperature: float = option(
        1.0,
        label="Temperature",
        min=0.01,
        max=5.0,
        help="Sampling randomness. GRPO needs variety inside a group: too low and all answers in a "
        "group are the same (no signal), too high and they become noise.",
    )
    top_p: float = option(
        1.0,
        label="Top-p",
        min=0.01,
        max=1.0,
        help="Sample only from the most likely tokens covering this much probability.",
        advanced=True,
    )
    learning_rate: float = option(
        1e-5,
        label="Learning rate",
        min=1e-9,
        max=1.0,
        help="Size of each update. Raise it and the model changes faster but can collapse; LoRA "
        "usually tolerates 10× higher rates than full fine-tuning.",
    )
    lr_scheduler: str = option(
        "constant",
        label="LR schedule",
        choices=("constant", "linear", "cosine"),
        help="How the learning rate changes over the run (after warm-up).",
        advanced=True,
    )
    warmup_steps: int = option(
        0,
        label="Warm-up steps",
        min=0,
        max=100000,
        help="Steps over which the learning rate ramps up from 0.",
        advanced=True,
    )
    weight_decay: float = option(
        0.0,
        label="Weight decay",
        min=0.0,
        max=1.0,
        help="Shrinks the trained weights a little every step (AdamW). 0 is usual for short RL runs.",
        advanced=True,
    )
    max_grad_norm: float = option(
        1.0,
        label="Gradient clipping",
        min=0.0,
        max=1000.0,
        help="Gradients larger than this norm are scaled down, protecting against rare huge updates. "
        "0 turns clipping off.",
        advanced=True,
    )
    beta: float = option(
        0.04,
        label="KL penalty β",
        min=0.0,
        max=10.0,
        help="Pulls the model back toward where it started. Higher β is safer but learns slower; "
        "0 switches the penalty (and the reference model's forward pass) off.",
    )
    loss_type: str = option(
        "grpo",
        label="Loss aggregation",
        choices=("grpo", "bnpo", "dr_grpo", "dapo"),
        help="How token losses are averaged. grpo: mean per answer, then over answers (long wrong "
        "answers are punished less per token: the length bias). bnpo: mean over all tokens of the "
        "step. dr_grpo: sum divided by a constant (no length bias). dapo: mean over all tokens.",
    )
    importance_sampling_level: str = option(
        "token",
        label="Ratio level",
        choices=("token", "sequence"),
        help="token: PPO-style ratio per token. sequence (GSPO): one ratio per answer, the mean of "
        "its tokens' log-ratios. Only matters with more than one iteration per batch.",
        advanced=True,
    )
    scale_rewards: str = option(
        "group",
        label="Advantage scaling",
        choices=("group", "batch", "none"),
        help="group: divide by each group's standard deviation (GRPO). batch: by the whole step's. "
        "none: only subtract the group mean (Dr. GRPO), so easy and hard problems are not rescaled.",
    )
    std_type: str = option(
        "population",
        label="Standard deviation",
        choices=("population", "sample"),
        help="population divides by G (the lessons, DeepSeekMath); sample by G − 1 (TRL).",
        advanced=True,
    )
    epsilon_low: float = option(
        0.2,
        label="Clip ε low",
        min=0.0,
        max=1.0,
        help="How far below 1 the probability ratio may go before its gradient is cut.",
        advanced=True,
    )
    epsilon_high: float | None = option(
        None,
        label="Clip ε high",
        min=0.0,
        max=10.0,
        optional=True,
        help="How far above 1 the ratio may go; empty means the same as ε low. DAPO's clip-higher "
        "uses 0.28 so rare good tokens can grow.",
        advanced=True,
    )
    num_iterations: int = option(
        1,
        label="Updates per batch",
        min=1,
        max=64,
        help="Gradient steps on each generated batch. Above 1, the ratio to the generating policy "
        "moves away from 1 and clipping starts to matter.",
        advanced=True,
    )
    dynamic_sampling: bool = option(
        False,
        label="Dynamic sampling",
        help="Drop groups whose answers all scored the same (they teach nothing) and sample new "
        "prompts in their place (DAPO).",
        advanced=True,
    )
    max_resample_rounds: int = option(
        3,
        label="Resample rounds",
        min=0,
        max=100,
        help="With dynamic sampling: how many extra generation rounds to try per step before "
        "training on what was found.",
        advanced=True,
    )
    micro_batch_size: int = option(
        0,
        label="Micro-batch size",
        min=0,
        max=4096,
        help="Completions per forward/backward pass during the update; gradients are accumulated "
        "over the step. Lower it if you run out of memory. 0 = all B × G at once.",
        advanced=True,
    )
    mask_truncated_completions: bool = option(
        False,
        label="Mask truncated",
        help="Leave completions that hit the length limit out of the loss.",
        advanced=True,
    )


@dataclass
class RunConfig:
    max_steps: int = option(
        100, label="Steps", min=1, max=10_000_000, help="Training steps to run."
    )
    seed: int = option(
        0, label="Seed", min=0, max=2**31 - 1, help="Makes data order and sampling repeatable."
    )
    eval_every: int = option(
        10,
        label="Evaluate every",
        min=0,
        max=1_000_000,
        help="Steps between held-out accuracy checks (also run at the start and end). 0 = only then.",
    )
    checkpoint_every: int = option(
        10,
        label="Checkpoint every",
        min=1,
        max=1_000_000,
        help="Steps between saved checkpoints. A crash loses at most this many steps.",
    )
    checkpoint_minutes: float = option(
        10.0,
        label="Checkpoint every (min)",
        min=0.0,
        max=10_000.0,
        help="Also save when this many minutes passed since the last checkpoint. 0 = off.",
        advanced=True,
    )
    keep_checkpoints: int = option(
        2,
        label="Checkpoints kept",
        min=1,
        max=1000,
        help="Older checkpoints are deleted to save disk space.",
        advanced=True,
    )


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "lora": LoraConfig,
    "quantization": QuantizationConfig,
    "data": DataConfig,
    "rewards": RewardsConfig,
    "algorithm": AlgorithmConfig,
    "run": RunConfig,
}


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    quantization: QuantizationConfig = field(default_factory=QuantizationConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        out.update(dataclasses.asdict(self))
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build a config, rejecting unknown sections and fields with a message that names them."""
        if not isinstance(data, dict):
            raise ConfigError(
                "The config must be a JSON object with sections " + ", ".join(SECTIONS)
            )
        data = dict(data)
        version = data.pop("schema_version", SCHEMA_VERSION)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ConfigError(
                f"This config has schema_version {version!r}, newer than this app understands "
                f"({SCHEMA_VERSION}). Update GRPO Desktop to open it."
            )
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise ConfigError(
                f"Unknown config section(s) {', '.join(unknown)}; known sections are "
                f"{', '.join(SECTIONS)}."
            )
        sections = {}
        for name, section_cls in SECTIONS.items():
            values = data.get(name, {})
            if not isinstance(values, dict):
                raise ConfigError(f"Config section '{name}' must be an object, got {values!r}.")
            known = {f.name for f in dataclasses.fields(section_cls)}
            extra = sorted(set(values) - known)
            if extra:
                raise ConfigError(
                    f"Unknown field(s) {', '.join(name + '.' + e for e in extra)}; "
                    f"'{name}' has: {', '.join(sorted(known))}."
                )
            sections[name] = section_cls(**values)
        return cls(**sections)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"The config is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})."
            ) from exc
        return cls.from_dict(data)

    def replace(self, **sections: dict[str, Any]) -> TrainConfig:
        """A copy with some fields changed: cfg.replace(algorithm={"beta": 0.0})."""
        data = self.to_dict()
        for name, values in sections.items():
            data[name].update(values)
        return TrainConfig.from_dict(data)

    def validate(self) -> list[str]:
        return validate(self)


def iter_fields(section_cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(section_cls))


def _check_field(section: str, obj: Any, f: dataclasses.Field, hints: dict) -> list[str]:
    meta = f.metadata
    value = getattr(obj, f.name)
    label = f"{meta.get('label', f.name)} ({section}.{f.name})"
    if value is None:
        return [] if meta.get("optional") else [f"{label} must be set."]
    kind = hints[f.name]
    base = kind if isinstance(kind, type) else (float if "float" in str(kind) else None)
    if base is bool and not isinstance(value, bool):
        return [f"{label} must be true or false, got {value!r}."]
    if base is int and (isinstance(value, bool) or not isinstance(value, int)):
        return [f"{label} must be a whole number, got {value!r}."]
    if base is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return [f"{label} must be a number, got {value!r}."]
    if base is str and not isinstance(value, str):
        return [f"{label} must be text, got {value!r}."]
    if base is float and value != value:
        return [f"{label} must be a number, got NaN."]
    msgs = []
    if "choices" in meta and value not in meta["choices"]:
        msgs.append(f"{label} is {value!r}; choose one of: {', '.join(meta['choices'])}.")
    if "min" in meta and value < meta["min"]:
        msgs.append(f"{label} is {value}; it must be at least {meta['min']}.")
    if "max" in meta and value > meta["max"]:
        msgs.append(f"{label} is {value}; it must be at most {meta['max']}.")
    return msgs


def validate(cfg: TrainConfig) -> list[str]:
    """Every problem with the config, as sentences a hobbyist can act on. Empty means valid."""
    msgs: list[str] = []
    for name, section_cls in SECTIONS.items():
        obj = getattr(cfg, name)
        hints = get_type_hints(section_cls)
        for f in dataclasses.fields(section_cls):
            msgs.extend(_check_field(name, obj, f, hints))
    if msgs:
        return msgs
    a, r, d, q = cfg.algorithm, cfg.rewards, cfg.data, cfg.quantization
    if a.num_generations < 2:
        msgs.append(
            "Group size G must be at least 2: a group of 1 has no baseline to compare with."
        )
    if q.mode != "none" and not cfg.lora.enabled:
        msgs.append(
            f"{q.mode} quantization needs LoRA: quantized weights cannot be trained directly. "
            "Turn LoRA on or set quantization to none."
        )
    if not cfg.model.name_or_path.strip():
        msgs.append("Choose a model: a local folder, a hub id, or builtin:demo.")
    if d.source != "arithmetic" and not d.path.strip():
        msgs.append(f"Data source '{d.source}' needs a path or dataset id in data.path.")
    if d.source != "arithmetic" and (not d.prompt_column.strip() or not d.answer_column.strip()):
        msgs.append("Name the prompt column and the answer column of your dataset.")
    total = (
        r.accuracy_weight + r.format_weight + (r.custom_weight if r.custom_checker.strip() else 0)
    )
    if total <= 0:
        msgs.append(
            "All reward weights are 0: every answer scores the same, so no group has any spread and "
            "nothing is learned. Give accuracy a positive weight."
        )
    if r.answer_tag.strip() == "" or r.think_tag.strip() == "" or r.answer_tag == r.think_tag:
        msgs.append("The reasoning tag and the answer tag must be two different, non-empty names.")
    if a.loss_type == "dr_grpo" and a.scale_rewards != "none":
        msgs.append(
            "Dr. GRPO removes the standard-deviation scaling as well: set advantage scaling to none "
            "(or pick the Dr. GRPO preset)."
        )
    if a.epsilon_high is not None and a.epsilon_high < a.epsilon_low:
        msgs.append(
            "Clip ε high is below ε low; it is usually equal (GRPO) or larger (DAPO, 0.28)."
        )
    return msgs


def warnings(cfg: TrainConfig) -> list[str]:
    """Valid but risky settings, explained (the lessons' traps)."""
    out = []
    r = cfg.rewards
    if r.format_weight > 0 and r.format_weight >= r.accuracy_weight:
        out.append(
            "Format weight is at or above accuracy weight: the cheapest way to raise the reward is "
            "to emit the tags without solving anything (reward hacking). Keep format small, e.g. 0.2."
        )
    if cfg.algorithm.temperature < 0.3:
        out.append(
            "A low temperature makes the answers in a group nearly identical: identical answers get "
            "identical rewards and zero advantage, so little is learned."
        )
    return out


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # DeepSeekMath GRPO: per-sequence token mean, group std scaling, KL 0.04.
    "grpo": {
        "algorithm": {
            "loss_type": "grpo",
            "scale_rewards": "group",
            "importance_sampling_level": "token",
            "beta": 0.04,
            "epsilon_low": 0.2,
            "epsilon_high": None,
            "dynamic_sampling": False,
        }
    },
    # Dr. GRPO: no length normalisation, no std scaling.
    "dr_grpo": {
        "algorithm": {
            "loss_type": "dr_grpo",
            "scale_rewards": "none",
            "importance_sampling_level": "token",
            "beta": 0.0,
            "epsilon_low": 0.2,
            "epsilon_high": None,
            "dynamic_sampling": False,
        }
    },
    # DAPO: global token mean, clip-higher, dynamic sampling, no KL.
    "dapo": {
        "algorithm": {
            "loss_type": "dapo",
            "scale_rewards": "group",
            "importance_sampling_level": "token",
            "beta": 0.0,
            "epsilon_low": 0.2,
            "epsilon_high": 0.28,
            "dynamic_sampling": True,
        }
    },
    # GSPO: one importance ratio per sequence, tight clip range as in the paper.
    "gspo": {
        "algorithm": {
            "loss_type": "grpo",
            "scale_rewards": "group",
            "importance_sampling_level": "sequence",
            "beta": 0.0,
            "epsilon_low": 3e-4,
            "epsilon_high": 4e-4,
            "dynamic_sampling": False,
        }
    },
}

PRESET_LABELS = {"grpo": "GRPO", "dr_grpo": "Dr. GRPO", "dapo": "DAPO", "gspo": "GSPO"}


def preset(name: str, base: TrainConfig | None = None) -> TrainConfig:
    """The config `base` (default: defaults) with a named variant's algorithm settings applied."""
    if name not in PRESETS:
        raise ConfigError(f"Unknown preset '{name}'; choose one of: {', '.join(PRESETS)}.")
    return (base or TrainConfig()).replace(**PRESETS[name])


def load_config(path: str) -> TrainConfig:
    """Read a config JSON file; errors name the file and the problem."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(
            f"Config file not found: {path}. Create one with `grpo-desktop config --demo > {path}`."
        ) from None
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc.strerror}.") from None
    try:
        return TrainConfig.from_json(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
