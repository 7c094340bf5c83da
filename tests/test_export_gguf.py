"""GGUF export (engine/export_gguf.py): the files read back with the `gguf` package's reader.

Small Llama-3-shaped and Qwen2.5-shaped models (tests/gguf_models.py: the families' real special
tokens, EOS lists, chat templates and pre-tokenizer regexes; a 4,000-entry BPE vocabulary, 64
wide, 2 layers) and a Llama with a SentencePiece tokenizer are exported once per module as f16
and q8_0. The tests compare the files with the Hugging Face models they came from: metadata,
tensor names, shapes and types, values (the Llama q/k rows in llama.cpp's rotary order), the
vocabulary, the Modelfile. The slow test loads a file with llama-cpp-python and compares its
greedy tokens with transformers'.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from gguf import GGMLQuantizationType, GGUFReader, TokenType  # noqa: E402
from gguf.quants import dequantize  # noqa: E402
from gguf_models import build_small, sentencepiece_llama  # noqa: E402

from grpo_desktop.engine import shapes  # noqa: E402
from grpo_desktop.engine.errors import ModelError  # noqa: E402
from grpo_desktop.engine.export_gguf import write_gguf  # noqa: E402
from grpo_desktop.engine.gguf_modelfile import chat_form  # noqa: E402
from grpo_desktop.engine.gguf_vocab import read_vocab  # noqa: E402

DEMO = os.path.join(os.path.dirname(__file__), "..", "grpo_desktop", "resources", "demo_model")
F16, F32, Q8_0 = GGMLQuantizationType.F16, GGMLQuantizationType.F32, GGMLQuantizationType.Q8_0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{kind: (model, tokenizer, model_dir, {outtype: (result, reader)})} for llama, qwen, spm."""
    root = tmp_path_factory.mktemp("gguf")
    builders = {
        "llama": lambda d: build_small(d, "llama-3-shaped", real_pre_tokenizer=True),
        "qwen": lambda d: build_small(d, "qwen2.5-0.5b-shaped", real_pre_tokenizer=True),
        "spm": sentencepiece_llama,
    }
    out = {}
    for kind, build in builders.items():
        model_dir = str(root / kind)
        model, tok = build(model_dir)
        files = {}
        for outtype in ("f16", "q8_0"):
            result = write_gguf(model_dir, str(root / f"{kind}-{outtype}"), outtype=outtype)
            files[outtype] = (result, GGUFReader(result["path"]))
        out[kind] = (model, tok, model_dir, files)
    return out


def _field(reader, key):
    field = reader.fields[key]
    return field.contents()


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _tensors(reader) -> dict:
    return {t.name: t for t in reader.tensors}


def _values(tensor) -> np.ndarray:
    """A GGUF tensor as float32 in numpy order (rows, columns)."""
    shape = tuple(int(n) for n in reversed(tensor.shape))
    if tensor.tensor_type == Q8_0:
        return dequantize(np.asarray(tensor.data), Q8_0).reshape(shape)
    return np.asarray(tensor.data, dtype=np.float32).reshape(shape)


def _hf(model, name) -> np.ndarray:
    return model.state_dict()[name].float().numpy()


