"""How each GRPO Desktop setting becomes a TRL 1.16 setting: the data table behind the TRL export.

`MAPPED` lists every setting that has a TRL equivalent, with the target (a `GRPOConfig` field,
peft's `LoraConfig`, transformers' `BitsAndBytesConfig`, the dataset or the reward functions) and
a converter. Static targets end up in the exported `settings.json` under `grpo_config`; the few
that depend on the machine the project runs on (batch layout over the processes, precision,
device) go under `runtime` and are resolved by the exported train.py when it starts. `UNMAPPED`
lists the settings TRL has no equivalent for and what TRL does instead; the exported README's
table is generated from it, so it cannot drift from the code.

Deliberately torch-free and trl-free: only the exported train.py imports trl. Does not write
files (engine/export/trl_project.py does).

Try it:  python -c "from grpo_desktop.engine.export.trl_map import grpo_config_kwargs; \\
from grpo_desktop.engine.config import TrainConfig; print(grpo_config_kwargs(TrainConfig()))"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grpo_desktop.engine.config import TrainConfig


@dataclass(frozen=True)
class Mapped:
    """One app setting ("algorithm.beta") and the TRL field it sets ("beta")."""

    setting: str
    target: str  # a GRPOConfig field, or "runtime.<key>", "lora.<key>", "quantization.<key>", ...
    convert: Callable[[Any, TrainConfig], Any]
    note: str = ""


@dataclass(frozen=True)
class Unmapped:
    """A setting TRL has no equivalent for; `instead` says what TRL does."""

    setting: str
    instead: str


def _same(value: Any, cfg: TrainConfig) -> Any:
    return value


def _schedule(value: str, cfg: TrainConfig) -> str:
    # The app holds the rate after warm-up for "constant"; transformers' "constant" ignores warm-up.
    return {"constant": "constant_with_warmup"}.get(value, value)


def _targets(value: str, cfg: TrainConfig) -> str | list[str]:
    value = value.strip()
    return "all-linear" if value in ("", "all-linear") else [t.strip() for t in value.split(",")]


def _per_update(value: int, cfg: TrainConfig) -> int:
    return value * cfg.algorithm.num_iterations


def _reward_weights(value: Any, cfg: TrainConfig) -> list[float]:
    return [weight for _, weight in reward_functions(cfg)]


MAPPED: tuple[Mapped, ...] = (
    Mapped("algorithm.loss_type", "loss_type", _same),
    Mapped(
        "algorithm.beta",
        "beta",
        _same,
        "use_bias_correction_kl=False keeps the app's plain k3 KL term (TRL 1.16's default "
        "multiplies it by the importance ratio).",
    ),
    Mapped("algorithm.epsilon_low", "epsilon", _same),
    Mapped("algorithm.epsilon_high", "epsilon_high", _same, "empty: the same as ε low."),
    Mapped("algorithm.scale_rewards", "scale_rewards", _same),
    Mapped("algorithm.num_generations", "num_generations", _same),
    Mapped(
        "algorithm.prompts_per_step",
        "runtime.completions_per_step",
        lambda value, cfg: value * cfg.algorithm.num_generations,
        "B·G completions per step: train.py sets per_device_train_batch_size × "
        "gradient_accumulation_steps × processes = B·G, so one generation batch is one "
        "optimizer step whatever the number of GPUs.",
    ),
    Mapped(
        "algorithm.micro_batch_size",
        "runtime.micro_batch_size",
        _same,
        "per_device_train_batch_size: the largest divisor of B·G / processes up to this "
        "(0 = auto: up to G). TRL cannot size it by itself (auto_find_batch_size is refused).",
    ),
    Mapped("algorithm.max_completion_length", "max_completion_length", _same),
    Mapped(
        "algorithm.min_completion_length",
        "runtime.min_completion_length",
        _same,
        "generation_kwargs min_new_tokens (min_tokens with vLLM); 0 sets nothing.",
    ),
    Mapped("algorithm.temperature", "temperature", _same),
    Mapped("algorithm.top_p", "top_p", _same),
    Mapped("algorithm.learning_rate", "learning_rate", _same),
    Mapped(
        "algorithm.lr_scheduler",
        "lr_scheduler_type",
        _schedule,
        "constant becomes constant_with_warmup (the app warms up, then holds).",
    ),
    Mapped("algorithm.warmup_steps", "warmup_steps", _per_update, "× updates per batch."),
    Mapped("algorithm.weight_decay", "weight_decay", _same),
    Mapped("algorithm.max_grad_norm", "max_grad_norm", _same, "0 turns clipping off in both."),
    Mapped("algorithm.importance_sampling_level", "importance_sampling_level", _same),
    Mapped("algorithm.mask_truncated_completions", "mask_truncated_completions", _same),
    Mapped("algorithm.num_iterations", "num_iterations", _same),
    Mapped(
        "run.max_steps",
        "max_steps",
        _per_update,
        "× updates per batch: a TRL step is one optimizer update, an app step one generation "
        "batch with all its updates. --max_steps overrides it (in TRL steps).",
    ),
    Mapped(
        "run.seed",
        "seed",
        _same,
        "same seed, not the same batches: TRL shuffles and samples with its own generators.",
    ),
    Mapped("run.checkpoint_every", "save_steps", _per_update, "× updates per batch."),
    Mapped("run.keep_checkpoints", "save_total_limit", _same),
    Mapped(
        "model.gradient_checkpointing",
        "activation_checkpointing",
        _same,
        "transformers 5's name for gradient_checkpointing; set explicitly, as TRL turns it on "
        "by default.",
    ),
    Mapped(
        "model.trust_remote_code",
        "trust_remote_code",
        _same,
        "on: train.py asks before the model's own code runs on a machine where it is not "
        "trusted (--trust-remote-code skips the question).",
    ),
    Mapped("model.name_or_path", "runtime.model", _same, "--model overrides it."),
    Mapped(
        "model.dtype",
        "runtime.dtype",
        _same,
        "bf16/fp16 plus model_init_kwargs dtype (float32 master weights for full fine-tuning, "
        "as in the app); auto = bfloat16 on a GPU that runs it, else float32, as in the app.",
    ),
    Mapped("model.device", "runtime.device", _same, "cpu sets use_cpu."),
    Mapped("lora.enabled", "lora.enabled", _same, "peft LoraConfig passed as peft_config."),
    Mapped("lora.r", "lora.r", _same),
    Mapped("lora.alpha", "lora.lora_alpha", _same),
    Mapped("lora.dropout", "lora.lora_dropout", _same),
    Mapped("lora.target_modules", "lora.target_modules", _targets),
    Mapped(
        "quantization.mode",
        "quantization.mode",
        _same,
        "BitsAndBytesConfig: 4bit is NF4 with the compute dtype of the run, 8bit load_in_8bit.",
    ),
    Mapped("quantization.double_quant", "quantization.bnb_4bit_use_double_quant", _same),
    Mapped(
        "data.source",
        "data.source",
        _same,
        "the app's own loader reads the data at export; its training rows go to "
        "data/train.jsonl (held-out rows left out, answers normalised as in the app).",
    ),
    Mapped("data.prompt_column", "data.prompt_column", _same),
    Mapped("data.answer_column", "data.answer_column", _same),
    Mapped(
        "data.system_prompt",
        "data.system_prompt",
        _same,
        "conversational prompts through the model's chat template, as the app builds them "
        "(with the worked example's turns first, when the run has one).",
    ),
    Mapped(
        "data.answer_prefix",
        "data.answer_prefix",
        _same,
        "with a prefix, prompts are texts rendered as the app renders them, ending in the "
        "prefix, which the model continues; the rewards score the prefix followed by the "
        "completion, as the app does.",
    ),
    Mapped(
        "rewards.accuracy_weight",
        "reward_weights",
        _reward_weights,
        "one weight per reward function with a positive weight (accuracy, format, custom).",
    ),
    Mapped("rewards.format_weight", "reward_weights", _reward_weights),
    Mapped("rewards.custom_weight", "reward_weights", _reward_weights),
    Mapped(
        "rewards.custom_checker",
        "rewards.custom_checker",
        lambda value, cfg: "custom_checker.py" if value.strip() else None,
        "written to custom_checker.py; run in the app's sandboxed checker process with the "
        "same time and memory limits, after train.py asked on a machine where it is not "
        "trusted (--trust-checker skips the question).",
    ),
)

UNMAPPED: tuple[Unmapped, ...] = (
    Unmapped(
        "model.sampling_precision",
        "TRL samples with the model it trains, in the model's own precision (float32 on a CPU); "
        "with vLLM, in the vLLM server's.",
    ),
    Unmapped(
        "algorithm.std_type",
        "TRL always divides by the sample standard deviation (÷ (G − 1)); the app's default "
        "population std (÷ G) gives advantages smaller by √((G − 1) / G).",
    ),
    Unmapped(
        "algorithm.dynamic_sampling",
        "TRL trains on every group: groups whose answers all scored the same stay in the "
        "batch with advantage 0 (no resampling).",
    ),
    Unmapped("algorithm.max_resample_rounds", "Unused: TRL does not resample groups."),
    Unmapped(
        "data.max_prompt_length",
        "TRL 1.16 has no prompt limit: prompts are used whole (the app cuts their beginning). "
        "train.py says how many training prompts are longer.",
    ),
    Unmapped(
        "data.eval_size",
        "The held-out problems are left out of data/train.jsonl and written to "
        "data/heldout.jsonl; TRL does not evaluate on them.",
    ),
    Unmapped(
        "run.eval_every",
        "TRL runs no greedy held-out accuracy check during training; judge the trained model "
        "in GRPO Desktop (Try and Compare).",
    ),
    Unmapped(
        "run.checkpoint_minutes",
        "TRL saves checkpoints by step only (save_steps), never by time.",
    ),
    Unmapped(
        "alerts.*",
        "TRL raises no health alarms; open the output folder in GRPO Desktop to see them.",
    ),
    Unmapped(
        "algorithm.warmup_steps (first step)",
        "transformers' warm-up starts at a rate of 0 on the first step; the app's at 1/warmup.",
    ),
)


def setting_value(cfg: TrainConfig, setting: str) -> Any:
    """The value of "section.field" in `cfg` ("alerts.*": the alerts section as a dict)."""
    section, _, name = setting.partition(".")
    obj = getattr(cfg, section)
    if name == "*":
        return "on" if cfg.alerts.enabled else "off"
    return getattr(obj, name.split(" ")[0])


def reward_functions(cfg: TrainConfig) -> list[tuple[str, float]]:
    """(name, weight) of each reward function the run uses, in the app's order (RewardSet)."""
    r = cfg.rewards
    candidates = [
        ("accuracy", r.accuracy_weight, True),
        ("format", r.format_weight, True),
        ("custom", r.custom_weight, bool(r.custom_checker.strip())),
    ]
    return [(name, float(weight)) for name, weight, used in candidates if used and weight > 0]


