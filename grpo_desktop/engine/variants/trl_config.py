"""The settings Try and Compare use for a TRL output_dir: a `TrainConfig` built for it, with notes.

A TRL output has no GRPO Desktop config.json (a full fine-tuning output's config.json is the
model's own), so `trl_run_config(folder, session)` builds one from the exported project's settings
when they are found (`exported_settings`), else from the session's, with the base model and LoRA
settings read off the output itself; a note says wherever it had to fall back.

Torch-free (run in the GUI thread). Does not load models (variants/run_variants.py does) or read
TRL's metrics (session/trl_run.py does).
Try it:  python -c "from grpo_desktop.engine.variants.trl_config import exported_settings as e; \\
print(e('output'))"
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from grpo_desktop.engine.config import ConfigError, TrainConfig
from grpo_desktop.engine.variants.trl_models import trl_base_model, trl_models

SETTINGS_FILE = "settings.json"
EXPORT_FORMAT = "grpo-desktop-trl-project"


@dataclass(frozen=True)
class TrlRunConfig:
    config: TrainConfig
    notes: list[str] = field(default_factory=list)  # what was assumed, for the user
    settings_path: str | None = None  # the exported project's settings.json, when used


def exported_settings(folder: str) -> str | None:
    """The settings.json of the GRPO Desktop TRL export that wrote into `folder`: in it or in
    the folder above it (the project, for `--output_dir output`); None when there is none."""
    for place in (folder, os.path.dirname(os.path.abspath(folder))):
        path = os.path.join(place, SETTINGS_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        ours = isinstance(doc, dict) and doc.get("format") == EXPORT_FORMAT
        if ours and isinstance(doc.get("app_settings"), dict):
            return path
    return None


def _read_settings(path: str) -> TrainConfig:
    with open(path, encoding="utf-8") as fh:
        return TrainConfig.from_dict(json.load(fh)["app_settings"])


def _adapter_lora(folder: str) -> dict:
    """The LoRA settings of the output's newest adapter (rank, alpha, target modules)."""
    adapters = [path for _, _, _, path, is_adapter in trl_models(folder) if is_adapter]
    try:
        with open(os.path.join(adapters[-1], "adapter_config.json"), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, IndexError):
        return {}
    out: dict = {}
    if isinstance(doc.get("r"), int) and doc["r"] >= 1:
        out["r"] = doc["r"]
    if isinstance(doc.get("lora_alpha"), (int, float)):
        out["alpha"] = float(doc["lora_alpha"])
    targets = doc.get("target_modules")
    if isinstance(targets, list) and all(isinstance(t, str) for t in targets) and targets:
        out["target_modules"] = ",".join(sorted(targets))
    elif isinstance(targets, str) and targets.strip():
        out["target_modules"] = targets
    return out


def _missing_path(name: str) -> bool:
    """A base named by a local path (not a hub id) that is not on this machine."""
    looks_local = os.path.isabs(name) or name.startswith(("~", "./", "../", ".\\"))
    return looks_local and not os.path.isdir(os.path.expanduser(name))


def trl_run_config(folder: str, session: TrainConfig) -> TrlRunConfig:
    """The config Try and Compare load and score `folder`'s models with.

    - prompts, data and rewards: the app's settings of the exported project that trained it,
      when found (`exported_settings`: the `settings.json` export/trl_project.py writes, with the
      app's settings under "app_settings", in the output_dir or the folder above it, where
      `python train.py --output_dir output` puts it); else `session`'s, and a note says so;
    - the base model: a LoRA output's adapter_config names it (`trl_base_model`); a full
      fine-tuning output records none, so it is the exported settings' model or `session`'s,
      said in a note; a named base that is a path not on this machine falls back the same way;
    - LoRA on when the output's models are adapters (their rank, alpha and target modules), off
      for whole models."""
    notes: list[str] = []
    settings = exported_settings(folder)
    cfg = session
    if settings is not None:
        try:
            cfg = _read_settings(settings)
        except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
            notes.append(
                f"{settings} cannot be read ({exc}), so prompts and scoring use this window's "
                "data and reward settings."
            )
            settings = None
    else:
        notes.append(
            "No settings.json of a GRPO Desktop TRL export beside this run, so prompts and "
            "scoring use this window's data and reward settings."
        )
    where = "the exported settings'" if settings else "this window's"
    own_model = cfg.model.name_or_path
    models = trl_models(folder)
    adapters = [m for m in models if m[4]]
    if not models:
        notes.append(
            "This TRL run has saved no model yet (checkpoint-N/ with weights, or the final "
            f"model), so only the base model answers: {where} model, {own_model}."
        )
        return TrlRunConfig(cfg.replace(lora={"enabled": False}), notes, settings)
    if adapters:
        base = trl_base_model(folder)
        if base and _missing_path(base):
            notes.append(
                f"The adapters name the base model {base}, which is not on this machine: "
                f"{where} model, {own_model}, is loaded as the base instead."
            )
        elif base:
            cfg = cfg.replace(model={"name_or_path": base})
        else:
            notes.append(
                f"The adapters do not name their base model: {where} model, {own_model}, is "
                "loaded as the base."
            )
        cfg = cfg.replace(lora={"enabled": True, **_adapter_lora(folder)})
    else:
        notes.append(
            "TRL records no base model for a full fine-tuning run: the base shown is "
            f"{where} model, {own_model}."
        )
        cfg = cfg.replace(lora={"enabled": False})
    return TrlRunConfig(cfg, notes, settings)
