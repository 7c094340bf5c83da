"""The config Try and Compare use for a TRL output_dir (engine/variants/trl_config.py), on real folders.

An output of a project written by the real TRL export (engine/export_trl.write_trl_project, its
settings.json one folder up, as `python train.py --output_dir output` leaves it) is tried with
the exported app settings and the base its adapters name; an output with no export beside it
uses the session's data and rewards, and says so; a full fine-tuning output (no base recorded)
and an adapter naming a base not on this machine use the session's model, and say so. The
adapters and weights are laid out as TRL saves them (file names only: nothing is loaded here;
tests/engine/variants/test_trl_variants.py loads real ones).
"""

from __future__ import annotations

import json
import os

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.export.trl_project import write_trl_project
from grpo_desktop.engine.variants.trl_config import exported_settings, trl_run_config
from grpo_desktop.engine.variants.try_model import run_config


def _adapter(folder: str, base: str, r: int = 4) -> None:
    os.makedirs(folder, exist_ok=True)
    doc = {"base_model_name_or_path": base, "r": r, "lora_alpha": 8,
           "target_modules": ["v_proj", "q_proj"], "peft_type": "LORA"}  # fmt: skip
    with open(os.path.join(folder, "adapter_config.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    with open(os.path.join(folder, "adapter_model.safetensors"), "wb") as fh:
        fh.write(b"weights")


def _full(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
        json.dump({"model_type": "llama"}, fh)  # the model's own config.json, not the app's
    with open(os.path.join(folder, "model.safetensors"), "wb") as fh:
        fh.write(b"weights")


def _state(folder: str, step: int) -> None:
    with open(os.path.join(folder, "trainer_state.json"), "w", encoding="utf-8") as fh:
        json.dump({"global_step": step, "log_history": []}, fh)


def test_an_exported_projects_output_uses_its_settings_and_its_adapters_base(tmp_path):
    project = str(tmp_path / "project")
    exported = demo_config().replace(
        data={"system_prompt": "Answer in <answer> tags."}, rewards={"format_weight": 0.7}
    )
    write_trl_project(exported, project)
    out = os.path.join(project, "output")
    base = os.path.join(project, "model")  # where train.py's model_path puts builtin:demo
    _adapter(os.path.join(out, "checkpoint-1"), base, r=4)
    _adapter(out, base, r=4)
    _state(out, 1)
    session = demo_config().replace(data={"system_prompt": "mine"}, rewards={"format_weight": 0})
    assert exported_settings(out) == os.path.join(project, "settings.json")
    got = trl_run_config(out, session)
    cfg = got.config
    assert got.settings_path == os.path.join(project, "settings.json") and got.notes == []
    assert cfg.data.system_prompt == "Answer in <answer> tags."
    assert cfg.rewards.format_weight == 0.7
    assert cfg.model.name_or_path == base
    assert cfg.lora.enabled and cfg.lora.r == 4 and cfg.lora.alpha == 8.0
    assert cfg.lora.target_modules == "q_proj,v_proj"
    # What the Try job loads with: the same config, as the run's own (its variants listed).
    assert run_config(out, session) == (cfg, True)


def test_an_output_without_an_export_uses_the_sessions_data_and_says_so(tmp_path):
    out = str(tmp_path / "out")
    _adapter(os.path.join(out, "checkpoint-2"), str(tmp_path))  # a base that exists here
    session = demo_config().replace(data={"system_prompt": "mine"})
    got = trl_run_config(out, session)
    assert got.settings_path is None and exported_settings(out) is None
    assert got.config.data.system_prompt == "mine"
    assert got.config.model.name_or_path == str(tmp_path) and got.config.lora.enabled
    assert len(got.notes) == 1 and "this window's data and reward settings" in got.notes[0]


def test_a_full_fine_tuning_output_uses_the_sessions_model_and_says_so(tmp_path):
    out = str(tmp_path / "out")
    _full(os.path.join(out, "checkpoint-1"))
    _full(out)  # the final model: its config.json is the model's, not a GRPO Desktop config
    _state(out, 1)
    session = demo_config().replace(model={"name_or_path": "builtin:demo"})
    got = trl_run_config(out, session)
    assert not got.config.lora.enabled and got.config.model.name_or_path == "builtin:demo"
    assert any("TRL records no base model" in n and "builtin:demo" in n for n in got.notes)
    assert run_config(out, session) == (got.config, True)


def test_a_base_not_on_this_machine_or_no_model_yet_falls_back_with_a_note(tmp_path):
    out = str(tmp_path / "out")
    _adapter(out, "/cluster/scratch/models/qwen")  # the cluster's path, not here
    _state(out, 3)
    got = trl_run_config(out, demo_config())
    assert got.config.model.name_or_path == "builtin:demo"
    assert any("/cluster/scratch/models/qwen" in n and "not on this machine" in n
               for n in got.notes)  # fmt: skip
    hub = str(tmp_path / "hub")
    _adapter(hub, "Qwen/Qwen2.5-0.5B-Instruct")  # a hub id is kept: downloaded on first use
    assert trl_run_config(hub, demo_config()).config.model.name_or_path.startswith("Qwen/")
    empty = str(tmp_path / "running")
    os.makedirs(os.path.join(empty, "checkpoint-1"))  # no weights saved yet
    got = trl_run_config(empty, demo_config())
    assert not got.config.lora.enabled
    assert any("saved no model yet" in n for n in got.notes)
