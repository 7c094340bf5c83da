"""GGUF export's Ollama Modelfile, the built-in demo's export, the errors and the command line.

The small models of tests/support/gguf_models.py exported once per test process (shared with
test_export_gguf.py); the Modelfile's template is checked against the model's own chat template
on conversations beyond the probes it was read from.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest
import torch
from gguf import GGUFReader, TokenType  # noqa: E402

from grpo_desktop.engine.errors import ModelError  # noqa: E402
from grpo_desktop.engine.export.gguf import write_gguf  # noqa: E402
from grpo_desktop.engine.export.modelfile import chat_form  # noqa: E402
from grpo_desktop.engine.models import shapes  # noqa: E402
from tests.support.gguf_models import (  # noqa: E402
    DEMO,
    export_all,
    field,
    hf_weight,
    read_text,
    tensors_of,
    values,
)
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export_all(tmp_path_factory)


def test_modelfile_chatml(exported):
    _, tok, _, files = exported["qwen"]
    result = files["q8_0"][0]
    text = read_text(result["modelfile"])
    assert "FROM ./qwen-q8_0.gguf\n" in text
    assert 'PARAMETER stop "<|im_end|>"\nPARAMETER stop "<|endoftext|>"\n' in text
    assert "PARAMETER temperature 0.7\n" in text and "PARAMETER repeat_penalty 1.1\n" in text
    assert "<|im_start|>user\n{{ .Content }}<|im_end|>\n" in text
    assert "{{ else }}<|im_start|>system\n" + shapes.QWEN_SYSTEM + "<|im_end|>\n{{ end }}" in text
    # The form the Go template was written from renders new conversations as the model does.
    form = chat_form(tok)
    for messages in (
        [{"role": "user", "content": "What is 2 + 2?"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye"},
        ],
    ):
        want = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert form.render(messages) == want


def test_modelfile_llama3(exported):
    _, tok, _, files = exported["llama"]
    text = read_text(files["f16"][0]["modelfile"])
    stops = [line for line in text.splitlines() if line.startswith("PARAMETER stop")]
    assert stops == [
        'PARAMETER stop "<|eot_id|>"',
        'PARAMETER stop "<|end_of_text|>"',
        'PARAMETER stop "<|eom_id|>"',
    ]
    # The template writes <|begin_of_text|> itself; llama.cpp adds it (add_bos), so Ollama's
    # template starts with the system header, the date lines always there.
    template = text.split('TEMPLATE """', 1)[1]
    assert template.startswith(
        "<|start_header_id|>system<|end_header_id|>\n\n" + shapes.LLAMA_SYSTEM + "{{ .System }}"
    )
    assert "<|begin_of_text|>" not in template
    form = chat_form(tok)
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    messages.append({"role": "user", "content": "c"})
    want = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert form.render(messages) == want


