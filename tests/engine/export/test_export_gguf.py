"""GGUF export (engine/export/gguf.py): the files read back with the `gguf` package's reader.

Small Llama-3-shaped and Qwen2.5-shaped models (tests/support/gguf_models.py: the families' real special
tokens, EOS lists, chat templates and pre-tokenizer regexes; a 4,000-entry BPE vocabulary, 64
wide, 2 layers) and a Llama with a SentencePiece tokenizer are exported once per test process as
f16 and q8_0. The tests compare the files with the Hugging Face models they came from: metadata,
tensor names, shapes and types, values (the Llama q/k rows in llama.cpp's rotary order), the
vocabulary. The slow test loads the files with llama-cpp-python and compares its tokens and
greedy decoding with transformers'. The Modelfile, the demo and the errors:
test_export_gguf_modelfile.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, TokenType  # noqa: E402

from grpo_desktop.engine.export.gguf import write_gguf  # noqa: E402
from grpo_desktop.engine.export.gguf_vocab import read_vocab  # noqa: E402
from grpo_desktop.engine.models import shapes  # noqa: E402
from tests.support.gguf_models import (  # noqa: E402
    DEMO,
    export_all,
    field,
    hf_weight,
    tensors_of,
    values,
)
from tests.support.llama_cpp import llama_model

F16, F32, Q8_0 = GGMLQuantizationType.F16, GGMLQuantizationType.F32, GGMLQuantizationType.Q8_0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export_all(tmp_path_factory)


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
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "llama.context_length") == 131072
    assert field(reader, "llama.embedding_length") == 64
    assert field(reader, "llama.block_count") == 2
    assert field(reader, "llama.feed_forward_length") == 128
    assert field(reader, "llama.attention.head_count") == 4
    assert field(reader, "llama.attention.head_count_kv") == 2
    assert field(reader, "llama.rope.freq_base") == pytest.approx(5e5)
    assert field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert field(reader, "llama.vocab_size") == cfg.vocab_size == len(tok) + 32
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.pre") == "llama-bpe"
    ids = tok.convert_tokens_to_ids
    assert field(reader, "tokenizer.ggml.bos_token_id") == ids("<|begin_of_text|>") == 4000
    # generation_config has EOS [end_of_text, eom_id, eot_id]: the chat's end is the EOS.
    assert field(reader, "tokenizer.ggml.eos_token_id") == ids("<|eot_id|>") == 4009
    assert field(reader, "tokenizer.ggml.add_bos_token") is True
    assert field(reader, "tokenizer.ggml.add_eos_token") is False
    assert field(reader, "tokenizer.chat_template") == tok.chat_template
    assert "tokenizer.ggml.pad_token_id" not in reader.fields  # Llama 3 has none


def test_llama_vocabulary(exported):
    _, tok, _, files = exported["llama"]
    reader = files["f16"][1]
    tokens = field(reader, "tokenizer.ggml.tokens")
    vocab = tok.get_vocab()
    assert tokens[: len(tok)] == [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert tokens[len(tok) :] == [f"[PAD{i}]" for i in range(len(tok), len(tok) + 32)]
    types = field(reader, "tokenizer.ggml.token_type")
    assert types[ids := tok.convert_tokens_to_ids("Ġthe")] == TokenType.NORMAL, ids
    assert types[4009] == TokenType.CONTROL  # <|eot_id|>: a special added token
    assert set(types[len(tok) :]) == {TokenType.UNUSED}
    merges = tok.backend_tokenizer.to_str()
    import json

    hf_merges = json.loads(merges)["model"]["merges"]
    assert field(reader, "tokenizer.ggml.merges") == [
        m if isinstance(m, str) else " ".join(m) for m in hf_merges
    ]


def test_llama_f16_tensors_match_the_weights(exported):
    model, _, _, files = exported["llama"]
    tensors = tensors_of(files["f16"][1])
    blk = [f"blk.{i}.{p}.weight" for i in range(2) for p in ("attn_norm", "attn_q", "attn_k",
           "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")]  # fmt: skip
    assert set(tensors) == {"token_embd.weight", "output_norm.weight", "rope_freqs.weight", *blk}
    assert tuple(tensors["blk.0.attn_q.weight"].shape) == (64, 64)  # GGUF order (columns, rows)
    assert tuple(tensors["blk.0.attn_k.weight"].shape) == (64, 32)  # 2 KV heads of 16
    assert tuple(tensors["token_embd.weight"].shape) == (64, model.config.vocab_size)
    for name, t in tensors.items():
        assert t.tensor_type == (F32 if len(t.shape) == 1 else F16), name
    q = hf_weight(model, "model.layers.1.self_attn.q_proj.weight")
    k = hf_weight(model, "model.layers.1.self_attn.k_proj.weight")
    np.testing.assert_allclose(values(tensors["blk.1.attn_q.weight"]), _pairs(q, 4), atol=1e-3)
    np.testing.assert_allclose(values(tensors["blk.1.attn_k.weight"]), _pairs(k, 2), atol=1e-3)
    for ours, theirs in (
        ("blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight"),
        ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"),
    ):
        np.testing.assert_allclose(values(tensors[ours]), hf_weight(model, theirs), atol=1e-3)
    # Llama 3 rope scaling (factor 32, low 1, high 4, original context 8192), head_dim 16:
    # frequency i turns at 500000^(-2i/16); wavelengths under 8192/4 keep it (divisor 1),
    # those over 8192/1 are divided by 32. i = 0 (wavelength 2pi) and i = 7 (~2.9e5) are those.
    freqs = values(tensors["rope_freqs.weight"])
    assert freqs.shape == (8,) and freqs[0] == pytest.approx(1.0) and freqs[7] == pytest.approx(32)


def test_q8_0_matches_the_weights_within_a_block_step(exported):
    model, _, _, files = exported["llama"]
    result, reader = files["q8_0"]
    assert result["bytes"] < 0.7 * files["f16"][0]["bytes"]
    assert field(reader, "general.file_type") == 7  # MOSTLY_Q8_0
    tensors = tensors_of(reader)
    for name, t in tensors.items():
        assert t.tensor_type == (F32 if len(t.shape) == 1 else Q8_0), name
    for ours, theirs, heads in (
        ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 4),
        ("blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight", None),
        ("token_embd.weight", "model.embed_tokens.weight", None),
    ):
        want = hf_weight(model, theirs)
        want = _pairs(want, heads) if heads else want
        got = values(tensors[ours])
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
    tensors = tensors_of(reader)
    assert field(reader, "general.architecture") == "qwen2"
    assert field(reader, "qwen2.rope.freq_base") == pytest.approx(1e6)
    assert field(reader, "qwen2.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    assert field(reader, "qwen2.context_length") == 32768
    assert "output.weight" not in tensors and "rope_freqs.weight" not in tensors  # tied
    for part in ("q", "k", "v"):
        bias = tensors[f"blk.0.attn_{part}.bias"]
        assert bias.tensor_type == F32
        hf = hf_weight(model, f"model.layers.0.self_attn.{part}_proj.bias")
        np.testing.assert_allclose(values(bias), hf, rtol=0, atol=0)
    q = hf_weight(model, "model.layers.0.self_attn.q_proj.weight")  # llama.cpp's qwen2 ropes as HF
    np.testing.assert_allclose(values(tensors["blk.0.attn_q.weight"]), q, atol=1e-3)
    assert field(reader, "tokenizer.ggml.pre") == "qwen2"
    ids = tok.convert_tokens_to_ids
    assert field(reader, "tokenizer.ggml.eos_token_id") == ids("<|im_end|>") == 4002
    assert field(reader, "tokenizer.ggml.bos_token_id") == ids("<|endoftext|>") == 4000
    assert field(reader, "tokenizer.ggml.padding_token_id") == 4000
    assert field(reader, "tokenizer.ggml.add_bos_token") is False
    types = field(reader, "tokenizer.ggml.token_type")
    assert types[ids("<tool_call>")] == TokenType.USER_DEFINED  # added, not special
    q8 = tensors_of(files["q8_0"][1])["blk.0.attn_q.bias"]
    assert q8.tensor_type == F32  # vectors stay float32 in q8_0 files


def test_sentencepiece_vocabulary(exported):
    model, tok, _, files = exported["spm"]
    reader = files["f16"][1]
    assert field(reader, "tokenizer.ggml.model") == "llama"
    assert field(reader, "tokenizer.ggml.add_space_prefix") is True
    assert field(reader, "tokenizer.ggml.add_bos_token") is True
    assert field(reader, "tokenizer.ggml.bos_token_id") == 1
    assert field(reader, "tokenizer.ggml.eos_token_id") == 2
    types = field(reader, "tokenizer.ggml.token_type")
    assert types[0] == TokenType.UNKNOWN and types[1] == types[2] == TokenType.CONTROL
    assert set(types[3:259]) == {TokenType.BYTE} and types[259] == TokenType.NORMAL
    tokens, scores = (
        field(reader, "tokenizer.ggml.tokens"),
        field(reader, "tokenizer.ggml.scores"),
    )
    assert tokens == tok.convert_ids_to_tokens(list(range(len(tok))))
    # A merged piece scores minus its merge's rank (1-based): the first merge scores -1.
    import json

    first = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"][0]
    left, right = first.split(" ") if isinstance(first, str) else first
    assert scores[tokens.index(left + right)] == -1.0
    tensors = tensors_of(reader)
    assert "output.weight" in tensors  # not tied
    np.testing.assert_allclose(
        values(tensors["output.weight"]), hf_weight(model, "lm_head.weight"), atol=1e-3
    )


def test_gpt2_and_smaug_pre_tokenizers_are_recognised(exported):
    import json

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from tests.support.gguf_models import small_shape

    tok = shapes.build_tokenizer(small_shape("qwen2.5-0.5b-shaped"))  # ByteLevel's own regex
    assert read_vocab(tok, len(tok) + 32).pre == "gpt-2"
    # Llama 3's regex with the merges always applied: llama.cpp's "smaug-bpe", not
    # "llama-bpe" (which takes a word that is a whole token as it is).
    llama_tok = exported["llama"][1]
    state = json.loads(llama_tok.backend_tokenizer.to_str())
    state["model"]["ignore_merges"] = False
    llama_tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)))
    assert read_vocab(llama_tok, len(llama_tok) + 32).pre == "smaug-bpe"


TEXTS = [  # tokenized by both; the demo's alphabet has no tab, é, € or 中 (transformers reads
    # them as <|unk|>, llama.cpp drops them) and it reads a double newline as <|unk|>
    "Hello world! I'm here, DON'T we've 12345 apples + 7 = 12352.\n    def f(x): return x**2",
    " leading space and trailing   ",
    "<think>7 * 6 is 42</think><answer>42</answer>",
    "a\n\n\tb é€中 3.14159",
    " w17 w3999 were",  # spelled like shapes.py's filler entries (" w" and digits: split)
]


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
            llm = llama_model(llama_cpp, path, logits_all=True)
            texts = [*TEXTS[:3], TEXTS[4]] if kind == "demo" else TEXTS
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
