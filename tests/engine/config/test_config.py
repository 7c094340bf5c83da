"""Config: JSON round trip, presets, validation messages a hobbyist can act on, GUI metadata."""

from __future__ import annotations

import dataclasses
import json

import pytest

from grpo_desktop.engine.config import (
    PRESETS,
    SECTIONS,
    ConfigError,
    TrainConfig,
    load_config,
    preset,
    validate,
    warnings,
)


def test_defaults_are_valid_and_round_trip_exactly():
    cfg = TrainConfig()
    assert validate(cfg) == []
    text = cfg.to_json()
    assert TrainConfig.from_json(text) == cfg
    assert json.loads(text)["schema_version"] == 1


def test_round_trip_keeps_every_changed_value():
    cfg = TrainConfig().replace(
        algorithm={"beta": 0.0, "epsilon_high": 0.28, "loss_type": "dapo"},
        rewards={"custom_checker": "def check(c, a, p):\n    return 1.0\n"},
        run={"seed": 7},
    )
    back = TrainConfig.from_json(cfg.to_json())
    assert back.algorithm.epsilon_high == 0.28
    assert back.rewards.custom_checker.endswith("return 1.0\n")
    assert back == cfg


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_valid(name):
    assert validate(preset(name)) == []


def test_preset_values_match_the_papers():
    g = preset("grpo").algorithm
    assert (g.loss_type, g.scale_rewards, g.beta) == ("grpo", "group", 0.04)
    d = preset("dr_grpo").algorithm
    assert (d.loss_type, d.scale_rewards) == ("dr_grpo", "none")
    dapo = preset("dapo").algorithm
    assert (dapo.loss_type, dapo.epsilon_high, dapo.dynamic_sampling, dapo.beta) == (
        "dapo",
        0.28,
        True,
        0.0,
    )
    assert preset("gspo").algorithm.importance_sampling_level == "sequence"


def test_preset_keeps_the_rest_of_the_config():
    base = TrainConfig().replace(run={"max_steps": 7})
    assert preset("dapo", base).run.max_steps == 7


def test_validate_explains_group_size_and_bounds():
    cfg = TrainConfig().replace(algorithm={"num_generations": 1, "temperature": -1.0})
    msgs = validate(cfg)
    assert any("Group size G" in m and "at least 2" in m for m in msgs)
    assert any("Temperature" in m and "at least" in m for m in msgs)


def test_validate_catches_wrong_types_and_choices():
    cfg = TrainConfig().replace(algorithm={"loss_type": "ppo", "prompts_per_step": "four"})
    msgs = validate(cfg)
    assert any("ppo" in m and "grpo, bnpo, dr_grpo, dapo" in m for m in msgs)
    assert any("whole number" in m for m in msgs)


def test_answer_checker_is_strict_by_default_and_round_trips():
    assert TrainConfig().rewards.answer_checker == "strict"
    lenient = TrainConfig().replace(rewards={"answer_checker": "lenient"})
    assert validate(lenient) == []
    assert TrainConfig.from_json(lenient.to_json()).rewards.answer_checker == "lenient"
    msgs = validate(TrainConfig().replace(rewards={"answer_checker": "sloppy"}))
    assert any("'sloppy'" in m and "strict, lenient" in m for m in msgs)


def test_validate_cross_field_rules():
    assert any(
        "needs LoRA" in m
        for m in validate(
            TrainConfig().replace(quantization={"mode": "4bit"}, lora={"enabled": False})
        )
    )
    assert any(
        "needs a path" in m for m in validate(TrainConfig().replace(data={"source": "file"}))
    )
    zero = TrainConfig().replace(rewards={"accuracy_weight": 0.0, "format_weight": 0.0})
    assert any("nothing is learned" in m for m in validate(zero))


def test_micro_batch_auto_is_the_default_documented_and_round_trips():
    cfg = TrainConfig()
    assert cfg.algorithm.micro_batch_size == 0  # 0 = auto
    field = {f.name: f for f in dataclasses.fields(SECTIONS["algorithm"])}["micro_batch_size"]
    assert "0 = auto" in field.metadata["help"] and "0 = auto" in field.metadata["label"]
    for value in (0, 1, 8, 4096):
        changed = cfg.replace(algorithm={"micro_batch_size": value})
        assert validate(changed) == []
        assert TrainConfig.from_json(changed.to_json()).algorithm.micro_batch_size == value
    negative = validate(cfg.replace(algorithm={"micro_batch_size": -1}))
    assert negative == [
        "Micro-batch size (0 = auto) (algorithm.micro_batch_size) is -1; it must be at least 0."
    ]
    word = validate(cfg.replace(algorithm={"micro_batch_size": "auto"}))
    assert word == [
        "Micro-batch size (0 = auto) (algorithm.micro_batch_size) must be a whole number, got "
        "'auto'."
    ]


def test_format_weight_at_accuracy_weight_warns_of_reward_hacking():
    cfg = TrainConfig().replace(rewards={"accuracy_weight": 1.0, "format_weight": 1.0})
    assert any("reward hacking" in w for w in warnings(cfg))
    assert warnings(TrainConfig()) == []


def test_unknown_fields_and_sections_are_named():
    with pytest.raises(ConfigError, match="algorithm.betta"):
        TrainConfig.from_dict({"algorithm": {"betta": 0.1}})
    with pytest.raises(ConfigError, match="algo"):
        TrainConfig.from_dict({"algo": {}})


def test_newer_schema_is_refused():
    with pytest.raises(ConfigError, match="newer"):
        TrainConfig.from_dict({"schema_version": 99})


def test_load_config_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="line 1"):
        load_config(str(bad))


def test_every_field_has_label_help_and_bounds_or_choices():
    for name, section in SECTIONS.items():
        for f in dataclasses.fields(section):
            meta = f.metadata
            assert meta.get("label") and len(meta.get("help", "")) > 20, f"{name}.{f.name}"
            if f.type in ("int", "float") or f.type.startswith("float"):
                assert "min" in meta and "max" in meta, f"{name}.{f.name} lacks bounds"
