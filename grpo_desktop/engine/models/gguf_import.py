"""Import a GGUF file (Ollama, LM Studio, llama.cpp) once as a trainable Hugging Face model folder.

Training needs plain weights; a GGUF holds them quantized. `import_gguf` dequantizes once through
transformers' GGUF loader into a safetensors folder in the model cache ($GRPO_DESKTOP_MODEL_CACHE,
else ~/.cache/grpo-desktop/imported), keyed by the file's path, size, mtime and the dtype, so the
next run, Try or export reuses it. It is written under a temporary name and renamed when whole
(a crash leaves nothing that counts as imported); `grpo_import.json` says where it came from.
transformers refuses `save_pretrained` on a GGUF-loaded model (the quantizer's marks stay though
the weights are plain tensors): the marks are removed first. Memory and disk are checked before
(a 7B in float32 is 28 GB: import in the dtype the run trains in). A 4-bit file gives its 4-bit
values, a little below the original model: `source_note` says so in the run's log. The header
alone is gguf_info.py (torch-free). Try it:
    python -m grpo_desktop.engine.models.gguf_import path/to/model.gguf [--dtype bfloat16]
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

from grpo_desktop.engine.errors import ModelError, UserError
from grpo_desktop.engine.events import LogMessage
from grpo_desktop.engine.models.gguf_info import (
    GgufInfo,
    canonical_architecture,
    is_gguf_file,
    read_gguf_info,
    supported_architectures,
)
from grpo_desktop.engine.ops.host_memory import (
    collect_cycles,
    host_available_bytes,
    release_free_heap,
)
from grpo_desktop.engine.units import size_text

RECORD = "grpo_import.json"
CACHE_ENV = "GRPO_DESKTOP_MODEL_CACHE"
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
Progress = Callable[[float, str], None]

# Bits per weight of the quantizations, for the note on what dequantized weights are.
_BITS = {"Q2": 2, "IQ1": 1, "IQ2": 2, "TQ1": 2, "TQ2": 2, "Q3": 3, "IQ3": 3, "Q4": 4, "IQ4": 4}
_BITS |= {"MXFP4": 4, "NVFP4": 4, "Q5": 5, "Q6": 6, "Q8": 8}
_default_progress: Progress | None = None


def set_default_progress(progress: Progress | None) -> None:
    """Where imports that nobody passed a callback to report (the CLI prints them on stderr)."""
    global _default_progress
    _default_progress = progress


def cache_root() -> str:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return os.path.join(base, "grpo-desktop", "imported")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:48] or "model"


def import_folder(path: str, dtype: str) -> str:
    """Where the import of the GGUF at `path` in `dtype` lives (or will)."""
    real = os.path.realpath(os.path.expanduser(path))
    st = os.stat(real)
    key = f"{real}|{st.st_size}|{st.st_mtime_ns}|{dtype}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    stem = _slug(os.path.basename(real).removesuffix(".gguf"))
    return os.path.join(cache_root(), f"{stem}-{dtype}-{digest}")


def _is_complete(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, RECORD)) and os.path.isfile(
        os.path.join(folder, "config.json")
    )


def imported_folder(path: str, dtype: str | None = None) -> str | None:
    """The finished import of the GGUF at `path` (in `dtype`, or in any dtype, float32 first),
    None when there is none yet."""
    for name in [dtype] if dtype else list(DTYPES):
        try:
            folder = import_folder(path, name)
        except OSError:  # the file is gone
            return None
        if _is_complete(folder):
            return folder
    return None


def read_record(folder: str) -> dict | None:
    """grpo_import.json of an imported folder (where it came from), None for any other folder."""
    try:
        with open(os.path.join(folder, RECORD), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def quantization_bits(quantization: str) -> int | None:
    """Bits per weight of a GGUF quantization ('Q4_K_M' -> 4); None for F32, F16 and BF16."""
    for prefix in sorted(_BITS, key=len, reverse=True):
        if quantization.upper().startswith(prefix):
            return _BITS[prefix]
    return None


def source_note(record: dict) -> str:
    """The sentence the run's log gives an imported model: where from, and what 4 bits cost."""
    quant = str(record.get("quantization", ""))
    text = f"Model imported from {record.get('source')} ({quant}, {record.get('architecture')})"
    bits = quantization_bits(quant)
    if bits is not None:
        text += (
            f"; its weights were dequantized from {bits} bits, so it is a little below the "
            "original model (the same model's float weights, when you have them, train from a "
            "better start)"
        )
    return text + "."


