"""What a GGUF file holds, read from its header alone: architecture, name, quantization, size.

Ollama, LM Studio and llama.cpp keep models as GGUF files (Ollama's blobs have no suffix: a file
is recognised by its first bytes, b"GGUF"). The Model panel lists them and the estimate sizes
them without loading anything, so only the header is read, with `struct`: the key-value metadata
and the tensor table, never the weights, and of the vocabulary only the EOS token (gguf's
GGUFReader turns every token into numpy arrays: 2 s for SmolLM2's 49,152 on a busy core).

Torch-free (pyproject's import-linter contract): the window calls this on the GUI thread.
`supported_architectures` reads transformers' GGUF table, which loads no torch (checked), by
module name, so the contract's static check does not count transformers as imported here.
Importing a GGUF as a trainable folder is gguf_import.py. Try it:
    python -m grpo_desktop.engine.models.gguf_info path/to/model.gguf
"""

from __future__ import annotations

import functools
import importlib
import os
import struct
import sys
from dataclasses import dataclass

from grpo_desktop.engine.errors import ModelError

MAGIC = b"GGUF"

# GGUF metadata value types (the file format's numbering) -> struct format of a scalar.
_SCALARS = {
    0: "<B",  # uint8
    1: "<b",  # int8
    2: "<H",  # uint16
    3: "<h",  # int16
    4: "<I",  # uint32
    5: "<i",  # int32
    6: "<f",  # float32
    7: "<?",  # bool
    10: "<Q",  # uint64
    11: "<q",  # int64
    12: "<d",  # float64
}
_STRING, _ARRAY = 8, 9
# Strings longer than this, or arrays longer than this, mean a corrupt header, not a model.
_MAX_STRING = 64 << 20
_MAX_COUNT = 1 << 31

# ggml's file types (general.file_type, llama.cpp's `enum llama_ftype`) that are not simply
# the name of a tensor type; the others are named after the tensor type most weights use.
_FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4",
}

# GGUF architecture names transformers' loader knows under another spelling.
_ARCH_ALIASES = {
    "qwen2moe": "qwen2_moe",
    "qwen3moe": "qwen3_moe",
    "gpt-oss": "gpt_oss",
    "minimax-m2": "minimax_m2",
    "t5encoder": "t5",
}


@dataclass(frozen=True)
class GgufInfo:
    path: str
    architecture: str  # general.architecture: "llama", "qwen2", ...
    name: str  # general.name, else the file's name without .gguf
    quantization: str  # "Q4_1", "Q8_0", "F16", ... (general.file_type, else the tensors' types)
    size_bytes: int  # the file's size
    parameters: int | None  # weights in the tensor table (tied embeddings counted once)
    context_length: int | None  # <architecture>.context_length
    chat_template: str | None  # tokenizer.chat_template
    eos_token: str | None  # the token at tokenizer.ggml.eos_token_id
    tensor_types: tuple[str, ...] = ()  # the ggml types of the tensors, each once (sorted)

    @property
    def is_quantized(self) -> bool:
        return self.quantization not in ("F32", "F16", "BF16")


def is_gguf_file(path: str) -> bool:
    """True for a readable file whose first 4 bytes are b"GGUF" (Ollama's blobs have no
    suffix)."""
    try:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


class _Truncated(Exception):
    pass


class _Header:
    """Sequential reads over the header, failing with _Truncated at the end of the file."""

    def __init__(self, fh) -> None:
        self.fh = fh

    def take(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise _Truncated
        return data

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> bytes:
        n = self.scalar("<Q")
        if n > _MAX_STRING:
            raise ValueError(f"a string of {n} bytes")
        return self.take(n)

    def skip_string(self) -> None:
        n = self.scalar("<Q")
        if n > _MAX_STRING:
            raise ValueError(f"a string of {n} bytes")
        self.fh.seek(n, os.SEEK_CUR)

    def value(self, kind: int, keep_strings: bool = True):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string() if keep_strings else self.skip_string()
        if kind == _ARRAY:
            item = self.scalar("<I")
            count = self.scalar("<Q")
            if count > _MAX_COUNT or (item not in _SCALARS and item not in (_STRING, _ARRAY)):
                raise ValueError(f"an array of {count} items of type {item}")
            if item in _SCALARS:  # fixed size: keep short ones (a list of EOS ids), skip long ones
                width = struct.calcsize(_SCALARS[item])
                if count > 64:
                    self.fh.seek(width * count, os.SEEK_CUR)
                    return None
                return [self.scalar(_SCALARS[item]) for _ in range(count)]
            return [self.value(item, keep_strings) for _ in range(count)]
        raise ValueError(f"a value of unknown type {kind}")


def _text(value) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return None


def _int(value) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _tensor_type_name(kind: int) -> str:
    try:
        from gguf import GGMLQuantizationType

        return GGMLQuantizationType(kind).name
    except (ImportError, ValueError):
        return f"type {kind}"


def _tensor_bytes(kind: int, count: int) -> int:
    """Bytes a tensor of `count` weights of ggml type `kind` takes (0 when gguf does not know
    the type, so the truncation check cannot count it)."""
    try:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ImportError, ValueError, KeyError):
        return 0
    return count // block * size


