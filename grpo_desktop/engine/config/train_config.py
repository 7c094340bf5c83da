"""Training configuration: nested dataclasses whose field metadata drives validation and the GUI.

Every field carries a label, help text written for a hobbyist, and bounds or choices. The
hyperparameter form and its tooltips are generated from this metadata, and `validate()` turns
bad values into messages that say what is wrong and how to fix it. `load_config` and
`read_settings_file` read a settings file with messages of the same kind.

Deliberately torch-free (enforced by import-linter) so the GUI and session layer start fast.

Try it:  python -c "from grpo_desktop.engine.config import preset; print(preset('dapo').to_json())"
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from grpo_desktop.engine.config.alerts import AlertsConfig, validate_alerts
from grpo_desktop.engine.config.model import (
    DataConfig,
    LoraConfig,
    ModelConfig,
    QuantizationConfig,
    option,
)
from grpo_desktop.engine.config.starters import starter_hint
from grpo_desktop.engine.config.training import AlgorithmConfig, RewardsConfig, RunConfig
from grpo_desktop.engine.errors import ConfigError, UserError, read_utf8

MAX_ANSWER_PREFIX = 200  # characters: a prefill is a tag or a few words
MAX_SETTINGS_FILE_BYTES = 8 * 2**20  # a config.json is a few KB; a larger one is not read

__all__ = [
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
    "load_config",
    "option",
    "read_settings_file",
    "preset",
    "validate",
    "warnings",
]

SCHEMA_VERSION = 1

SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "lora": LoraConfig,
    "quantization": QuantizationConfig,
    "data": DataConfig,
    "rewards": RewardsConfig,
    "algorithm": AlgorithmConfig,
    "run": RunConfig,
    "alerts": AlertsConfig,
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
    alerts: AlertsConfig = field(default_factory=AlertsConfig)

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
        if not text.strip():
            raise ConfigError("The settings are empty: there is no JSON object to read.")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"The config is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})."
            ) from exc
        except RecursionError:  # thousands of nested brackets: a file built to hurt
            raise ConfigError(
                "The config's brackets nest too deeply to read: it is not a settings file."
            ) from None
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
    generated = d.source in ("arithmetic", "task")
    if d.source == "task" and not d.task.strip():
        msgs.append(
            "Data source 'task' needs a reasoning-gym task name (data.task): choose one in the "
            "Dataset panel."
        )
    if not isinstance(d.task_options, dict) or not all(isinstance(k, str) for k in d.task_options):
        msgs.append("Task settings (data.task_options) must be an object of name: value pairs.")
    if not generated and not d.path.strip():
        msgs.append(f"Data source '{d.source}' needs a path or dataset id in data.path.")
    if not generated and (not d.prompt_column.strip() or not d.answer_column.strip()):
        msgs.append("Name the prompt column and the answer column of your dataset.")
    if bool(d.example_problem.strip()) != bool(d.example_answer.strip()):
        given, missing = (
            ("problem", "answer") if d.example_problem.strip() else ("answer", "problem")
        )
        msgs.append(
            f"The worked example has its {given} but no {missing}: fill in its {missing} too "
            "(Dataset panel, Worked example), or clear both fields for no example."
        )
    if len(d.answer_prefix) > MAX_ANSWER_PREFIX:
        msgs.append(
            f"'Answer starts with' (data.answer_prefix) is {len(d.answer_prefix):,} characters: "
            f"keep it to a few words (at most {MAX_ANSWER_PREFIX}), such as <{r.think_tag}>. It "
            "starts every answer; instructions belong in the system prompt."
        )
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
    if a.min_completion_length > a.max_completion_length:
        msgs.append(
            "Min completion tokens is above max completion tokens; lower it (0 = no minimum)."
        )
    if a.epsilon_high is not None and a.epsilon_high < a.epsilon_low:
        msgs.append(
            "Clip ε high is below ε low; it is usually equal (GRPO) or larger (DAPO, 0.28)."
        )
    msgs.extend(validate_alerts(cfg.alerts))
    return msgs


def warnings(cfg: TrainConfig) -> list[str]:
    """Valid but risky settings, explained: the traps a first GRPO run falls into."""
    hint = starter_hint(cfg)  # first: the window shows the last warning on top
    out = [hint] if hint else []
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


def read_settings_file(
    path: str,
    error: type[UserError],
    *,
    missing: str,
    what: str,
    damaged: str,
    empty: str | None = None,
) -> TrainConfig:
    """The settings in the UTF-8 JSON file at `path`, or `error` with a message for each way
    reading it fails: `missing` (no such file), "Cannot read {what}: <the OS's reason>.", the
    file is not UTF-8 (named by read_utf8), `empty` when given (else an empty file is damaged),
    and "{damaged}: <what is wrong>" for anything that is not valid settings JSON. A file over
    MAX_SETTINGS_FILE_BYTES is not read at all (settings are a few KB)."""
    try:
        size = os.stat(path).st_size
        if size > MAX_SETTINGS_FILE_BYTES:
            raise error(
                f"{damaged} is {size / 2**20:.1f} MB, far more than settings take (a few KB; at "
                f"most {MAX_SETTINGS_FILE_BYTES // 2**20} MB is read). It is not a settings file, "
                "or something filled it: nothing was read."
            )
        text = read_utf8(path, error)
    except FileNotFoundError:
        raise error(missing) from None
    except OSError as exc:
        raise error(f"Cannot read {what}: {exc.strerror}.") from None
    if empty is not None and not text.strip():
        raise error(empty)
    try:
        return TrainConfig.from_json(text)
    except (ConfigError, TypeError, ValueError) as exc:
        raise error(f"{damaged}: {exc}") from None


def load_config(path: str) -> TrainConfig:
    """Read a config JSON file; errors name the file and the problem."""
    return read_settings_file(
        path,
        ConfigError,
        missing=(
            f"Config file not found: {path}. Create one with `grpo-desktop config --demo > {path}`."
        ),
        what=f"config file {path}",
        empty=(
            f"Config file {path} is empty: it holds no settings. Write the demo's settings into it "
            f"with `grpo-desktop config --demo > {path}` and edit them, or export them from the app."
        ),
        damaged=path,
    )