@functools.cache
def _can_dequantize(type_name: str) -> bool:
    """Whether gguf's dequantizer (what transformers' GGUF loader calls) reads a tensor type:
    tried on one zero block."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    try:
        qtype = GGMLQuantizationType[type_name]
        _block, size = GGML_QUANT_SIZES[qtype]
        dequantize(np.zeros((1, size), dtype=np.uint8), qtype)
    except (KeyError, NotImplementedError, ValueError):
        return False
    return True


def check_supported(info: GgufInfo) -> None:
    """ModelError naming what is supported, for an architecture transformers' GGUF loader does
    not read or a tensor type it cannot dequantize."""
    names = supported_architectures()
    if info.architecture not in names and canonical_architecture(info.architecture) not in names:
        raise ModelError(
            f"{info.path} is a '{info.architecture}' model, an architecture transformers' GGUF "
            f"loader cannot read. It reads: {', '.join(names)}. Use the model's Hugging Face "
            "folder (or hub id) instead, or a GGUF of a supported architecture."
        )
    unreadable = [t for t in info.tensor_types if not _can_dequantize(t)]
    if unreadable:
        readable = ", ".join(t.name for t in _readable_types())
        raise ModelError(
            f"{info.path} stores weights as {', '.join(unreadable)}, which gguf cannot "
            f"dequantize. Readable: {readable}. Use a file with another quantization (Q8_0 or "
            "Q4_K_M are common) or the model's Hugging Face folder."
        )


def _readable_types():
    from gguf import GGMLQuantizationType

    return [t for t in GGMLQuantizationType if _can_dequantize(t.name)]


def needed_bytes(info: GgufInfo, dtype: str) -> tuple[int, int]:
    """(memory, disk) an import takes: 1.5 times the weights in `dtype` (the model, and the
    loader's float32 tensors on the way) plus 600 MB for Python, torch and transformers, and on
    disk the weights plus the tokenizer. Measured on SmolLM2 (0.54 GB of float32 weights):
    peak RSS 1.25 GB in float32 (this says 1.44), 0.99 GB in bfloat16 (this says 1.03)."""
    weights = (info.parameters or info.size_bytes * 2) * DTYPES[dtype]
    return weights * 3 // 2 + (600 << 20), weights + (64 << 20)


def check_room(info: GgufInfo, dtype: str, folder: str) -> None:
    memory, disk = needed_bytes(info, dtype)
    free_memory = host_available_bytes()
    if free_memory is not None and free_memory < memory:
        smaller = " or import in bfloat16 (set the precision)" if dtype == "float32" else ""
        raise ModelError(
            f"Importing {info.name} ({info.parameters or 0:,} parameters) in {dtype} needs about "
            f"{size_text(memory)} of memory; {size_text(free_memory)} is free. Close other "
            f"programs{smaller}, or choose a smaller model."
        )
    os.makedirs(folder, exist_ok=True)
    free_disk = shutil.disk_usage(folder).free
    if free_disk < disk:
        raise ModelError(
            f"Importing {info.name} in {dtype} writes about {size_text(disk)} to {folder}; the "
            f"disk has {size_text(free_disk)} free. Free some space, or set {CACHE_ENV} to a "
            "folder on a disk with room."
        )


@contextlib.contextmanager
def _tensor_progress(report: Callable[[int, int], None]):
    """Each tensor transformers' legacy GGUF loader dequantizes, reported (instead of its tqdm
    bar on stderr): that is where an import spends its time."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)

    def counted(iterable, *args, **kwargs):
        items = list(iterable)
        for i, item in enumerate(items):
            yield item
            report(i + 1, len(items))

    gguf_utils.tqdm = counted
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _strip_quantizer(model) -> None:
    """Remove the GGUF quantizer's marks from a model whose weights are dequantized tensors, so
    save_pretrained saves it and the saved config does not ask for the GGUF loader again."""
    model.hf_quantizer = None
    for attr in ("is_quantized", "quantization_method"):
        if attr in vars(model):
            delattr(model, attr)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "is_quantized", False):
        model.is_quantized = False


