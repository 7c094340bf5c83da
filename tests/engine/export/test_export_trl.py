"""The TRL export (engine/export/trl_project.py, export_trl_map.py): every mapped setting reaches the
GRPOConfig (or peft, bitsandbytes, data, reward settings) that the exported train.py builds from
the exported settings.json, the command line overrides it, B·G splits over any number of
processes, the README lists what TRL cannot do, the versions are pinned, the CLI exports.
Prompts, rewards and real runs of the exported project: test_export_trl_project.py.

The GRPOConfigs are built in this process by the exported train.py's own functions (loaded from
the exported folder)."""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata

import pytest

from grpo_desktop.engine.export.trl_map import MAPPED, UNMAPPED, batch_layout
from grpo_desktop.engine.export.trl_project import (
    ACCELERATE_CONFIGS,
    TESTED_VERSIONS,
    requirements,
    write_trl_project,
)
from tests.support.paths import ROOT
from tests.support.trl_export import BASE, export_settings, grpo, make_project, run

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory)


# ---------------------------------------------------------------- each mapped setting


def _layout(config) -> tuple[int, int]:
    return config.per_device_train_batch_size, config.gradient_accumulation_steps


# (setting, new value, what to read from (GRPOConfig, settings, train module), expected value)
CASES = [
    ("algorithm.loss_type", "dapo", lambda c, s, t: c.loss_type, "dapo"),
    ("algorithm.beta", 0.0, lambda c, s, t: c.beta, 0.0),
    ("algorithm.epsilon_low", 0.1, lambda c, s, t: c.epsilon, 0.1),
    ("algorithm.epsilon_high", 0.28, lambda c, s, t: c.epsilon_high, 0.28),
    ("algorithm.scale_rewards", "batch", lambda c, s, t: c.scale_rewards, "batch"),
    ("algorithm.num_generations", 4, lambda c, s, t: (c.num_generations, _layout(c)), (4, (4, 2))),
    # B = 3, G = 2: 6 completions a step; micro-batch auto = up to G = 2 -> 2 x 3 accumulations
    ("algorithm.prompts_per_step", 3, lambda c, s, t: _layout(c), (2, 3)),
    ("algorithm.micro_batch_size", 1, lambda c, s, t: _layout(c), (1, 4)),
    ("algorithm.max_completion_length", 32, lambda c, s, t: c.max_completion_length, 32),
    (
        "algorithm.min_completion_length",
        4,
        lambda c, s, t: c.generation_kwargs,
        {"min_new_tokens": 4},
    ),
    ("algorithm.temperature", 0.7, lambda c, s, t: c.temperature, 0.7),
    ("algorithm.top_p", 0.9, lambda c, s, t: c.top_p, 0.9),
    ("algorithm.learning_rate", 3e-5, lambda c, s, t: c.learning_rate, 3e-5),
    ("algorithm.lr_scheduler", "cosine", lambda c, s, t: str(c.lr_scheduler_type.value), "cosine"),
    ("algorithm.warmup_steps", 5, lambda c, s, t: c.warmup_steps, 5),
    ("algorithm.weight_decay", 0.1, lambda c, s, t: c.weight_decay, 0.1),
    ("algorithm.max_grad_norm", 0.5, lambda c, s, t: c.max_grad_norm, 0.5),
    (
        "algorithm.importance_sampling_level",
        "sequence",
        lambda c, s, t: c.importance_sampling_level,
        "sequence",
    ),
    (
        "algorithm.mask_truncated_completions",
        True,
        lambda c, s, t: c.mask_truncated_completions,
        True,
    ),
    # two updates per batch: TRL counts each update as a step
    ("algorithm.num_iterations", 2, lambda c, s, t: (c.num_iterations, c.max_steps), (2, 6)),
    ("run.max_steps", 7, lambda c, s, t: c.max_steps, 7),
    ("run.seed", 3, lambda c, s, t: c.seed, 3),
    (
        "run.checkpoint_every",
        5,
        lambda c, s, t: (c.save_strategy.value, c.save_steps),
        ("steps", 5),
    ),
    ("run.keep_checkpoints", 3, lambda c, s, t: c.save_total_limit, 3),
    (
        "model.gradient_checkpointing",
        True,
        lambda c, s, t: (c.activation_checkpointing, c.gradient_checkpointing),
        (True, True),
    ),
    ("model.trust_remote_code", True, lambda c, s, t: c.trust_remote_code, True),
    (
        "model.name_or_path",
        "/models/mine",
        lambda c, s, t: t.model_path(s["runtime"]["model"]),
        "/models/mine",
    ),
    (
        "model.dtype",
        "bfloat16",
        lambda c, s, t: (c.model_init_kwargs["dtype"], c.bf16, c.fp16),
        ("bfloat16", True, False),
    ),
    # full fine-tuning in bfloat16 keeps float32 master weights (the weights load in float32)
    (
        "lora.enabled (bfloat16)",
        False,
        lambda c, s, t: (c.model_init_kwargs["dtype"], c.bf16),
        ("float32", True),
    ),
    ("model.device", "cpu", lambda c, s, t: (s["runtime"]["device"], c.use_cpu), ("cpu", True)),
    ("lora.enabled", False, lambda c, s, t: t.build_peft_config(s), None),
    ("lora.r", 8, lambda c, s, t: t.build_peft_config(s).r, 8),
    ("lora.alpha", 12.0, lambda c, s, t: t.build_peft_config(s).lora_alpha, 12.0),
    ("lora.dropout", 0.05, lambda c, s, t: t.build_peft_config(s).lora_dropout, 0.05),
    (
        "lora.target_modules",
        "q_proj, v_proj",
        lambda c, s, t: sorted(t.build_peft_config(s).target_modules),
        ["q_proj", "v_proj"],
    ),
    (
        "quantization.mode",
        "4bit",
        lambda c, s, t: (lambda q: q and (q.load_in_4bit, q.bnb_4bit_quant_type))(
            t.build_quantization_config(s, "float32")
        ),
        (True, "nf4"),
    ),
    (
        "quantization.double_quant",
        False,
        lambda c, s, t: s["quantization"]["bnb_4bit_use_double_quant"],
        False,
    ),
    ("data.source", "file", lambda c, s, t: s["data"]["source"], "file"),
    ("data.prompt_column", "problem", lambda c, s, t: s["data"]["prompt_column"], "problem"),
    ("data.answer_column", "solution", lambda c, s, t: s["data"]["answer_column"], "solution"),
    ("data.system_prompt", "Be brief.", lambda c, s, t: s["data"]["system_prompt"], "Be brief."),
    ("data.answer_prefix", "<think>", lambda c, s, t: s["data"]["answer_prefix"], "<think>"),
    ("rewards.accuracy_weight", 2.0, lambda c, s, t: c.reward_weights, [2.0, 0.2]),
    (
        "rewards.format_weight",
        0.0,
        lambda c, s, t: (c.reward_weights, s["rewards"]["functions"]),
        ([1.0], ["accuracy"]),
    ),
    ("rewards.custom_weight", 0.5, lambda c, s, t: c.reward_weights, [1.0, 0.2, 0.5]),
    (
        "rewards.custom_checker",
        "def check(c, a, p):\n    return 1.0\n",
        lambda c, s, t: (s["rewards"]["functions"], s["rewards"]["custom_checker"]),
        (["accuracy", "format", "custom"], "custom_checker.py"),
    ),
]
# Settings that only make sense together with another change.
EXTRA = {
    "rewards.custom_weight": {
        "rewards": {"custom_checker": "def check(c, a, p):\n    return 1.0\n"}
    },
    "quantization.double_quant": {"quantization": {"mode": "4bit"}},
    "data.source": {"data": {"path": "FILE"}},
    "data.prompt_column": {"data": {"source": "file", "path": "FILE"}},
    "data.answer_column": {"data": {"source": "file", "path": "FILE"}},
    "lora.enabled (bfloat16)": {"model": {"dtype": "bfloat16"}},
}


