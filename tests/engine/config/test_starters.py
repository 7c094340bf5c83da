"""The small-model starter (engine/config/starters.py): what it sets, the worked example in the
run's own tags, when it is suggested and the one-line hint a run on a pretrained model logs."""

from __future__ import annotations

from grpo_desktop.engine.config import (
    SMALL_MODEL_STARTER,
    TrainConfig,
    small_model_starter,
    starter_change,
    suggests_small_model_starter,
    validate,
    warnings,
)
from grpo_desktop.engine.config.starters import (
    SMALL_MODEL_EXAMPLE,
    starter_hint,
    starter_recommendation,
)
from grpo_desktop.engine.rewards.functions import format_reward
from grpo_desktop.engine.rewards.worked_example import example_warnings

GGUF = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def _real(**sections) -> TrainConfig:
    return TrainConfig().replace(model={"name_or_path": GGUF}, **sections)


def test_the_starter_sets_every_value_of_the_table_and_a_valid_config():
    cfg = small_model_starter(_real())
    for section, values in SMALL_MODEL_STARTER.items():
        for name, value in values.items():
            assert getattr(getattr(cfg, section), name) == value, (section, name)
    assert cfg.data.example_problem == SMALL_MODEL_EXAMPLE[0]
    assert cfg.data.example_answer == "<think>4 + 7 = 11</think><answer>11</answer>"
    assert validate(cfg) == []
    assert example_warnings(cfg) == []  # the example earns the format reward in full
    assert cfg.model.name_or_path == GGUF  # the rest stays
    assert (
        cfg.algorithm.importance_sampling_level == TrainConfig().algorithm.importance_sampling_level
    )


def test_the_worked_example_uses_the_runs_tags_and_earns_the_full_format_reward():
    cfg = small_model_starter(_real(rewards={"think_tag": "reasoning", "answer_tag": "final"}))
    assert cfg.data.example_answer == "<reasoning>4 + 7 = 11</reasoning><final>11</final>"
    for credit in ("all", "per_tag"):
        reward = format_reward(
            [cfg.data.example_answer], think_tag="reasoning", answer_tag="final", credit=credit
        )
        assert reward == [1.0]


def test_an_example_of_the_runs_own_is_kept():
    own = {
        "example_problem": "What is 2 × 3?",
        "example_answer": "<think>2×3</think><answer>6</answer>",
    }
    cfg = small_model_starter(_real(data=own))
    assert (cfg.data.example_problem, cfg.data.example_answer) == tuple(own.values())
    assert "data" not in starter_change(_real(data=own))


def test_suggested_for_a_small_pretrained_model_only_and_never_once_it_matches():
    cfg = _real()
    said = suggests_small_model_starter(cfg, 134_515_008)
    text = " | ".join(said)
    assert "learning rate 3e-4 with LoRA (now 1e-5)" in text
    assert "per-tag format credit (now all-or-nothing)" in text
    assert "format weight 0.5 (now 0.2)" in text
    assert "a worked example in the format" in text
    assert "max completion tokens 64 (now 128)" in text
    assert suggests_small_model_starter(small_model_starter(cfg), 134_515_008) == []
    assert suggests_small_model_starter(cfg, 7_000_000_000) == []  # not small
    assert suggests_small_model_starter(TrainConfig(), 1_600_000) == []  # the built-in demo
    assert starter_recommendation(small_model_starter(cfg), 134_515_008) == ""
    assert starter_recommendation(cfg, 134_515_008).startswith("For a small pretrained model")


def test_only_the_differences_are_named():
    cfg = _real(algorithm={"learning_rate": 3e-4, "max_completion_length": 64})
    text = " | ".join(suggests_small_model_starter(cfg, 134_515_008))
    assert "learning rate" not in text and "completion" not in text
    full = _real(lora={"enabled": False}, algorithm={"beta": 0.0, "loss_type": "dapo"})
    text = " | ".join(suggests_small_model_starter(full, 134_515_008))
    assert "(now 1e-5, full fine-tuning)" in text
    assert "KL penalty β 0.04 (now 0)" in text and "loss aggregation grpo (now dapo)" in text


def test_a_lora_run_on_a_pretrained_model_at_the_default_rate_gets_the_hint_first():
    cfg = _real(rewards={"format_weight": 1.0})
    said = warnings(cfg)
    assert said[0] == starter_hint(cfg)
    assert "Starter: small real model" in said[0] and "3e-4" in said[0]
    assert any("reward hacking" in w for w in said[1:])
    assert starter_hint(small_model_starter(cfg)) is None
    assert starter_hint(_real(lora={"enabled": False})) is None  # full fine-tuning: 1e-5 fits
    assert warnings(TrainConfig()) == []  # the demo
