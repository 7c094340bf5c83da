"""GGUF export: a saved Hugging Face model folder as one file for llama.cpp, Ollama, LM Studio.

`write_gguf(model_dir, out_dir, outtype="f16"|"q8_0")` reads a folder written by
`save_pretrained` (the `merged` export writes exactly that) and writes
`out_dir/<name>-<outtype>.gguf` (a name ending in the format, as the export folder's default
'…-gguf-f16' does, is not given the outtype twice) with the `gguf` package (maintained by llama.cpp: its writer, its
constants, its q8_0 quantizer), plus an Ollama `Modelfile` next to it (export/modelfile.py). The
tensors are prepared by export/gguf_tensors.py, the vocabulary by export/gguf_vocab.py.

Supported: `LlamaForCausalLM` and `Qwen2ForCausalLM` with a byte-level BPE or SentencePiece
tokenizer, or a one-token-per-character tokenizer (the built-in demo model's). Anything else
(other architectures or tokenizers, bitsandbytes folders, rope scalings other than linear, yarn
and Llama 3's, output types other than f16 and q8_0) raises a `ModelError` that says so. Try it:
    python -m grpo_desktop.engine.models.shapes /tmp/qwen --shape qwen2.5-0.5b-shaped
    python -c "from grpo_desktop.engine.export.gguf import write_gguf; print(write_gguf('/tmp/qwen', '/tmp/qwen-gguf', outtype='q8_0'))"
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from collections.abc import Callable

from grpo_desktop.engine.errors import ModelError, UserError

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
OUTTYPES = ("f16", "q8_0")

Progress = Callable[[float, str], None]  # (fraction done 0..1, what is being done)


def _read_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _architecture(model_dir: str, config: dict) -> str:
    names = config.get("architectures") or []
    for name in names:
        if name in ARCHITECTURES:
            if config.get("quantization_config"):
                method = config["quantization_config"].get("quant_method", "quantized")
                raise ModelError(
                    f"{model_dir} holds quantized weights ({method}): "
                    "GGUF export needs a full-precision model. Export it as `merged` first (a "
                    "4-bit base is de-quantized there), then to GGUF."
                )
            return ARCHITECTURES[name]
    found = ", ".join(names) or config.get("model_type") or "unknown"
    raise ModelError(
        f"GGUF export supports the Llama and Qwen2 architectures (LlamaForCausalLM, "
        f"Qwen2ForCausalLM); this model is {found}. Export it as `merged` or `adapter` instead."
    )


def _facts(config, arch: str) -> dict:
    """The hyperparameters GGUF metadata and the tensor plan need."""
    from grpo_desktop.engine.export.gguf_tensors import llama3_rope_freqs

    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return dict(
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        tied=bool(getattr(config, "tie_word_embeddings", False)),
        rope_freqs=llama3_rope_freqs(config) if arch == "llama" else None,
    )


def _rope_scaling(writer, config) -> None:
    from gguf import RopeScalingType

    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    kind = (params or {}).get("rope_type", (params or {}).get("type", "default"))
    if kind in ("default", None, "llama3"):  # llama3: the rope_freqs tensor
        return
    if kind == "linear":
        writer.add_rope_scaling_type(RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(params["factor"]))
    elif kind == "yarn":
        writer.add_rope_scaling_type(RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(params["factor"]))
        original = params.get("original_max_position_embeddings")
        if original:
            writer.add_rope_scaling_orig_ctx_len(int(original))
    else:
        raise ModelError(
            f"The model uses {kind!r} rope scaling, which GGUF export does not write (it "
            "writes none, linear, yarn and Llama 3's). Export it as `merged` instead."
        )


def _stops_and_eos(tok, vocab, form) -> tuple[int | None, list[str]]:
    """The EOS to write (the chat's end token where it is one of the EOS ids) and every stop
    text for the Modelfile (that token first, then the other EOS tokens)."""
    end_id = None
    if form is not None and form.end_text():
        candidate = tok.convert_tokens_to_ids(form.end_text())
        if isinstance(candidate, int) and candidate != tok.unk_token_id:
            end_id = candidate
    ids = list(vocab.eos_ids)
    eos = end_id if end_id is not None and (end_id in ids or not ids) else (ids or [None])[0]
    ordered = ([end_id] if end_id is not None else []) + [i for i in ids if i != end_id]
    stops = []
    for token_id in ordered:
        text = vocab.tokens[token_id]
        if text not in stops:
            stops.append(text)
    return eos, stops


def _metadata(writer, config, arch: str, facts: dict, vocab, tok, eos, name: str, outtype: str):
    from gguf import GGML_QUANT_VERSION, LlamaFileType

    from grpo_desktop.engine.export.gguf_tensors import rope_theta

    writer.add_name(name)
    writer.add_file_type(
        LlamaFileType.MOSTLY_Q8_0 if outtype == "q8_0" else LlamaFileType.MOSTLY_F16
    )
    writer.add_quantization_version(GGML_QUANT_VERSION)
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_block_count(int(config.num_hidden_layers))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(int(facts["heads"]))
    writer.add_head_count_kv(int(facts["kv_heads"]))
    writer.add_rope_dimension_count(int(facts["head_dim"]))
    if facts["head_dim"] * facts["heads"] != config.hidden_size:
        writer.add_key_length(int(facts["head_dim"]))
        writer.add_value_length(int(facts["head_dim"]))
    writer.add_rope_freq_base(rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(len(vocab.tokens))
    _rope_scaling(writer, config)

    writer.add_tokenizer_model(vocab.model)
    writer.add_tokenizer_pre(vocab.pre or "default")
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    if vocab.scores is not None:
        writer.add_token_scores(vocab.scores)
        writer.add_add_space_prefix(vocab.add_space_prefix)
    if vocab.merges:
        writer.add_token_merges(vocab.merges)
    # Without a BOS id llama.cpp takes token 11 as BOS (a character of the demo's vocabulary):
    # a tokenizer without one gets its pad (or EOS) token there, never added (add_bos false).
    bos = next((i for i in (vocab.bos_id, vocab.pad_id, eos) if i is not None), None)
    for value, add in (
        (bos, writer.add_bos_token_id),
        (eos, writer.add_eos_token_id),
        (eos, writer.add_eot_token_id),
        (vocab.unk_id, writer.add_unk_token_id),
        (vocab.pad_id, writer.add_pad_token_id),
    ):
        if value is not None:
            add(int(value))
    writer.add_add_bos_token(vocab.add_bos)
    writer.add_add_eos_token(vocab.add_eos)
    if isinstance(getattr(tok, "chat_template", None), str):
        writer.add_chat_template(tok.chat_template)


def _file_name(name: str, outtype: str) -> str:
    """'<name>-<outtype>.gguf'; a name that already ends in the format ('demo-step40-gguf-f16',
    the export folder's default name) loses that ending, so the outtype is said once."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"
    ending = re.compile(rf"[-_.](?:gguf[-_.])?{re.escape(outtype)}$|[-_.]gguf$", re.I)
    stem = ending.sub("", safe).strip("-.")
    stem = ending.sub("", stem).strip("-.")  # 'x-f16-gguf' → 'x-f16' → 'x'
    return f"{stem or safe}-{outtype}.gguf"


def _check_space(out_dir: str, needed: int) -> None:
    free = shutil.disk_usage(out_dir).free
    if free < needed + 16 * 2**20:
        raise UserError(
            f"Not enough disk space in {out_dir}: the GGUF file needs about "
            f"{needed / 2**20:,.0f} MiB and {free / 2**20:,.0f} MiB are free. Free some space "
            "or export to another disk."
        )


def write_gguf(
    model_dir: str,
    out_dir: str,
    *,
    outtype: str = "f16",
    progress: Progress | None = None,
    name: str | None = None,
) -> dict:
    """Write `model_dir` as `out_dir/<name>-<outtype>.gguf` and an Ollama `Modelfile`.

    `name` defaults to the folder's name; `progress(fraction, message)` is called as tensors
    are written. Returns {"path", "bytes", "tensors", "outtype", "seconds", "modelfile"}.
    Raises `ModelError` for what cannot be exported and `UserError` for a full disk."""
    from gguf import GGUFWriter
    from transformers import AutoConfig, AutoTokenizer

    from grpo_desktop.engine.export.gguf_tensors import plan_tensors
    from grpo_desktop.engine.export.gguf_vocab import read_vocab
    from grpo_desktop.engine.export.modelfile import chat_form, modelfile

    started = time.perf_counter()
    report = progress or (lambda fraction, message: None)
    if outtype not in OUTTYPES:
        raise ModelError(f"GGUF outtype must be one of {', '.join(OUTTYPES)}, not {outtype!r}.")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise ModelError(f"{model_dir} is not a saved model folder (it has no config.json).")
    arch = _architecture(model_dir, _read_json(os.path.join(model_dir, "config.json")))
    report(0.0, "reading the model's config and tokenizer")
    config = AutoConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    generation = _read_json(os.path.join(model_dir, "generation_config.json"))
    facts = _facts(config, arch)
    vocab = read_vocab(tok, int(config.vocab_size), generation)
    form = chat_form(tok)
    eos, stops = _stops_and_eos(tok, vocab, form)
    tensors = plan_tensors(model_dir, arch, facts, outtype)

    os.makedirs(out_dir, exist_ok=True)
    name = name or os.path.basename(os.path.normpath(model_dir)) or "model"
    path = os.path.join(out_dir, _file_name(name, outtype))
    total = sum(t.nbytes for t in tensors)
    # Metadata: each token and merge as a length-prefixed string, plus a type and a score.
    strings = [*vocab.tokens, *vocab.merges]
    metadata = sum(len(x.encode("utf-8")) + 8 for x in strings) + 8 * len(vocab.tokens)
    _check_space(out_dir, total + metadata)
    partial = path + ".part"
    writer = GGUFWriter(partial, arch)
    try:
        _metadata(writer, config, arch, facts, vocab, tok, eos, name, outtype)
        for t in tensors:
            writer.add_tensor_info(t.name, t.shape, _np_dtype(t.qtype), t.nbytes, raw_dtype=t.qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        done = 0
        for t in tensors:
            report(done / max(total, 1), f"writing {t.name}")
            writer.write_tensor_data(t.data())
            done += t.nbytes
        writer.close()
        os.replace(partial, path)
    except BaseException as exc:  # a full disk, a cancel raised by `progress`: no .part left
        writer.close()
        if os.path.exists(partial):
            os.remove(partial)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(
                f"The disk holding {out_dir} is full: the GGUF file needs about "
                f"{total / 2**20:,.0f} MiB. Free some space or export to another disk."
            ) from None
        raise
    text = modelfile(
        os.path.basename(path), tok, stops, generation, int(config.max_position_embeddings),
        vocab.add_bos, form,
    )  # fmt: skip
    modelfile_path = os.path.join(out_dir, "Modelfile")
    with open(modelfile_path, "w", encoding="utf-8") as f:
        f.write(text)
    report(1.0, "done")
    return {
        "path": path,
        "bytes": os.path.getsize(path),
        "tensors": len(tensors),
        "outtype": outtype,
        "seconds": round(time.perf_counter() - started, 3),
        "modelfile": modelfile_path,
    }


def _np_dtype(qtype):
    """The numpy dtype GGUFWriter.add_tensor_info expects for a tensor of `qtype`."""
    import numpy as np
    from gguf import GGMLQuantizationType

    return {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}.get(
        qtype, np.float32
    )