def test_every_mapped_setting_has_a_case():
    assert {m.setting for m in MAPPED} == {case[0].split(" ")[0] for case in CASES}


@pytest.mark.parametrize("setting,value,read,expected", CASES, ids=[c[0] for c in CASES])
def test_a_changed_setting_changes_its_trl_field(project, tmp_path, setting, value, read, expected):
    _, train = project
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps(
                {
                    "problem": f"{i} + 1?",
                    "solution": f"#### {i + 1}",
                    "question": f"q{i}",
                    "answer": "1",
                }
            )
            + "\n"
            for i in range(12)
        )
    )
    # A hub id, so the exports copy no model; what else the setting needs (EXTRA) in both.
    before = BASE.replace(model={"name_or_path": "some-org/some-model"})
    for section, values in EXTRA.get(setting, {}).items():
        before = before.replace(
            **{section: {k: str(rows) if v == "FILE" else v for k, v in values.items()}}
        )
    section, name = setting.split(" ")[0].split(".")
    after = before.replace(**{section: {name: value}})
    assert after.validate() == []
    old = export_settings(tmp_path / "before", before)
    new = export_settings(tmp_path / "after", after)
    got_old = read(grpo(train, old), old, train)
    got_new = read(grpo(train, new), new, train)
    assert got_new == expected
    assert got_old != expected  # the change is what made the difference


