"""Export: a run's checkpoint as a PEFT adapter or a merged model, round-tripped.

- adapter: the exported folder loads with `PeftModel.from_pretrained(base, DIR)` on the base its
  adapter_config.json names, and answers greedily exactly as the run's checkpoint does;
- merged: `AutoModelForCausalLM.from_pretrained(DIR)` answers greedily as base + adapter, and
  differently from the base alone (the adapter matters); its generation_config stops at the run's
  stop ids; a full fine-tuning run exports its own weights;
- errors a user meets: no checkpoint, a missing step, an adapter asked of a full fine-tuning run,
  a missing base model, an out folder that is not empty (refused, replaced with force), Cancel.

The runs are real (engine.train, one step of the built-in demo model, LoRA and full). One step
at the demo's settings may leave LoRA's B matrices at zero (then merged == base trivially), so the
fixture writes random values into the checkpoint's lora_B tensors, as a longer run would leave
them. A QLoRA run (quantization.mode 4bit; bitsandbytes runs on the CPU) on the tiny micro model
merges into a bfloat16 copy of the base. The realistic-shape case is test_export_shapes.py (slow).
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from grpo_desktop.engine.export.pipeline import (
    ExportCancelled,
    ExportError,
    MissingBaseModel,
    export,
)
from grpo_desktop.engine.export.plan import safetensors_tensors
from grpo_desktop.engine.runs.layout import list_checkpoints
from tests.support.export_runs import (
    PROBLEMS,
    greedy,
    perturb_lora_b,
    run_checkpoint_policy,
    small_demo,
    train_run,
)
from tests.support.hazards import small_config


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> str:
    run = train_run(small_demo(lora=True), str(tmp_path_factory.mktemp("lora") / "run"))
    perturb_lora_b(run)
    return run


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> str:
    return train_run(small_demo(lora=False), str(tmp_path_factory.mktemp("full") / "run"))


def test_adapter_loads_with_peft_and_answers_as_the_runs_checkpoint(lora_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = str(tmp_path / "adapter")
    result = export(lora_run, "adapter", out)
    assert result["format"] == "adapter" and result["out"] == out and result["step"] == 1
    assert result["bytes"] > 0 and result["dtype"] == "float32"
    names = set(os.listdir(out))
    assert {"adapter_model.safetensors", "adapter_config.json", "README.txt"} <= names
    assert "tokenizer.json" in names and "chat_template.jinja" in names
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temporary left
    with open(os.path.join(out, "adapter_config.json")) as fh:
        base = json.load(fh)["base_model_name_or_path"]
    assert os.path.isfile(os.path.join(base, "config.json"))  # the demo's folder, absolute
    with open(os.path.join(out, "README.txt")) as fh:
        readme = fh.read()
    assert base in readme and "PeftModel.from_pretrained" in readme

    policy, cfg = run_checkpoint_policy(lora_run)
    expected = greedy(policy.model, policy.tokenizer, cfg.data.system_prompt)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), out).eval()
    assert greedy(model, tokenizer, cfg.data.system_prompt) == expected


def test_merged_answers_as_base_plus_adapter_and_unlike_the_base(lora_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = str(tmp_path / "merged")
    result = export(lora_run, "merged", out)
    assert result["dtype"] == "float32" and result["stop_ids"] == [2]
    assert {"model.safetensors", "config.json", "generation_config.json"} <= set(os.listdir(out))
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template  # the demo's template travels with the model
    assert merged.generation_config.eos_token_id == 2

    policy, cfg = run_checkpoint_policy(lora_run)
    system = cfg.data.system_prompt
    expected = greedy(policy.model, policy.tokenizer, system)
    assert greedy(merged, tokenizer, system) == expected
    base = AutoModelForCausalLM.from_pretrained(result["base"]).eval()
    ids = tokenizer(PROBLEMS[0], return_tensors="pt").input_ids
    with torch.no_grad():
        merged_logits, base_logits = merged(ids).logits, base(ids).logits
        run_logits = policy.model(ids).logits
    torch.testing.assert_close(merged_logits, run_logits, atol=1e-4, rtol=1e-4)
    assert (merged_logits - base_logits).abs().max() > 0.05  # the adapter matters
    reloaded_base = AutoModelForCausalLM.from_pretrained(result["base"])
    adapter = os.path.join(list_checkpoints(lora_run)[-1][1], "adapter")
    peft = PeftModel.from_pretrained(reloaded_base, adapter).eval()
    assert greedy(peft, tokenizer, system) == expected


def test_a_full_fine_tuning_run_exports_its_own_weights(full_run, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = str(tmp_path / "full")
    result = export(full_run, "merged", out)
    assert result["dtype"] == "float32" and result["parameters"] == 1_595_136
    ckpt_model = os.path.join(list_checkpoints(full_run)[-1][1], "model")
    saved, exported = (
        load_file(f"{ckpt_model}/model.safetensors"),
        load_file(f"{out}/model.safetensors"),
    )
    assert saved.keys() == exported.keys()
    assert all(torch.equal(saved[k], exported[k]) for k in saved)
    policy, cfg = run_checkpoint_policy(full_run)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    system = cfg.data.system_prompt
    assert greedy(model, tokenizer, system) == greedy(policy.model, policy.tokenizer, system)


def test_an_adapter_is_refused_for_a_full_fine_tuning_run(full_run, tmp_path):
    with pytest.raises(ExportError, match="LoRA was off.*--format merged"):
        export(full_run, "adapter", str(tmp_path / "x"))
    assert not os.path.exists(tmp_path / "x")


def test_checkpoint_steps_and_runs_without_one(lora_run, tmp_path):
    with pytest.raises(ExportError, match="no checkpoint at step 7; it has: 1"):
        export(lora_run, "adapter", str(tmp_path / "x"), checkpoint=7)
    empty = tmp_path / "fresh"
    empty.mkdir()
    (empty / "config.json").write_text(small_demo(True).to_json())
    (empty / "events.jsonl").write_text("")
    with pytest.raises(ExportError, match="saved no checkpoint yet"):
        export(str(empty), "merged", str(tmp_path / "y"))
    with pytest.raises(ExportError, match="is not a run folder"):
        export(str(tmp_path), "merged", str(tmp_path / "z"))
    ckpt = list_checkpoints(lora_run)[0][1]  # a checkpoint folder works as the source too
    assert export(ckpt, "adapter", str(tmp_path / "from-ckpt"))["step"] == 1


def test_a_missing_base_model_is_named_with_the_fix(lora_run, tmp_path):
    import shutil

    from grpo_desktop.engine.runs.files import read_run_config

    moved = tmp_path / "run"
    shutil.copytree(lora_run, moved)
    cfg = read_run_config(str(moved)).replace(model={"name_or_path": str(tmp_path / "gone")})
    (moved / "config.json").write_text(cfg.to_json())
    with pytest.raises(MissingBaseModel) as caught:
        export(str(moved), "merged", str(tmp_path / "out"))
    message = str(caught.value)
    assert str(tmp_path / "gone") in message and "model.name_or_path" in message
    assert not os.path.exists(tmp_path / "out")


def test_a_non_empty_out_folder_is_refused_unless_forced(lora_run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(ExportError, match="already exists and is not empty.*--force"):
        export(lora_run, "adapter", str(out))
    assert os.listdir(out) == ["mine.txt"]
    export(lora_run, "adapter", str(out), force=True)
    assert "mine.txt" not in os.listdir(out) and "adapter_config.json" in os.listdir(out)
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no temporary or replaced folder left


def test_cancel_leaves_nothing(lora_run, tmp_path):
    seen = []

    def progress(fraction, message):
        seen.append(fraction)

    with pytest.raises(ExportCancelled):
        export(
            lora_run,
            "merged",
            str(tmp_path / "out"),
            progress=progress,
            cancel=lambda: len(seen) >= 3,  # after loading the base, before writing
        )
    assert os.listdir(tmp_path) == []


def test_a_4bit_run_merges_into_a_bfloat16_copy_of_the_base(micro_model_dir, tmp_path):
    pytest.importorskip("bitsandbytes")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = small_config(micro_model_dir, lora=True).replace(quantization={"mode": "4bit"})
    run = train_run(cfg, str(tmp_path / "run"))
    perturb_lora_b(run)
    out = str(tmp_path / "merged")
    result = export(run, "merged", out)
    assert result["dtype"] == "bfloat16"
    assert "4-bit (NF4)" in result["dtype_reason"] and "bfloat16" in result["dtype_reason"]
    assert {d for d, _n in safetensors_tensors(out).values()} == {"BF16"}
    with open(os.path.join(out, "README.txt")) as fh:
        assert "Why bfloat16: This run trained on a 4-bit (NF4) copy" in fh.read()
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert not hasattr(merged.config, "quantization_config")

    def bf16_base():  # the base as the export reloads it: unquantized bfloat16
        return AutoModelForCausalLM.from_pretrained(micro_model_dir, dtype=torch.bfloat16).float()

    adapter = os.path.join(run, "checkpoints", "step-00000001", "adapter")
    reference = PeftModel.from_pretrained(bf16_base(), adapter).eval()
    ids = torch.tensor([[5, 9, 14, 20, 7, 3]])
    with torch.no_grad():
        got, want = merged(ids).logits, reference(ids).logits
        plain = bf16_base().eval()(ids).logits
    assert (got - want).abs().max() < 0.05 * (want - plain).abs().max() + 1e-2


# ---------------------------------------------------------------- the command line


def cli(*args: str, timeout: int = 300):
    import subprocess
    import sys

    from tests.support.hazards import ROOT

    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "export", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_cli_exports_a_session_as_an_adapter(lora_run, tmp_path):
    import shutil

    from grpo_desktop.session.document import new_session, save_session

    doc = new_session(str(tmp_path / "s.grpo"), small_demo(True))
    shutil.copytree(lora_run, doc.run_dir)
    doc.trained = True
    save_session(doc)
    out = tmp_path / "adapter"
    p = cli(doc.path, "--format", "adapter", "--out", str(out))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1  # one JSON line on stdout, progress on stderr
    summary = json.loads(lines[0])
    assert summary["format"] == "adapter" and summary["out"] == str(out)
    assert summary["bytes"] == sum(f.stat().st_size for f in out.iterdir())
    assert summary["step"] == 1 and summary["dtype"] == "float32" and summary["seconds"] > 0
    assert "%] Copying the adapter" in p.stderr and "Traceback" not in p.stderr


def test_cli_exports_a_session_as_a_trl_project(tmp_path):
    from grpo_desktop.session.document import new_session

    doc = new_session(str(tmp_path / "s.grpo"), small_demo(True))
    trl = tmp_path / "trl"
    p = cli(doc.path, "--format", "trl", "--out", str(trl))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["format"] == "trl" and (trl / "train.py").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "adapter", "--out", "{busy}"], "already exists and is not empty"),
        (["--format", "merged", "--out", "{new}", "--checkpoint", "9"], "no checkpoint at step 9"),
        (["--format", "zip", "--out", "{new}"], "invalid choice: 'zip'"),
    ],
)
def test_cli_bad_input_exits_2_with_one_paragraph(lora_run, tmp_path, args, message):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    args = [a.format(busy=busy, new=tmp_path / "new") for a in args]
    p = cli(lora_run, *args)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert not (tmp_path / "new").exists()


def test_cli_names_a_session_that_has_not_trained(tmp_path):
    from grpo_desktop.session.document import new_session

    doc = new_session(str(tmp_path / "fresh.grpo"), small_demo(True))
    p = cli(doc.path, "--format", "merged", "--out", str(tmp_path / "out"))
    assert p.returncode == 2 and "has not trained yet" in p.stderr and "--format trl" in p.stderr


def test_cli_refuses_before_writing_when_the_disk_is_too_small(lora_run, tmp_path):
    """A real 2 MB tmpfs in a private mount namespace (as test_disk_full.py mounts one); the
    merged demo needs 6.1 MB. The ENOSPC-while-writing case is test_export_disk.py (slow)."""
    import subprocess
    import sys

    from tests.support.hazards import ROOT, mount_problem, unshare

    problem = mount_problem(tmp_path)
    if problem:
        pytest.skip(problem)
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f"mount -t tmpfs -o size=2m tmpfs {disk} && {sys.executable} -m grpo_desktop export "
        f"{lora_run} --format merged --out {disk}/out; echo rc=$?; ls -A {disk}"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run(
        [*unshare(), "sh", "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.stdout.strip() == "rc=2", p.stdout + p.stderr  # and nothing on the disk
    assert f"Not enough free space at {disk}: the merged export needs about 6.1 MB" in p.stderr
    assert "Nothing was written." in p.stderr and "Traceback" not in p.stderr


def test_gguf_is_made_from_the_merged_model(tmp_path):
    """`--format gguf` merges first (into a temporary folder, gone afterwards), then the GGUF
    writer (engine/export/gguf.py) makes one .gguf and a Modelfile from it: the q projection in
    the file is the merged one (W + s·B·A), not the base's. A small Qwen2-family model with a
    BPE tokenizer (tests/support/gguf_models.py) and a real LoRA run on it."""
    from gguf import GGUFReader
    from safetensors.torch import load_file

    from tests.support.gguf_models import build_small, tensors_of, values

    base = str(tmp_path / "base")
    build_small(base, "qwen2.5-0.5b-shaped")
    run = train_run(small_config(base, lora=True), str(tmp_path / "run"))
    perturb_lora_b(run, std=0.5)
    out = tmp_path / "gguf"
    result = export(run, "gguf", str(out), outtype="f16")
    assert result["format"] == "gguf" and result["dtype"] == "f16"
    names = sorted(os.listdir(out))
    assert "Modelfile" in names and names.count("gguf-f16.gguf") == 1, names
    assert sorted(os.listdir(tmp_path)) == ["base", "gguf", "run"]  # no temporary folder
    merged = export(run, "merged", str(tmp_path / "merged"))["out"]
    want = load_file(f"{merged}/model.safetensors")["model.layers.0.self_attn.q_proj.weight"]
    plain = load_file(f"{base}/model.safetensors")["model.layers.0.self_attn.q_proj.weight"]
    got = values(tensors_of(GGUFReader(str(out / "gguf-f16.gguf")))["blk.0.attn_q.weight"])
    assert abs(got - want.float().numpy()).max() < 1e-2
    assert abs(got - plain.float().numpy()).max() > 0.1


def test_an_architecture_transformers_cannot_load_is_named(lora_run, tmp_path):
    import shutil

    from grpo_desktop.engine.export.merge import UnsupportedArchitecture
    from grpo_desktop.engine.runs.files import read_run_config

    cfg = read_run_config(lora_run)
    base = tmp_path / "mystery-model"
    shutil.copytree(export(lora_run, "merged", str(tmp_path / "m"))["base"], base)
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps(dict(config, model_type="mystery")))
    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    (run / "config.json").write_text(cfg.replace(model={"name_or_path": str(base)}).to_json())
    with pytest.raises(UnsupportedArchitecture) as caught:
        export(str(run), "merged", str(tmp_path / "out"))
    assert "llama, qwen2, qwen3" in str(caught.value) and str(base) in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_base_saved_in_4bit_is_dequantized_for_the_merge(micro_model_dir, tmp_path):
    """No full-precision copy of the base: the saved NF4 weights are dequantized to bfloat16
    and the adapter merged into them, which are the weights the run trained with (so the
    result is close to the 4-bit base + adapter)."""
    pytest.importorskip("bitsandbytes")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    quant = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
    )

    def four_bit(path):
        return AutoModelForCausalLM.from_pretrained(
            path, quantization_config=quant, device_map={"": "cpu"}
        )

    saved = str(tmp_path / "micro-nf4")
    four_bit(micro_model_dir).save_pretrained(saved)
    AutoTokenizer.from_pretrained(micro_model_dir).save_pretrained(saved)
    cfg = small_config(micro_model_dir, lora=True).replace(quantization={"mode": "4bit"})
    run = train_run(cfg, str(tmp_path / "run"))
    perturb_lora_b(run)
    (tmp_path / "run" / "config.json").write_text(
        cfg.replace(model={"name_or_path": saved}).to_json()
    )
    result = export(run, "merged", str(tmp_path / "merged"))
    assert result["dtype"] == "bfloat16" and "saved already quantized" in result["dtype_reason"]
    unquantized = sum(n for _d, n in safetensors_tensors(micro_model_dir).values())
    assert result["parameters"] == unquantized  # two 4-bit weights a byte, constants not counted
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"), dtype=torch.float32)
    adapter = os.path.join(run, "checkpoints", "step-00000001", "adapter")
    trained = PeftModel.from_pretrained(four_bit(saved), adapter).eval()
    ids = torch.tensor([[5, 9, 14, 20, 7, 3]])
    with torch.no_grad():
        got, want = merged.eval()(ids).logits, trained(ids).logits
    assert (got - want).abs().max() < 2e-2 * want.abs().max() + 1e-3