def _gguf_link(path: str, scratch: str) -> tuple[str, str]:
    """(folder, file name) for from_pretrained's gguf_file: the file itself, or, for a file
    without the .gguf suffix (an Ollama blob), a link to it named model.gguf."""
    real = os.path.realpath(path)
    if real.endswith(".gguf"):
        return os.path.dirname(real), os.path.basename(real)
    link = os.path.join(scratch, "model.gguf")
    try:
        os.symlink(real, link)
    except OSError:
        shutil.copyfile(real, link)
    return scratch, "model.gguf"


class ImportStopped(UserError):
    """The import was stopped by its caller (`should_stop`); nothing of it was kept."""


class _Clock:
    """Progress with the time left, from how fast the fraction has grown; within a stage, at
    most one report per 5 % or 3 seconds (a model has hundreds of tensors). The stages'
    fractions are their shares of SmolLM2's import (2 busy cores, 19 s): tokenizer 15 %,
    configuration and model 65 %, dequantizing 5 %, saving 5 %."""

    def __init__(
        self, progress: Progress | None, should_stop: Callable[[], bool] | None = None
    ) -> None:
        self.progress, self.should_stop, self.t0 = progress, should_stop, time.monotonic()
        self.last = (-1.0, 0.0, "")  # fraction, time, stage of the last report

    def __call__(self, fraction: float, message: str) -> None:
        if self.should_stop is not None and self.should_stop():
            raise ImportStopped  # every call (each tensor read), not only the reported ones
        if self.progress is None:
            return
        now = time.monotonic()
        stage = message.split(":")[0]
        last_fraction, last_time, last_stage = self.last
        routine = stage == last_stage and fraction < 1
        if routine and fraction - last_fraction < 0.05 and now - last_time < 3:
            return
        self.last = (fraction, now, stage)
        elapsed = now - self.t0
        if 0.1 <= fraction < 1 and elapsed > 1:
            message += f" (about {_duration(elapsed / fraction * (1 - fraction))} left)"
        self.progress(min(max(fraction, 0.0), 1.0), message)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds} s" if seconds < 90 else f"{seconds // 60} min {seconds % 60:02d} s"


def import_gguf(
    path: str,
    dtype: str = "float32",
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> str:
    """The model folder of the GGUF at `path`, imported in `dtype` ("float32", "bfloat16",
    "float16") now or reused from an earlier import. `progress(fraction, message)` hears how it
    goes (start, dequantizing, saving, done); once `should_stop()` is true the import raises
    ImportStopped at its next tensor and removes what it wrote. ModelError for a file that is not a readable GGUF,
    an architecture or quantization transformers cannot read, too little memory or disk."""
    if dtype not in DTYPES:
        raise ModelError(f"Import precision '{dtype}': choose one of {', '.join(DTYPES)}.")
    path = os.path.expanduser(path)
    info = read_gguf_info(path)
    folder = import_folder(path, dtype)
    if _is_complete(folder):
        return folder
    clock = _Clock(progress or _default_progress, should_stop)
    clock(0.0, f"Importing {info.name} ({info.quantization}, {size_text(info.size_bytes)})")
    import torch  # noqa: F401  (after the header checks: torch makes the newer loader's
    # architectures known to supported_architectures)

    check_supported(info)
    root = os.path.dirname(folder)
    _remove_abandoned(root)
    check_room(info, dtype, root)
    started = time.time()
    prefix = f".{os.path.basename(folder)}.{os.getpid()}."
    scratch = tempfile.mkdtemp(prefix=prefix, dir=root)
    try:
        _dequantize_and_save(path, info, dtype, scratch, clock)
        record = {
            "source": os.path.abspath(path),
            "size_bytes": info.size_bytes,
            "name": info.name,
            "architecture": info.architecture,
            "quantization": info.quantization,
            "parameters": info.parameters,
            "dtype": dtype,
            "imported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "seconds": round(time.time() - started, 1),
        }
        with open(os.path.join(scratch, RECORD), "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=2)
        os.chmod(scratch, 0o755)  # mkdtemp made it private; the cache's other folders are not
        try:
            os.rename(scratch, folder)
        except OSError:  # another process finished the same import first: keep theirs
            if not _is_complete(folder):
                raise
    except OSError as exc:
        if getattr(exc, "errno", None) == 28:  # ENOSPC
            raise ModelError(
                f"The disk filled up while {info.name} was imported into {folder}; what was "
                f"written has been removed. Free some space, or set {CACHE_ENV} to another disk."
            ) from None
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # The dequantized copy is gone: hand its pages back, or the run that follows in this process
    # keeps them (the trainer imports on a thread, whose heap arena holds on). A one-step
    # SmolLM2 run that imported first peaked at 2.09 GB without this, 1.80 GB with it (1.64 GB
    # from the cache).
    collect_cycles()
    release_free_heap()
    clock(1.0, f"Imported {info.name} into {folder}")
    return folder


def _remove_abandoned(root: str) -> None:
    """Delete the temporary folders of imports whose process is gone (killed mid-import: a
    7B's half-written folder is gigabytes). Named .<folder>.<pid>.<random>."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        parts = name.split(".")
        if not name.startswith(".") or len(parts) < 4 or not parts[-2].isdigit():
            continue
        pid = int(parts[-2])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # still running (or not ours to signal): its import may be under way
        except ProcessLookupError:
            pass
        except OSError:
            continue
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _dequantize_and_save(path: str, info: GgufInfo, dtype: str, out: str, clock: _Clock) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    links = tempfile.mkdtemp(prefix="gguf-link-")
    try:
        where, name = _gguf_link(path, links)

        def dequantized(done: int, total: int) -> None:
            clock(0.85 + 0.05 * done / total, f"Dequantizing {info.name}: tensor {done}/{total}")

        clock(0.05, f"Reading {info.name}'s tokenizer")
        try:
            tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
            clock(0.2, f"Reading {info.name}'s configuration and weights")
            with _tensor_progress(dequantized):
                model = AutoModelForCausalLM.from_pretrained(
                    where, gguf_file=name, dtype=getattr(torch, dtype)
                )
        except (ValueError, KeyError, NotImplementedError) as exc:
            what = f"the value {exc} is missing" if isinstance(exc, KeyError) else str(exc)
            raise ModelError(
                f"transformers could not read {path} ({info.architecture}, {info.quantization}): "
                f"{what}. The file may come from a newer llama.cpp than this transformers "
                f"reads, or be incomplete. Supported architectures: "
                f"{', '.join(supported_architectures())}."
            ) from exc
    finally:
        shutil.rmtree(links, ignore_errors=True)
    clock(0.92, f"Saving {info.name} as a safetensors folder")
    _strip_quantizer(model)
    model.config.name_or_path = os.path.abspath(path)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _drop_tokens_beyond(out, model.get_input_embeddings().num_embeddings)
    clock(0.98, "Checking the saved folder")
    if not os.path.isfile(os.path.join(out, "config.json")):
        raise ModelError(f"Saving the import of {path} wrote no config.json into {out}.")


def import_events(
    path: str, dtype: str, step: int = 0, should_stop: Callable[[], bool] | None = None
) -> Iterator[LogMessage]:
    """Import the GGUF at `path` in `dtype` (on a worker thread) unless it is imported already,
    yielding its progress as log events: how the trainer shows an import in the window and on
    the command line before the run starts. Raises what import_gguf raises, and ImportStopped
    once `should_stop()` turns true (checked at every progress report, a few times a second
    while the weights are read) or the generator is closed: the half-written copy is removed."""
    path = os.path.expanduser(path)
    if not is_gguf_file(path) or imported_folder(path, dtype):
        return
    messages: queue.Queue = queue.Queue()
    outcome: list[BaseException] = []
    cancel = threading.Event()

    def stopping() -> bool:
        return cancel.is_set() or (should_stop is not None and should_stop())

    def work() -> None:
        try:
            import_gguf(path, dtype, lambda f, m: messages.put(f"{m} [{f:.0%}]"), stopping)
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)
        finally:
            messages.put(None)

    worker = threading.Thread(target=work, name="gguf-import", daemon=True)
    worker.start()
    try:
        while (message := messages.get()) is not None:
            yield LogMessage(step, "info", message)
    finally:  # closed early (the consumer stopped): stop the import, wait for its clean-up
        cancel.set()
        worker.join()
    if outcome:
        if isinstance(outcome[0], ImportStopped):
            raise ImportStopped(
                f"Stopped while importing {os.path.basename(path)}; nothing was kept."
            )
        raise outcome[0]


def gguf_tokenizer(path: str):
    """The tokenizer of the GGUF at `path`, read from the file without importing the weights
    (what the estimate measures prompts with)."""
    from transformers import AutoTokenizer

    links = tempfile.mkdtemp(prefix="gguf-link-")
    try:
        where, name = _gguf_link(os.path.expanduser(path), links)
        tok = AutoTokenizer.from_pretrained(where, gguf_file=name)
    finally:
        shutil.rmtree(links, ignore_errors=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _drop_tokens_beyond(folder: str, rows: int) -> None:
    """Remove from the saved tokenizer the added tokens whose id has no embedding row.

    transformers builds a byte-level GGUF vocabulary as a GPT2Tokenizer, whose defaults add
    '<|endoftext|>' when the file has no such token (Llama 3 has '<|end_of_text|>'): an id one
    past the embedding, which crashes the model on any text that spells it and makes the GGUF
    exporter refuse the tokenizer. The file never had it, so the import drops it."""
    tok_file = os.path.join(folder, "tokenizer.json")
    try:
        with open(tok_file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return
    dropped = {t["content"] for t in data.get("added_tokens", []) if t.get("id", 0) >= rows}
    if not dropped:
        return
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in dropped]
    vocab = (data.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        for token in dropped:
            if vocab.get(token, 0) >= rows:
                vocab.pop(token)
    with open(tok_file, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False)
    config_file = os.path.join(folder, "tokenizer_config.json")
    try:
        with open(config_file, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        config["added_tokens_decoder"] = {k: v for k, v in decoder.items() if int(k) < rows}
    for key in ("unk_token", "bos_token", "eos_token", "pad_token"):
        if config.get(key) in dropped:
            config.pop(key)
    with open(config_file, "w", encoding="utf-8") as fh:
        json.dump(config, fh, ensure_ascii=False, indent=2)


def _main(argv: list[str]) -> int:
    dtype = "float32"
    if "--dtype" in argv:
        i = argv.index("--dtype")
        dtype, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
    for arg in argv:
        if not is_gguf_file(arg):
            print(f"{arg}: not a GGUF file", file=sys.stderr)
            return 2
        print(import_gguf(arg, dtype, lambda f, m: print(f"{f:4.0%} {m}", file=sys.stderr)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
