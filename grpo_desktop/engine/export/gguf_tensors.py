"""The tensors of a saved Llama or Qwen2 model, renamed, reordered and typed for a GGUF file.

Hugging Face's names (`model.layers.3.self_attn.q_proj.weight`) become llama.cpp's
(`blk.3.attn_q.weight`), spelled with the `gguf` package's own name table; the rows of Llama's q
and k projections are reordered for llama.cpp's rotary layout (`rotary_to_pairs`); Llama 3's
rope scaling becomes the `rope_freqs` tensor; vectors stay float32 and matrices become float16
or q8_0 (`plan_tensors`). Tensors are read one at a time from the safetensors files, so an export
holds one float32 tensor in memory, not the model.

Not here: the vocabulary (export/gguf_vocab.py) and the file itself (export/gguf.py).
Try it: the example in export/gguf.py.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, MODEL_TENSOR, TENSOR_NAMES, GGMLQuantizationType

from grpo_desktop.engine.errors import ModelError

T = MODEL_TENSOR
_TOP = {
    "model.embed_tokens.weight": (T.TOKEN_EMBD, "weight"),
    "model.norm.weight": (T.OUTPUT_NORM, "weight"),
    "lm_head.weight": (T.OUTPUT, "weight"),
}
_LAYER = {
    "input_layernorm": T.ATTN_NORM,
    "self_attn.q_proj": T.ATTN_Q,
    "self_attn.k_proj": T.ATTN_K,
    "self_attn.v_proj": T.ATTN_V,
    "self_attn.o_proj": T.ATTN_OUT,
    "post_attention_layernorm": T.FFN_NORM,
    "mlp.gate_proj": T.FFN_GATE,
    "mlp.up_proj": T.FFN_UP,
    "mlp.down_proj": T.FFN_DOWN,
}
_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)")
QUANT_TYPES = {"f16": GGMLQuantizationType.F16, "q8_0": GGMLQuantizationType.Q8_0}


@dataclass
class PlannedTensor:
    name: str  # the GGUF name
    shape: tuple[int, ...]  # numpy order: (rows, columns)
    qtype: GGMLQuantizationType
    load: Callable[[], np.ndarray]  # float32, reordered

    @property
    def nbytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.qtype]
        elements = int(np.prod(self.shape))
        return elements // block * size

    def data(self) -> np.ndarray:
        """The tensor as it is written: float32, float16, or q8_0 bytes (rows, blocks*34)."""
        from gguf.quants import quantize

        array = self.load()
        if self.qtype == GGMLQuantizationType.F32:
            return np.ascontiguousarray(array, dtype=np.float32)
        return quantize(np.ascontiguousarray(array, dtype=np.float32), self.qtype)


def gguf_name(hf_name: str) -> str | None:
    """llama.cpp's name for a Hugging Face tensor name; None for one that is not a weight
    (a stored rotary `inv_freq`). Unknown names raise ModelError."""
    if hf_name in _TOP:
        tensor, suffix = _TOP[hf_name]
        return f"{TENSOR_NAMES[tensor]}.{suffix}"
    if hf_name.endswith("rotary_emb.inv_freq"):
        return None
    match = _LAYER_NAME.fullmatch(hf_name)
    if match and match.group(2) in _LAYER:
        base = TENSOR_NAMES[_LAYER[match.group(2)]].format(bid=int(match.group(1)))
        return f"{base}.{match.group(3)}"
    raise ModelError(
        f"The model has a tensor GGUF export does not know: {hf_name}. Only the standard "
        "Llama and Qwen2 layouts (LlamaForCausalLM, Qwen2ForCausalLM) are supported."
    )


def rotary_to_pairs(array: np.ndarray, heads: int) -> np.ndarray:
    """Reorder the rows of each head from Hugging Face's half-split rotary layout to
    llama.cpp's neighbouring pairs: head row j (first half) -> 2j, row d/2 + j -> 2j + 1.

    Hugging Face rotates dimension j with j + d/2; llama.cpp's `llama` architecture rotates 2j
    with 2j + 1, so q and k (and their biases) are reordered for it. llama.cpp runs `qwen2`
    with the half-split ("NeoX") rope, as Hugging Face does, so Qwen2's tensors keep their
    order."""
    rows = array.shape[0]
    half = rows // heads // 2
    split = array.reshape(heads, 2, half, *array.shape[1:])  # (heads, 2, d/2, ...)
    return split.swapaxes(1, 2).reshape(array.shape)  # (heads, d/2, 2, ...) -> rows


def _safetensors_files(model_dir: str) -> list[str]:
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(model_dir, s) for s in shards]
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return [single]
    raise ModelError(
        f"{model_dir} has no model.safetensors (or model.safetensors.index.json): GGUF export "
        "reads a model saved with save_pretrained in safetensors form, such as a `merged` export."
    )


def _loader(path: str, hf_name: str, heads: int | None) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from safetensors import safe_open

        with safe_open(path, framework="pt") as f:
            array = f.get_tensor(hf_name).float().numpy()  # bf16 has no numpy type
        return rotary_to_pairs(array, heads) if heads else array

    return load


def plan_tensors(model_dir: str, arch: str, facts: dict, outtype: str) -> list[PlannedTensor]:
    """Every tensor to write, in llama.cpp's order (embedding, layers, norm, output).

    Types: vectors (norms, biases) stay float32; matrices are float16, or q8_0 (blocks of 32,
    the `gguf` package's quantizer) where their rows divide into blocks. Tied embeddings
    (Qwen2.5-0.5B, the test models) write no `output.weight`: llama.cpp then uses `token_embd`
    for the output as well."""
    from safetensors import safe_open

    if outtype not in QUANT_TYPES:
        raise ModelError(f"outtype must be one of {', '.join(QUANT_TYPES)}, not {outtype!r}.")
    matrix_type = QUANT_TYPES[outtype]
    planned: list[PlannedTensor] = []
    for path in _safetensors_files(model_dir):
        with safe_open(path, framework="pt") as f:
            for hf_name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                name = gguf_name(hf_name)
                if name is None or (name == "output.weight" and facts["tied"]):
                    continue
                shape = tuple(f.get_slice(hf_name).get_shape())
                heads = None
                if arch == "llama" and ".attn_q." in name:
                    heads = facts["heads"]
                elif arch == "llama" and ".attn_k." in name:
                    heads = facts["kv_heads"]
                if len(shape) == 1:
                    qtype = GGMLQuantizationType.F32
                elif matrix_type == GGMLQuantizationType.Q8_0 and shape[-1] % 32:
                    qtype = GGMLQuantizationType.F16  # rows that do not divide into blocks
                else:
                    qtype = matrix_type
                planned.append(PlannedTensor(name, shape, qtype, _loader(path, hf_name, heads)))
    names = {t.name for t in planned}
    if not facts["tied"] and "output.weight" not in names:
        raise ModelError(
            f"{model_dir} has no lm_head.weight although config.json says the embeddings are "
            "not tied: the saved model is incomplete. Export it again."
        )
    freqs = facts.get("rope_freqs")
    if freqs is not None:
        planned.append(
            PlannedTensor("rope_freqs.weight", freqs.shape, GGMLQuantizationType.F32, lambda: freqs)
        )
    return sorted(planned, key=_order)


def _order(t: PlannedTensor) -> tuple:
    match = re.match(r"blk\.(\d+)\.", t.name)
    if match:
        return (1, int(match.group(1)), t.name)
    return ({"token_embd.weight": 0, "rope_freqs.weight": 0}.get(t.name, 2), 0, t.name)


def llama3_rope_freqs(config) -> np.ndarray | None:
    """Llama 3's rope scaling as llama.cpp's per-frequency divisors (head_dim / 2,): how much
    slower each frequency turns than the unscaled one; None when the config has no llama3 rope
    scaling. Uses transformers' own rope functions."""
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not params or params.get("rope_type", params.get("type")) != "llama3":
        return None
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, torch.device("cpu"))  # (head_dim/2,)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    theta = rope_theta(config)
    plain = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
    return (plain / scaled).numpy().astype(np.float32)


def rope_theta(config) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    return float(theta if theta is not None else 10000.0)