def _sections(cfg: TrainConfig) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"grpo_config": {}}
    for m in MAPPED:
        value = m.convert(setting_value(cfg, m.setting), cfg)
        head, _, key = m.target.partition(".")
        if key:
            out.setdefault(head, {})[key] = value
        else:
            out["grpo_config"][m.target] = value
    return out


def grpo_config_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    """The GRPOConfig keyword arguments that do not depend on the machine (see MAPPED)."""
    kwargs = _sections(cfg)["grpo_config"]
    kwargs.update(
        use_bias_correction_kl=False,  # the app's k3 KL (see MAPPED's note on beta)
        save_strategy="steps",
        logging_steps=1,  # every step in trainer_state.json's log_history, as in the app
        log_completions=True,  # completions/completions_<step>.parquet every logged step
        num_completions_to_print=2,  # printed with rich, when installed
        remove_unused_columns=False,  # the reward functions read the answer column
        report_to="none",
    )
    return kwargs


def export_settings(cfg: TrainConfig) -> dict[str, Any]:
    """Everything train.py reads from settings.json, apart from the file names of the data."""
    sections = _sections(cfg)
    sections["grpo_config"] = grpo_config_kwargs(cfg)
    rewards = sections.setdefault("rewards", {})
    rewards["functions"] = [name for name, _ in reward_functions(cfg)]
    # The app's reward settings, read back into RewardsConfig by train.py (the checker's source
    # is in custom_checker.py, easier to read and edit than a JSON string).
    rewards["app"] = {k: v for k, v in cfg.to_dict()["rewards"].items() if k != "custom_checker"}
    return sections