def test_untranslatable_and_missing_templates_get_a_plain_one(exported, tmp_path):
    _, tok, model_dir, _ = exported["spm"]
    text = read_text(exported["spm"][3]["f16"][0]["modelfile"])
    assert "# This model has no chat template" in text
    assert 'TEMPLATE """{{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}"""' in text
    assert 'PARAMETER stop "</s>"' in text
    odd = tmp_path / "odd"
    shutil.copytree(model_dir, odd)
    tok.chat_template = (
        "{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    tok.save_pretrained(odd)
    result = write_gguf(str(odd), str(tmp_path / "out"), outtype="f16")
    text = read_text(result["modelfile"])
    assert "could not be translated to Ollama's Go template" in text
    assert "tokenizer.chat_template" in text and "{{ .Prompt }}" in text


def test_demo_model_exports_its_characters_as_byte_level_bpe(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(DEMO)
    result = write_gguf(DEMO, str(tmp_path), outtype="q8_0")
    reader = GGUFReader(result["path"])
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    # Each character in its byte-level spelling (space Ġ, newline Ċ); × (2 UTF-8 bytes C3 97,
    # spelled Ã Ĺ) is the one character that needs a merge.
    assert tokens[tok.convert_tokens_to_ids(" ")] == "Ġ"
    assert tokens[tok.convert_tokens_to_ids("\n")] == "Ċ"
    assert tokens[tok.convert_tokens_to_ids("×")] == "ÃĹ"
    assert field(reader, "tokenizer.ggml.merges") == ["Ã Ĺ"]
    assert tokens[:10] == tok.convert_ids_to_tokens(list(range(10)))  # specials and tags as-is
    types = field(reader, "tokenizer.ggml.token_type")
    assert types[1] == TokenType.UNKNOWN and types[2] == TokenType.CONTROL  # <|unk|>, <|end|>
    assert types[6] == TokenType.USER_DEFINED  # <think>: added, not special
    assert field(reader, "tokenizer.ggml.eos_token_id") == 2
    # No BOS in the demo: its pad token stands in, never added (llama.cpp's default is id 11,
    # the character "1" here).
    assert field(reader, "tokenizer.ggml.bos_token_id") == 0
    assert field(reader, "tokenizer.ggml.add_bos_token") is False
    text = read_text(result["modelfile"])
    assert "<|user|>{{ .Content }}<|end|>" in text and 'PARAMETER stop "<|end|>"' in text


def test_a_word_level_tokenizer_is_refused_with_what_is_supported(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "words"
    shutil.copytree(DEMO, folder)
    core = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1, "world": 2}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).unlink()
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>").save_pretrained(folder)
    with pytest.raises(ModelError) as caught:
        write_gguf(str(folder), str(tmp_path / "out"))
    message = str(caught.value)
    assert "word-level" in message and "byte-level BPE" in message and "SentencePiece" in message
    assert not (tmp_path / "out").exists()


def test_unsupported_architecture_names_the_supported_ones(exported, tmp_path):
    import json

    folder = tmp_path / "gpt2"
    shutil.copytree(exported["llama"][2], folder)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["MistralForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="LlamaForCausalLM, Qwen2ForCausalLM.*MistralForCausalLM"):
        write_gguf(str(folder), str(tmp_path / "out"))


def test_progress_is_reported_and_no_partial_file_is_left(exported, tmp_path):
    seen = []
    result = write_gguf(
        exported["qwen"][2], str(tmp_path), outtype="q8_0", progress=lambda f, m: seen.append(f),
        name="my model/v2",
    )  # fmt: skip
    assert os.path.basename(result["path"]) == "my-model-v2-q8_0.gguf"
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen) and len(seen) > 20
    assert sorted(os.listdir(tmp_path)) == ["Modelfile", "my-model-v2-q8_0.gguf"]


@pytest.mark.slow  # the export subprocess alone: 25.6 s at load 10 (torch, merge, GGUF)
def test_cli_exports_a_lora_run_as_gguf(trained_run, tmp_path):
    """`grpo-desktop export RUN --format gguf --outtype f16`: the LoRA run's newest checkpoint
    merged into the demo model and written as GGUF, with its Modelfile; the file's weights are
    base + LoRA, not the base."""
    import json
    import subprocess

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = trained_run(lora=True)
    out = tmp_path / "gguf"
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "export", run, "--format", "gguf", "--out",
         str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["format"] == "gguf" and summary["tensors"] == 38 and summary["step"] == 2
    files = sorted(os.listdir(out))
    assert "Modelfile" in files and len([f for f in files if f.endswith("-f16.gguf")]) == 1
    reader = GGUFReader(str(out / next(f for f in files if f.endswith(".gguf"))))
    steps = sorted(os.listdir(os.path.join(run, "checkpoints")))
    adapter = os.path.join(run, "checkpoints", steps[-1], "adapter")
    base = AutoModelForCausalLM.from_pretrained(DEMO, dtype=torch.float32)
    base_v = hf_weight(base, "model.layers.0.self_attn.v_proj.weight").copy()  # merging writes base
    merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    want = hf_weight(merged, "model.layers.0.self_attn.v_proj.weight")
    got = values(tensors_of(reader)["blk.0.attn_v.weight"])
    f16_error = np.abs(want).max() * 2**-11  # float16 keeps 11 significant bits
    assert np.abs(got - want).max() <= f16_error
    assert np.abs(want - base_v).max() > 10 * f16_error  # the adapter is in the file