def _read(path: str) -> tuple[GgufInfo, dict]:
    """The file's GgufInfo and its header's small values (with "tensor_names" and
    "token_count" added)."""
    size = os.path.getsize(path)
    with open(path, "rb", buffering=1 << 20) as fh:
        header = _Header(fh)
        if header.take(4) != MAGIC:
            raise ModelError(
                f"{path} is not a GGUF file (it does not begin with 'GGUF'). Choose a .gguf model "
                "file (from Ollama, LM Studio or llama.cpp) or a Hugging Face model folder."
            )
        version = header.scalar("<I")
        if version not in (2, 3):
            raise ModelError(
                f"{path} is a GGUF file of version {version}; versions 2 and 3 are read (every "
                "file llama.cpp has written since 2023). Convert it again with a current llama.cpp."
            )
        n_tensors, n_kv = header.scalar("<Q"), header.scalar("<Q")
        if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
            raise ValueError(f"{n_tensors} tensors and {n_kv} keys")
        meta: dict[str, object] = {}
        eos_id: int | None = None
        tokens_at: int | None = None
        for _ in range(n_kv):
            key = header.string().decode("utf-8", errors="replace")
            kind = header.scalar("<I")
            if key == "tokenizer.ggml.tokens" and kind == _ARRAY:
                tokens_at = fh.tell()
                header.value(kind, keep_strings=False)
                continue
            keep = not key.startswith("tokenizer.ggml.") or key.endswith("_id")
            meta[key] = header.value(kind, keep_strings=keep)
        eos_id = _int(meta.get("tokenizer.ggml.eos_token_id"))
        types: dict[str, int] = {}
        parameters = data_end = 0
        names = []
        for _ in range(n_tensors):
            names.append(header.string().decode("utf-8", errors="replace"))
            n_dims = header.scalar("<I")
            if n_dims > 8:
                raise ValueError(f"a tensor of {n_dims} dimensions")
            count = 1
            for _ in range(n_dims):
                count *= header.scalar("<Q")
            kind = header.scalar("<I")
            offset = header.scalar("<Q")  # in the data section
            if not names[-1].startswith("rope_"):  # rope_freqs: a table of constants, not weights
                parameters += count
            data_end = max(data_end, offset + _tensor_bytes(kind, count))
            name = _tensor_type_name(kind)
            types[name] = types.get(name, 0) + count
        data_start = fh.tell()
        eos_token = None
        if eos_id is not None and tokens_at is not None:
            fh.seek(tokens_at)
            header.scalar("<I")
            count = header.scalar("<Q")
            meta["token_count"] = count
            if 0 <= eos_id < count:
                for _ in range(eos_id):
                    header.skip_string()
                eos_token = _text(header.string())
    alignment = _int(meta.get("general.alignment")) or 32
    if n_tensors and -(-data_start // alignment) * alignment + data_end > size:
        raise _Truncated
    arch = _text(meta.get("general.architecture")) or ""
    if not arch:
        raise ModelError(
            f"{path} is a GGUF file without general.architecture, so it is not a model llama.cpp "
            "or transformers can load. Choose the model's .gguf file."
        )
    file_type = _int(meta.get("general.file_type"))
    quantization = _FILE_TYPES.get(file_type) if file_type is not None else None
    if quantization is None:
        quantization = max(types, key=types.get) if types else "unknown"
    name = _text(meta.get("general.name")) or os.path.basename(path).removesuffix(".gguf")
    meta["tensor_names"] = names
    info = GgufInfo(
        path=os.path.abspath(path),
        architecture=arch,
        name=name,
        quantization=quantization,
        size_bytes=size,
        parameters=parameters if n_tensors else None,
        context_length=_int(meta.get(f"{arch}.context_length")),
        chat_template=_text(meta.get("tokenizer.chat_template")),
        eos_token=eos_token,
        tensor_types=tuple(sorted(types)),
    )
    return info, meta


def read_gguf_info(path: str) -> GgufInfo:
    """The header of the GGUF file at `path`. Raises ModelError for a file that is missing, not a
    GGUF, truncated or corrupt, saying which."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise ModelError(f"GGUF file not found: {path}. Check the path.")
    return _read_checked(path)[0]


def _read_checked(path: str) -> tuple[GgufInfo, dict]:
    try:
        return _read(path)
    except _Truncated:
        raise ModelError(
            f"{path} is shorter than its GGUF header says: the file is truncated (an interrupted download "
            "or copy). Download or copy it again."
        ) from None
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        raise ModelError(
            f"{path} begins like a GGUF file but its header is corrupt ({exc}). Download or copy "
            "it again."
        ) from exc
    except OSError as exc:
        raise ModelError(f"Could not read {path}: {exc.strerror or exc}.") from exc


# Hugging Face config keys and the GGUF keys (after "<architecture>.") they are read from.
_CONFIG_KEYS = {
    "max_position_embeddings": "context_length",
    "hidden_size": "embedding_length",
    "num_hidden_layers": "block_count",
    "intermediate_size": "feed_forward_length",
    "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv",
    "head_dim": "attention.key_length",
    "rope_theta": "rope.freq_base",
    "rms_norm_eps": "attention.layer_norm_rms_epsilon",
    "vocab_size": "vocab_size",
}


def gguf_model_config(path: str) -> dict:
    """A Hugging Face config.json's sizes, read from the GGUF header at `path` without importing
    it: what "Will it fit?" needs (model_type, hidden_size, layers, heads, vocabulary, whether
    the embeddings are tied: no separate output.weight). Raises what read_gguf_info raises."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise ModelError(f"GGUF file not found: {path}. Check the path.")
    info, meta = _read_checked(path)
    arch = info.architecture
    config: dict = {"model_type": canonical_architecture(arch)}
    for key, gguf_key in _CONFIG_KEYS.items():
        value = meta.get(f"{arch}.{gguf_key}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            config[key] = value
    if "vocab_size" not in config and isinstance(meta.get("token_count"), int):
        config["vocab_size"] = meta["token_count"]
    config["tie_word_embeddings"] = "output.weight" not in meta["tensor_names"]
    for key in ("bos_token_id", "eos_token_id"):
        value = _int(meta.get(f"tokenizer.ggml.{key}"))
        if value is not None:
            config[key] = value
    return config


def canonical_architecture(arch: str) -> str:
    """The name transformers' GGUF loader uses for a GGUF architecture ('qwen2moe' ->
    'qwen2_moe')."""
    return _ARCH_ALIASES.get(arch, arch)


@functools.cache
def _legacy_architectures() -> tuple[str, ...]:
    try:  # by name: transformers' GGUF config table, which loads no torch (see the docstring)
        ggml = importlib.import_module("transformers.integrations.ggml")
    except ImportError:
        return ()
    return tuple(k for k in ggml.GGUF_CONFIG_MAPPING if k not in ("general", "tokenizer"))


def supported_architectures() -> tuple[str, ...]:
    """The GGUF architectures transformers' GGUF loader reads (sorted): its table of
    configurations, plus, once torch is loaded anyway (importing them loads it), the
    architectures of its newer block-keeping loader."""
    names = set(_legacy_architectures())
    if "torch" in sys.modules:
        try:
            newer = importlib.import_module(
                "transformers.integrations.gguf.gguf_conversion_mapping"
            )
            names.update(newer.GGUF_ARCHS)
        except (ImportError, AttributeError):
            pass
    return tuple(sorted(names))


def is_supported_architecture(arch: str) -> bool:
    names = supported_architectures()
    return arch in names or canonical_architecture(arch) in names


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(read_gguf_info(arg))