def batch_layout(
    completions: int, world: int, *, micro: int = 0, group: int = 8, per_device: int | None = None
) -> tuple[int, int]:
    """(per_device_train_batch_size, gradient_accumulation_steps) for `world` processes, with
    per-device size × accumulation × processes = the step's B·G `completions`: one generation
    batch per optimizer step, on any number of GPUs. The per-device size is `per_device` when
    given, else the largest divisor of the per-process share up to `micro` (0: up to G)."""
    if world < 1 or completions % world:
        raise ValueError(
            f"the {completions} completions of a step (B·G) do not split evenly over {world} "
            f"processes. Use a number of processes that divides {completions}, or change "
            "'Prompts per step B' in GRPO Desktop and export again."
        )
    local = completions // world
    if per_device is not None:
        if per_device < 1 or local % per_device:
            raise ValueError(
                f"a per-device batch of {per_device} does not divide the {local} completions "
                f"each process handles per step; pick a divisor of {local}."
            )
        return per_device, local // per_device
    target = max(1, micro or group)
    size = max(d for d in range(1, min(local, target) + 1) if local % d == 0)
    return size, local // size


def unmapped_rows(cfg: TrainConfig) -> list[tuple[str, str, str]]:
    """(setting, its value in this export, what TRL does instead) for the README's table."""
    return [(u.setting, repr(setting_value(cfg, u.setting)), u.instead) for u in UNMAPPED]
