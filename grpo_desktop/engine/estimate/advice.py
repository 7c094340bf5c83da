"""What to change when a run will not fit: each candidate setting re-estimated, best first.

`advise` tries, one at a time, the changes a hobbyist can make in the settings (4-bit, LoRA
instead of full fine-tuning, gradient checkpointing, a smaller group size G, fewer prompts per
step, shorter completions, micro-batch auto), recomputes the estimate with formulas.py, and
returns those that lower the memory needed, ordered by the figure they bring it to. Each names the
setting as the settings panel labels it ("Quantization → 4-bit") and carries the config change
itself (`change`, for TrainConfig.replace), so a caller can apply it.

Torch-free. Does not combine changes (the first that fits is the advice; the list shows the
rest), and never suggests a change that makes the run a different experiment without saying so
(smaller G or shorter completions change what is learnt: the text says what it trades).
Try it:  grpo-desktop estimate --demo --free-gb 0.5  (its "To make it fit" lines)
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace

from grpo_desktop.engine.config.model import LoraConfig, ModelConfig, QuantizationConfig
from grpo_desktop.engine.config.training import AlgorithmConfig
from grpo_desktop.engine.estimate.formulas import Device, Params, Settings, memory
from grpo_desktop.engine.estimate.memory import ModelShape


def label(section: type, name: str) -> str:
    """The settings panel's label of a config field."""
    for f in dataclasses.fields(section):
        if f.name == name:
            return str(f.metadata.get("label", name))
    return name


def gb(n: int | float) -> str:
    """Bytes as a hobbyist reads them: '5.1 GB' (10^9 bytes), '850 MB' below 1 GB."""
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    return f"{max(0.0, n) / 1e6:.0f} MB"


def candidates(s: Settings) -> list[tuple[str, Settings, dict]]:
    """(what to do, the settings after it, the config change) for each change that applies."""
    out: list[tuple[str, Settings, dict]] = []
    quant, lora = label(QuantizationConfig, "mode"), label(LoraConfig, "enabled")
    if s.quant != "4bit":
        change: dict = {"quantization": {"mode": "4bit"}}
        text = f"Load the model in 4-bit ({quant} → 4bit"
        if not s.lora:
            change["lora"] = {"enabled": True}
            text += f", with {lora} on"
        out.append((text + ")", replace(s, quant="4bit", lora=True), change))
    if not s.lora:
        out.append(
            (
                f"Train LoRA adapters instead of every weight ({lora} → on)",
                replace(s, lora=True),
                {"lora": {"enabled": True}},
            )
        )
    if not s.checkpointing:
        out.append(
            (
                f"Turn on {label(ModelConfig, 'gradient_checkpointing')} (steps about 30 % slower)",
                replace(s, checkpointing=True),
                {"model": {"gradient_checkpointing": True}},
            )
        )
    if s.G >= 4:
        g = s.G // 2
        out.append(
            (
                f"Sample fewer answers per prompt ({label(AlgorithmConfig, 'num_generations')} "
                f"→ {g}; noisier advantages)",
                replace(s, G=g),
                {"algorithm": {"num_generations": g}},
            )
        )
    if s.B >= 2:
        b = s.B // 2
        out.append(
            (
                f"Take fewer prompts per step ({label(AlgorithmConfig, 'prompts_per_step')} → {b})",
                replace(s, B=b),
                {"algorithm": {"prompts_per_step": b}},
            )
        )
    if s.completion_tokens >= 64:
        c = s.completion_tokens // 2
        out.append(
            (
                f"Allow shorter answers ({label(AlgorithmConfig, 'max_completion_length')} → {c}; "
                "longer ones are cut off)",
                replace(s, completion_tokens=c),
                {"algorithm": {"max_completion_length": c}},
            )
        )
    if s.micro_batch > 1:
        out.append(
            (
                f"Let the app pick the rows per pass "
                f"({label(AlgorithmConfig, 'micro_batch_size')} → 0)",
                replace(s, micro_batch=0),
                {"algorithm": {"micro_batch_size": 0}},
            )
        )
    return out


def advise(shape: ModelShape, p: Params, s: Settings, dev: Device, needed: int) -> list[dict]:
    """The changes that lower the memory needed below `needed` (the run's as set), each
    {"text", "setting", "change", "needed", "fits"}, ordered by the memory needed after it; when
    none fits the free memory, a last entry says so (setting None, change {})."""
    out = []
    for what, changed, change in candidates(s):
        after = memory(shape, p, changed, dev)["needed"]
        if after >= needed * 0.98:
            continue
        fits = None if dev.free_bytes is None else after <= dev.free_bytes
        text = f"{what}: about {gb(after)} instead of {gb(needed)}"
        if fits is False:
            text += f" (still more than the {gb(dev.free_bytes)} free)"
        out.append(
            {
                "text": text,
                "setting": next(f"{k}.{n}" for k, v in change.items() for n in v),
                "change": change,
                "needed": int(after),
                "fits": fits,
            }
        )
    out.sort(key=lambda a: a["needed"])
    if dev.free_bytes is not None and not any(a["fits"] for a in out) and needed > dev.free_bytes:
        floor = min([a["needed"] for a in out] + [needed])
        out.append(
            {
                "text": f"No single setting brings it under the {gb(dev.free_bytes)} free (the "
                f"least is about {gb(floor)}): close other programs, combine the changes above, "
                "or choose a smaller model.",
                "setting": None,
                "change": {},
                "needed": int(floor),
                "fits": False,
            }
        )
    return out