def test_min_completion_length_is_min_tokens_with_vllm(project, tmp_path):
    _, train = project
    settings = export_settings(tmp_path, BASE.replace(algorithm={"min_completion_length": 4}))
    config = grpo(train, settings, {"use_vllm": True, "vllm_mode": "colocate"})
    assert config.generation_kwargs == {"min_tokens": 4}
    assert config.use_vllm and config.vllm_mode == "colocate"


def test_fixed_fields_keep_the_app_behaviour(project):
    folder, train = project
    config = grpo(train, train.load_settings())
    assert config.use_bias_correction_kl is False  # the app's plain k3 KL
    assert config.logging_steps == 1 and config.log_completions is True
    assert str(config.lr_scheduler_type.value) == "constant_with_warmup"
    assert config.remove_unused_columns is False
    assert config.activation_checkpointing is False  # TRL's default would be True
    assert _layout(config) == (2, 2)  # B·G = 4, micro-batch up to G = 2


# ---------------------------------------------------------------- command line, batch layout


def test_command_line_overrides_win_even_at_trl_defaults(project):
    _, train = project
    args, overrides = train.parse_args(
        ["--max_steps", "2", "--output_dir", "out", "--beta", "0.0", "--model", "m"]
    )
    assert overrides == {"max_steps": 2, "output_dir": "out", "beta": 0.0}
    assert args.model == "m"
    config = train.build_grpo_config(train.load_settings(), overrides, 1)
    # beta 0.0 is TRL's default, but the settings say 0.04: the command line still wins
    assert (config.max_steps, config.output_dir, config.beta) == (2, "out", 0.0)


def test_an_unknown_flag_is_refused(project, capsys):
    _, train = project
    with pytest.raises(SystemExit):
        train.parse_args(["--max_stepz", "2"])
    assert "--max_stepz" in capsys.readouterr().err


def test_batch_layout_keeps_b_times_g_on_any_number_of_processes():
    # 4 prompts x 8 = 32 completions: one process accumulates 4 micro-batches of G = 8;
    # 8 GPUs take 4 each in one pass; 32 GPUs one each.
    assert batch_layout(32, 1, group=8) == (8, 4)
    assert batch_layout(32, 8, group=8) == (4, 1)
    assert batch_layout(32, 32, group=8) == (1, 1)
    assert batch_layout(32, 2, micro=4, group=8) == (4, 4)
    assert batch_layout(32, 2, per_device=16) == (16, 1)
    with pytest.raises(ValueError, match="do not split evenly over 3 processes"):
        batch_layout(32, 3)
    with pytest.raises(ValueError, match="pick a divisor of 16"):
        batch_layout(32, 2, per_device=5)


def test_a_world_that_does_not_divide_b_times_g_stops_with_a_message(project):
    _, train = project
    with pytest.raises(SystemExit, match="do not split evenly over 3 processes"):
        train.build_grpo_config(train.load_settings(), {"output_dir": "o"}, 3)


