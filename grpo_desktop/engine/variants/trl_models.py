"""The models a TRL `GRPOTrainer` output_dir holds, as `Variant`s for Try and Compare.

TRL (through transformers' `Trainer`) saves each checkpoint as `OUTPUT_DIR/checkpoint-N/` and the
final model, when the script calls `trainer.save_model()`, in `OUTPUT_DIR/` itself, both in
`save_pretrained` form: a peft adapter for a LoRA run, else a whole model. Those are the folders
the app's own checkpoints keep under `adapter/` and `model/`, so `ModelVariants` loads them the
same way. `trl_variants(folder)` lists them oldest first, the final model last (key "final");
`is_trl_output` tells such a folder from the app's run folders; `trl_base_model` names the base
a LoRA output was trained from, which Try and Compare load as "base". Imports no torch.

Try it:  python -c "from grpo_desktop.engine.variants.trl_models import trl_models; \\
print(trl_models('output'))"
"""

from __future__ import annotations

import json
import os

from grpo_desktop.engine.runs.files import events_path
from grpo_desktop.engine.runs.layout import trl_checkpoint_dirs
from grpo_desktop.engine.variants.variant import Variant

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")
STATE_FILE = "trainer_state.json"


def weights_kind(folder: str) -> str | None:
    """What save_pretrained weights `folder` holds: "adapter", "model" or None."""
    if os.path.isfile(os.path.join(folder, "adapter_config.json")) and any(
        os.path.isfile(os.path.join(folder, f)) for f in ADAPTER_FILES
    ):
        return "adapter"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    if "config.json" in names and any(n.endswith(".safetensors") for n in names):
        return "model"
    return None


def is_trl_output(folder: str | None) -> bool:
    """A TRL output_dir: checkpoint-N folders or a trainer_state.json, and not an app run
    folder (those have events.jsonl)."""
    if not folder or not os.path.isdir(folder):
        return False
    if os.path.isfile(events_path(folder)):
        return False
    return bool(trl_checkpoint_dirs(folder)) or os.path.isfile(os.path.join(folder, STATE_FILE))


def _final_step(folder: str) -> int | None:
    try:
        with open(os.path.join(folder, STATE_FILE), encoding="utf-8") as fh:
            step = json.load(fh).get("global_step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def trl_models(folder: str) -> list[tuple[str, str, int | None, str, bool]]:
    """(key, label, step, weights folder, is_adapter) of every checkpoint-N with weights (key
    "step-N"), then of the final model in the folder itself (key "final") when it was saved
    there. Torch-free: what the GUI thread lists in the Try and Compare pickers."""
    found = []
    for step, path in trl_checkpoint_dirs(folder):
        kind = weights_kind(path)
        if kind is not None:
            found.append((f"step-{step}", f"Step {step}", step, path, kind == "adapter"))
    kind = weights_kind(folder)
    if kind is not None:
        final = _final_step(folder)
        label = f"Final model (step {final})" if final else "Final model"
        found.append(("final", label, final, folder, kind == "adapter"))
    return found


def trl_variants(folder: str) -> list:
    """`trl_models` as `Variant`s; no base (the caller adds it)."""
    return [Variant(*model) for model in trl_models(folder)]


def trl_base_model(folder: str) -> str | None:
    """The base model a TRL LoRA output names (adapter_config.json's base_model_name_or_path,
    of the final adapter or the newest checkpoint's), or None."""
    places = [folder] + [p for _, p in reversed(trl_checkpoint_dirs(folder))]
    for place in places:
        try:
            with open(os.path.join(place, "adapter_config.json"), encoding="utf-8") as fh:
                value = json.load(fh).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, str) and value.strip():
            return value
    return None