def _pairs(weight: np.ndarray, heads: int) -> np.ndarray:
    """HF's half-split rotary rows in llama.cpp's pair order, written out row by row: head h,
    pair j -> rows 2j and 2j+1 take HF rows j and d/2 + j of that head."""
    d = weight.shape[0] // heads
    out = np.empty_like(weight)
    for h in range(heads):
        for j in range(d // 2):
            out[h * d + 2 * j] = weight[h * d + j]
            out[h * d + 2 * j + 1] = weight[h * d + d // 2 + j]
    return out


def test_llama_metadata(exported):
    model, tok, _, files = exported["llama"]
    result, reader = files["f16"]
    assert result["outtype"] == "f16" and result["bytes"] == os.path.getsize(result["path"])
    assert result["path"].endswith("llama-f16.gguf") and result["tensors"] == len(reader.tensors)
    cfg = model.config
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.context_length") == 131072
    assert _field(reader, "llama.embedding_length") == 64
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.feed_forward_length") == 128
    assert _field(reader, "llama.attention.head_count") == 4
    assert _field(reader, "llama.attention.head_count_kv") == 2
    assert _field(reader, "llama.rope.freq_base") == pytest.approx(5e5)
    assert _field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert _field(reader, "llama.vocab_size") == cfg.vocab_size == len(tok) + 32
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.pre") == "llama-bpe"
    ids = tok.convert_tokens_to_ids
    assert _field(reader, "tokenizer.ggml.bos_token_id") == ids("<|begin_of_text|>") == 4000
    # generation_config has EOS [end_of_text, eom_id, eot_id]: the chat's end is the EOS.
    assert _field(reader, "tokenizer.ggml.eos_token_id") == ids("<|eot_id|>") == 4009
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True
    assert _field(reader, "tokenizer.ggml.add_eos_token") is False
    assert _field(reader, "tokenizer.chat_template") == tok.chat_template
    assert "tokenizer.ggml.pad_token_id" not in reader.fields  # Llama 3 has none


def test_llama_vocabulary(exported):
    _, tok, _, files = exported["llama"]
    reader = files["f16"][1]
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = tok.get_vocab()
    assert tokens[: len(tok)] == [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert tokens[len(tok) :] == [f"[PAD{i}]" for i in range(len(tok), len(tok) + 32)]
    types = _field(reader, "tokenizer.ggml.token_type")
    assert types[ids := tok.convert_tokens_to_ids("Ġthe")] == TokenType.NORMAL, ids
    assert types[4009] == TokenType.CONTROL  # <|eot_id|>: a special added token
    assert set(types[len(tok) :]) == {TokenType.UNUSED}
    merges = tok.backend_tokenizer.to_str()
    import json

    hf_merges = json.loads(merges)["model"]["merges"]
    assert _field(reader, "tokenizer.ggml.merges") == [
        m if isinstance(m, str) else " ".join(m) for m in hf_merges
    ]


def test_llama_f16_tensors_match_the_weights(exported):
    model, _, _, files = exported["llama"]
    tensors = _tensors(files["f16"][1])
    blk = [f"blk.{i}.{p}.weight" for i in range(2) for p in ("attn_norm", "attn_q", "attn_k",
           "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")]  # fmt: skip
    assert set(tensors) == {"token_embd.weight", "output_norm.weight", "rope_freqs.weight", *blk}
    assert tuple(tensors["blk.0.attn_q.weight"].shape) == (64, 64)  # GGUF order (columns, rows)
    assert tuple(tensors["blk.0.attn_k.weight"].shape) == (64, 32)  # 2 KV heads of 16
    assert tuple(tensors["token_embd.weight"].shape) == (64, model.config.vocab_size)
    for name, t in tensors.items():
        assert t.tensor_type == (F32 if len(t.shape) == 1 else F16), name
    q = _hf(model, "model.layers.1.self_attn.q_proj.weight")
    k = _hf(model, "model.layers.1.self_attn.k_proj.weight")
    np.testing.assert_allclose(_values(tensors["blk.1.attn_q.weight"]), _pairs(q, 4), atol=1e-3)
    np.testing.assert_allclose(_values(tensors["blk.1.attn_k.weight"]), _pairs(k, 2), atol=1e-3)
    for ours, theirs in (
        ("blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight"),
        ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"),
    ):
        np.testing.assert_allclose(_values(tensors[ours]), _hf(model, theirs), atol=1e-3)
    # Llama 3 rope scaling (factor 32, low 1, high 4, original context 8192), head_dim 16:
    # frequency i turns at 500000^(-2i/16); wavelengths under 8192/4 keep it (divisor 1),
    # those over 8192/1 are divided by 32. i = 0 (wavelength 2pi) and i = 7 (~2.9e5) are those.
    freqs = _values(tensors["rope_freqs.weight"])
    assert freqs.shape == (8,) and freqs[0] == pytest.approx(1.0) and freqs[7] == pytest.approx(32)


def test_q8_0_matches_the_weights_within_a_block_step(exported):
    model, _, _, files = exported["llama"]
    result, reader = files["q8_0"]
    assert result["bytes"] < 0.7 * files["f16"][0]["bytes"]
    assert _field(reader, "general.file_type") == 7  # MOSTLY_Q8_0
    tensors = _tensors(reader)
    for name, t in tensors.items():
        assert t.tensor_type == (F32 if len(t.shape) == 1 else Q8_0), name
    for ours, theirs, heads in (
        ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 4),
        ("blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight", None),
        ("token_embd.weight", "model.embed_tokens.weight", None),
    ):
        want = _hf(model, theirs)
        want = _pairs(want, heads) if heads else want
        got = _values(tensors[ours])
        # q8_0: per block of 32, step d = max |x| / 127, x ~ q * d16 with |q| <= 127 and d16
        # the step rounded to float16 (relative error <= 2^-11): |error| <= d/2 + 127 d 2^-11
        # = 0.562 d; at least a third of a step off somewhere (it is not float16 data).
        step = np.abs(want.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
        error = np.abs(got - want).reshape(-1, 32)
        assert (error <= step * 0.5625 + 1e-7).all(), ours
        assert (error > step / 3).any(), ours


def test_qwen2_biases_tied_embedding_and_no_permutation(exported):
    model, tok, _, files = exported["qwen"]
    reader = files["f16"][1]
    tensors = _tensors(reader)
    assert _field(reader, "general.architecture") == "qwen2"
    assert _field(reader, "qwen2.rope.freq_base") == pytest.approx(1e6)
    assert _field(reader, "qwen2.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    assert _field(reader, "qwen2.context_length") == 32768
    assert "output.weight" not in tensors and "rope_freqs.weight" not in tensors  # tied
    for part in ("q", "k", "v"):
        bias = tensors[f"blk.0.attn_{part}.bias"]
        assert bias.tensor_type == F32
        hf = _hf(model, f"model.layers.0.self_attn.{part}_proj.bias")
        np.testing.assert_allclose(_values(bias), hf, rtol=0, atol=0)
    q = _hf(model, "model.layers.0.self_attn.q_proj.weight")  # llama.cpp's qwen2 ropes as HF
    np.testing.assert_allclose(_values(tensors["blk.0.attn_q.weight"]), q, atol=1e-3)
    assert _field(reader, "tokenizer.ggml.pre") == "qwen2"
    ids = tok.convert_tokens_to_ids
    assert _field(reader, "tokenizer.ggml.eos_token_id") == ids("<|im_end|>") == 4002
    assert _field(reader, "tokenizer.ggml.bos_token_id") == ids("<|endoftext|>") == 4000
    assert _field(reader, "tokenizer.ggml.padding_token_id") == 4000
    assert _field(reader, "tokenizer.ggml.add_bos_token") is False
    types = _field(reader, "tokenizer.ggml.token_type")
    assert types[ids("<tool_call>")] == TokenType.USER_DEFINED  # added, not special
    q8 = _tensors(files["q8_0"][1])["blk.0.attn_q.bias"]
    assert q8.tensor_type == F32  # vectors stay float32 in q8_0 files


def test_modelfile_chatml(exported):
    _, tok, _, files = exported["qwen"]
    result = files["q8_0"][0]
    text = _read(result["modelfile"])
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
    text = _read(files["f16"][0]["modelfile"])
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
    text = _read(exported["spm"][3]["f16"][0]["modelfile"])
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
    text = _read(result["modelfile"])
    assert "could not be translated to Ollama's Go template" in text
    assert "tokenizer.chat_template" in text and "{{ .Prompt }}" in text


def test_sentencepiece_vocabulary(exported):
    model, tok, _, files = exported["spm"]
    reader = files["f16"][1]
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    assert _field(reader, "tokenizer.ggml.add_space_prefix") is True
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True
    assert _field(reader, "tokenizer.ggml.bos_token_id") == 1
    assert _field(reader, "tokenizer.ggml.eos_token_id") == 2
    types = _field(reader, "tokenizer.ggml.token_type")
    assert types[0] == TokenType.UNKNOWN and types[1] == types[2] == TokenType.CONTROL
    assert set(types[3:259]) == {TokenType.BYTE} and types[259] == TokenType.NORMAL
    tokens, scores = (
        _field(reader, "tokenizer.ggml.tokens"),
        _field(reader, "tokenizer.ggml.scores"),
    )
    assert tokens == tok.convert_ids_to_tokens(list(range(len(tok))))
    # A merged piece scores minus its merge's rank (1-based): the first merge scores -1.
    import json

    first = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"][0]
    left, right = first.split(" ") if isinstance(first, str) else first
    assert scores[tokens.index(left + right)] == -1.0
    tensors = _tensors(reader)
    assert "output.weight" in tensors  # not tied
    np.testing.assert_allclose(
        _values(tensors["output.weight"]), _hf(model, "lm_head.weight"), atol=1e-3
    )


def test_gpt2_pre_tokenizer_is_recognised():
    from gguf_models import small_shape

    tok = shapes.build_tokenizer(small_shape("qwen2.5-0.5b-shaped"))  # ByteLevel's own regex
    assert read_vocab(tok, len(tok) + 32).pre == "gpt-2"


def test_demo_model_exports_its_characters_as_byte_level_bpe(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(DEMO)
    result = write_gguf(DEMO, str(tmp_path), outtype="q8_0")
    reader = GGUFReader(result["path"])
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    # Each character in its byte-level spelling (space Ġ, newline Ċ); × (2 UTF-8 bytes C3 97,
    # spelled Ã Ĺ) is the one character that needs a merge.
    assert tokens[tok.convert_tokens_to_ids(" ")] == "Ġ"
    assert tokens[tok.convert_tokens_to_ids("\n")] == "Ċ"
    assert tokens[tok.convert_tokens_to_ids("×")] == "ÃĹ"
    assert _field(reader, "tokenizer.ggml.merges") == ["Ã Ĺ"]
    assert tokens[:10] == tok.convert_ids_to_tokens(list(range(10)))  # specials and tags as-is
    types = _field(reader, "tokenizer.ggml.token_type")
    assert types[1] == TokenType.UNKNOWN and types[2] == TokenType.CONTROL  # <|unk|>, <|end|>
    assert types[6] == TokenType.USER_DEFINED  # <think>: added, not special
    assert _field(reader, "tokenizer.ggml.eos_token_id") == 2
    assert "tokenizer.ggml.bos_token_id" not in reader.fields
    text = _read(result["modelfile"])
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


TEXTS = [  # tokenized by both; the demo's alphabet has no tab, é, € or 中 (transformers reads
    # them as <|unk|>, llama.cpp drops them) and it reads a double newline as <|unk|>
    "Hello world! I'm here, DON'T we've 12345 apples + 7 = 12352.\n    def f(x): return x**2",
    " leading space and trailing   ",
    "<think>7 * 6 is 42</think><answer>42</answer>",
    "a\n\n\tb é€中 3.14159",
]


def _llama_cpp_model(llama_cpp, path: str):
    """A llama.cpp model without weight repacking (extra buffer types): on a CPU that reports
    AMX while its VM has not enabled it (this sandbox), llama.cpp's repacked AMX q8_0 kernel
    dies with SIGILL. Repacking changes how llama.cpp lays out the weights, not the file."""
    low = llama_cpp.llama_cpp
    default = low.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    low.llama_model_default_params = params
    try:
        return llama_cpp.Llama(path, n_ctx=256, verbose=False, seed=0, logits_all=True)
    finally:
        low.llama_model_default_params = default


def _hf_greedy(model, ids: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """transformers' greedy continuation (no repetition penalty: Qwen's generation_config has
    1.1) and its logits over prompt + continuation."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=n, do_sample=False, repetition_penalty=1.0,
            pad_token_id=0,
        )  # fmt: skip
        logits = model(out).logits[0]  # (T, V)
    return out[0, len(ids) :].tolist(), logits


@pytest.mark.slow
def test_llama_cpp_reads_the_files_as_transformers_does(exported, tmp_path):
    """llama-cpp-python (pip install llama-cpp-python; it compiles llama.cpp) loads the f16 and
    q8_0 files of the small Llama 3 and Qwen2.5 models, the SentencePiece Llama and the demo:
    - its tokenizer gives transformers' ids for TEXTS (the demo: where its alphabet allows);
    - f16: the same 24 greedy tokens as transformers;
    - q8_0: fed transformers' greedy sequence, its logits stay within 6 % of the logit range
      and its argmax is transformers' token wherever transformers' top two differ by more
      than 0.3 (q8_0 moves these random models' logits by up to ~0.12 of ~3.5, so a near-tie
      may flip and greedy decoding then drifts apart: not an export error)."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompt = "How many apples are left? 123 + 45 = 168.\n<think>"
    cases = {k: (v[0], v[1], {o: v[3][o][0]["path"] for o in v[3]}) for k, v in exported.items()}
    demo_paths = {o: write_gguf(DEMO, str(tmp_path), outtype=o)["path"] for o in ("f16", "q8_0")}
    demo = AutoModelForCausalLM.from_pretrained(DEMO, dtype=torch.float32)
    cases["demo"] = (demo, AutoTokenizer.from_pretrained(DEMO), demo_paths)
    for kind, (model, tok, paths) in cases.items():
        ids = tok(prompt)["input_ids"]
        want, hf_logits = _hf_greedy(model, ids, 24)
        for outtype, path in paths.items():
            llm = _llama_cpp_model(llama_cpp, path)
            texts = TEXTS[:3] if kind == "demo" else TEXTS
            for text in texts:
                assert (
                    llm.tokenize(text.encode(), add_bos=True, special=True)
                    == tok(text)["input_ids"]
                ), (kind, text)
            if outtype == "f16":
                got = []
                for token in llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0):
                    got.append(token)
                    if len(got) == len(want):
                        break
                assert got == want, (kind, outtype)
            else:
                llm.reset()
                llm.eval(ids + want)
                ours = torch.tensor(np.array(llm.scores[: len(ids) + len(want)]))  # (T, V)
                scale = hf_logits.abs().max()
                assert (ours - hf_logits).abs().max() <= 0.06 * scale, kind
                top2 = hf_logits.topk(2, dim=-1).values
                clear = (top2[:, 0] - top2[:, 1]) > 0.3
                assert (ours.argmax(-1) == hf_logits.argmax(-1))[clear].all(), kind
            llm.close()


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
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    base_v = _hf(base, "model.layers.0.self_attn.v_proj.weight").copy()  # merging writes base
    merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    want = _hf(merged, "model.layers.0.self_attn.v_proj.weight")
    got = _values(_tensors(reader)["blk.0.attn_v.weight"])
    f16_error = np.abs(want).max() * 2**-11  # float16 keeps 11 significant bits
    assert np.abs(got - want).max() <= f16_error
    assert np.abs(want - base_v).max() > 10 * f16_error  # the adapter is in the file