# ---------------------------------------------------------------- files


def test_the_project_holds_everything_to_run_it(project):
    folder, _ = project
    for name in ("train.py", "settings.json", "requirements.txt", "README.md", "slurm.sbatch"):
        assert (folder / name).is_file(), name
    for name in ACCELERATE_CONFIGS:
        text = (folder / "accelerate" / name).read_text()
        assert "mixed_precision: bf16" in text and "@MIXED_PRECISION@" not in text
    assert (folder / "model" / "config.json").is_file()  # builtin:demo copied in
    settings = json.loads((folder / "settings.json").read_text())
    assert settings["runtime"]["model"] == "model"
    assert settings["app_settings"] == BASE.to_dict()


def test_readme_lists_the_unmapped_settings_and_the_launches(project):
    folder, _ = project
    readme = (folder / "README.md").read_text()
    assert not [tag for tag in ("@BG@", "@MAPPED@", "@UNMAPPED@", "@LAYOUTS@") if tag in readme]
    unmapped = readme.split("## Settings TRL has no equivalent for", 1)[1]
    for u in UNMAPPED:
        assert f"`{u.setting}`" in unmapped, u.setting
    for m in MAPPED:
        assert f"`{m.setting}`" in readme, m.setting
    assert "accelerate launch --multi_gpu --num_processes 2 train.py --max_steps 2" in readme
    assert "`accelerate launch --cpu --num_processes 2 ...` starts only one process" in readme
    assert "sbatch slurm.sbatch" in readme and "--machine_rank" in readme
    assert "--use_vllm true --vllm_mode colocate" in readme and "--vllm_mode server" in readme
    # B·G = 4: 2 processes take 2 each in one pass; 8 processes cannot split 4
    assert "| 2 | 2 | 1 |" in readme and "| 8 | - | - (does not divide 4) |" in readme


def test_ci_installs_the_versions_the_project_pins():
    """.ci/constraints.txt (what CI and the README's test command install) names exactly the
    versions the exported project pins, so the check below runs on them."""
    path = os.path.join(ROOT, ".ci", "constraints.txt")
    with open(path, encoding="utf-8") as fh:
        lines = [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]
    assert dict(ln.split("==") for ln in lines) == TESTED_VERSIONS


def test_requirements_pin_the_installed_tested_versions():
    assert {name: metadata.version(name) for name in TESTED_VERSIONS} == TESTED_VERSIONS
    text = requirements()
    assert "grpo-desktop==0.1.0" in text and "trl==1.16.0" in text and "torch>=" in text


def test_export_imports_no_torch(tmp_path):
    code = (
        "import sys\n"
        "from grpo_desktop.engine.export.trl_project import write_trl_project\n"
        "from grpo_desktop.engine.config import TrainConfig\n"
        f"write_trl_project(TrainConfig(), {str(tmp_path)!r})\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))\n"
    )
    out = run([sys.executable, "-c", code], tmp_path, 120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_invalid_settings_are_not_exported(tmp_path):
    from grpo_desktop.engine.errors import ConfigError

    with pytest.raises(ConfigError, match="Group size G .* must be at least 2"):
        write_trl_project(BASE.replace(algorithm={"num_generations": 1}), str(tmp_path))


def test_cli_exports_a_settings_file_as_a_trl_project(tmp_path):
    config = tmp_path / "settings.json"
    config.write_text(BASE.replace(algorithm={"beta": 0.0}).to_json())
    out = tmp_path / "trl-project"
    cmd = [sys.executable, "-m", "grpo_desktop", "export", str(config), "--format", "trl"]
    result = run([*cmd, "--out", str(out)], tmp_path, 120)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["format"] == "trl" and summary["train_rows"] == 24
    assert "algorithm.std_type" in summary["unmapped"]
    settings = json.loads((out / "settings.json").read_text())
    assert settings["grpo_config"]["beta"] == 0.0
    assert {"train.py", "README.md", "requirements.txt"} <= set(os.listdir(out))
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]  # no temp left
