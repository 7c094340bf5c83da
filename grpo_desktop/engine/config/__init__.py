"""Run settings: nested dataclasses whose metadata drives validation, the GUI form and the CLI.

`grpo_desktop.engine.config` keeps the names it always had (`TrainConfig`, `validate`, `preset`,
`load_config`, the sections): they live in `train_config.py` (the whole config, presets, loading),
`model.py` (model, LoRA, quantization, data), `training.py` (rewards, algorithm, run), `alerts.py`
(health alarm thresholds), `demo.py` (the built-in demo's settings) and `starters.py` (the starter
for a small pretrained model). Torch-free.

Try it:  python -c "from grpo_desktop.engine.config import preset; print(preset('dapo').to_json())"
"""

from __future__ import annotations

from grpo_desktop.engine.config.starters import (
    SMALL_MODEL_STARTER,
    STARTER_LABEL,
    small_model_starter,
    starter_change,
    starter_summary,
    suggests_small_model_starter,
)
from grpo_desktop.engine.config.train_config import (
    PRESET_LABELS,
    PRESETS,
    SCHEMA_VERSION,
    SECTIONS,
    AlertsConfig,
    AlgorithmConfig,
    ConfigError,
    DataConfig,
    LoraConfig,
    ModelConfig,
    QuantizationConfig,
    RewardsConfig,
    RunConfig,
    TrainConfig,
    iter_fields,
    load_config,
    option,
    preset,
    read_settings_file,
    validate,
    warnings,
)

__all__ = [
    "PRESETS",
    "PRESET_LABELS",
    "SCHEMA_VERSION",
    "SECTIONS",
    "SMALL_MODEL_STARTER",
    "STARTER_LABEL",
    "AlertsConfig",
    "AlgorithmConfig",
    "ConfigError",
    "DataConfig",
    "LoraConfig",
    "ModelConfig",
    "QuantizationConfig",
    "RewardsConfig",
    "RunConfig",
    "TrainConfig",
    "iter_fields",
    "load_config",
    "option",
    "preset",
    "read_settings_file",
    "small_model_starter",
    "starter_change",
    "starter_summary",
    "suggests_small_model_starter",
    "validate",
    "warnings",
]
