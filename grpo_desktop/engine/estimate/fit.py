"""Will it fit? Peak memory and seconds per step of a run, estimated before anything loads.

`estimate_run(cfg)` reads the model's config.json (a local folder, the built-in demo, or a hub id:
from the local cache, else only config.json is downloaded; a GGUF file not imported yet: the
sizes in its header, models/gguf_info.py), builds the model on torch's meta
device to count its parameters (no weights are read or allocated; tied matrices count once, and
4-bit models count real weights, not packed bytes), finds the device's free memory and speed
(CUDA: its properties; CPU: a short matmul and copy timing, once per process) and hands the
numbers to formulas.py (memory) and timing.py (seconds): a JSON-serialisable dict whose
memory.total compares with the run's measured peak (peak RSS on the CPU, max_memory_allocated
on CUDA; memory.needed adds what CUDA holds outside it, and is what `fits` compares with the
free memory). The prompt length is measured on the first rows of the data with the model's
tokenizer when that is quick (the built-in data, a local file), else assumed (notes say which).

Does not load weights, run the model or reserve memory. Try it:  grpo-desktop estimate --demo
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Any

import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.config.starters import starter_change, starter_recommendation
from grpo_desktop.engine.errors import ModelError
from grpo_desktop.engine.estimate.advice import advise, gb
from grpo_desktop.engine.estimate.formulas import (
    CPU_BASELINE_BYTES,
    DTYPE_NAMES,
    TIGHT_SHARE,
    Device,
    Params,
    Settings,
    memory,
)
from grpo_desktop.engine.estimate.memory import LORA_MODULES, ModelShape
from grpo_desktop.engine.estimate.timing import seconds

ASSUMED_PROMPT_TOKENS = 128  # a chat-templated question when the data cannot be read quickly
CPU_FLOPS_EFFICIENCY = 1.0  # the measured rate is that of the engine's own products (oneDNN)
CUDA_FLOPS_EFFICIENCY = 0.4  # of the tensor cores' peak
BANDWIDTH_EFFICIENCY = 0.8
# Dense bf16/fp16 tensor-core FLOPs per SM and clock by compute capability (float32: CUDA cores).
HALF_FLOPS_PER_SM_CLOCK = {(7, 0): 1024, (7, 5): 512, (8, 0): 2048, (8, 6): 512, (8, 7): 1024,
                           (8, 9): 512, (9, 0): 4096, (10, 0): 8192, (12, 0): 1024}  # fmt: skip
_cpu_speed: tuple[float, float] | None = None  # (FLOP/s, bytes/s), measured once


def read_model_config(name_or_path: str) -> tuple[dict, str]:
    """config.json of the model as a dict, and the folder (or hub id) it came from. A hub id is
    read from the local cache, else its config.json alone is downloaded; offline and uncached is
    a ModelError that names the model and what to do."""
    from grpo_desktop.engine.data.hub import (
        cached_model_folder,
        hub_reachable,
        offline_mode,
        offline_model_message,
    )
    from grpo_desktop.engine.models.gguf_import import imported_folder
    from grpo_desktop.engine.models.gguf_info import gguf_model_config, is_gguf_file
    from grpo_desktop.engine.models.loading import resolve_model_path
    from grpo_desktop.engine.models.local_models import ollama_model_file

    expanded = ollama_model_file(name_or_path) or os.path.expanduser(name_or_path.strip())
    if is_gguf_file(expanded):  # its import's config.json, else its header (nothing imported)
        folder = imported_folder(expanded)
        if folder is None:
            return gguf_model_config(expanded), expanded
        name_or_path = folder
    path = resolve_model_path(name_or_path)
    if not os.path.isdir(path):
        folder = cached_model_folder(path)
        if folder is None:
            if offline_mode() or not hub_reachable():
                raise ModelError(offline_model_message(path))
            folder = _download_config(path)
        path = folder
    file = os.path.join(path, "config.json")
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ModelError(f"Could not read {file}: {exc}. Is the model folder complete?") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{file} is not a model config (it holds no JSON object).")
    return data, path


def _download_config(repo_id: str) -> str:
    try:
        from huggingface_hub import hf_hub_download

        file = hf_hub_download(repo_id, "config.json")
    except Exception as exc:  # noqa: BLE001 - any hub failure is the same advice to the user
        raise ModelError(
            f"Could not read the config of '{repo_id}' from the Hugging Face hub ({exc}). Check "
            "the id (for example Qwen/Qwen2.5-0.5B-Instruct), or choose a local model folder."
        ) from exc
    return os.path.dirname(file)


def count_params(config: dict, path: str, cfg: TrainConfig) -> tuple[Params, list[str]]:
    """Parameter counts of the model in `config`, built on the meta device; analytic from its
    sizes (Llama's layout) when transformers cannot build it without running the model's code."""
    notes: list[str] = []
    try:
        from transformers import AutoConfig, AutoModelForCausalLM

        if os.path.isfile(path):  # a GGUF not imported yet: its header's sizes
            notes.append(
                "Read from the GGUF file's header: the first run imports it (dequantized to "
                "the run's precision) into the model cache, once."
            )
            sizes = {k: v for k, v in config.items() if k != "model_type"}
            hf_config = AutoConfig.for_model(config["model_type"], **sizes)
        else:
            hf_config = AutoConfig.from_pretrained(path, trust_remote_code=False)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - unknown architectures, remote code: use the sizes
        notes.append(
            f"Parameters computed from config.json's sizes (transformers could not build the "
            f"model without its own code: {str(exc).splitlines()[0][:160]})."
        )
        return _params_from_shape(ModelShape.from_config(config), config, cfg), notes
    return _params_of(model, cfg), notes


def _params_of(model, cfg: TrainConfig) -> Params:
    total = sum(p.numel() for p in model.parameters())  # shared (tied) parameters once
    inp = model.get_input_embeddings()
    out = model.get_output_embeddings()
    tied = out is None or out.weight is inp.weight
    linear = lora = 0
    targets = _lora_targets(cfg)
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is out:
            continue
        linear += module.weight.numel()
        if targets is None or name.rsplit(".", 1)[-1] in targets:
            lora += cfg.lora.r * (module.in_features + module.out_features)
    return Params(
        total=int(total),
        embedding=int(inp.weight.numel()),
        output=0 if tied else int(out.weight.numel()),
        linear=int(linear),
        lora=int(lora),
        tied=bool(tied),
    )


def _lora_targets(cfg: TrainConfig) -> set[str] | None:
    targets = cfg.lora.target_modules.strip()
    if targets in ("", "all-linear"):
        return None
    return {t.strip() for t in targets.split(",") if t.strip()}


def _params_from_shape(shape: ModelShape, config: dict, cfg: TrainConfig) -> Params:
    H, inter, hd = shape.hidden, shape.intermediate, shape.hidden // max(1, shape.heads)
    kv = shape.kv_heads * hd
    layer_linear = 2 * H * H + 2 * H * kv + 3 * H * inter
    linear = shape.layers * layer_linear
    embedding = shape.vocab * H
    tied = bool(config.get("tie_word_embeddings", True))
    output = 0 if tied else embedding
    norms = shape.layers * 2 * H + H
    n_targets = LORA_MODULES if _lora_targets(cfg) is None else len(_lora_targets(cfg) or ())
    lora = shape.layers * cfg.lora.r * (2 * H * n_targets + (inter - H) * 3 * (n_targets > 4))
    return Params(embedding + output + linear + norms, embedding, output, linear, lora, tied)


def _cpu_speed_now() -> tuple[float, float]:
    """(FLOP/s of a float32 matmul, bytes/s of a large copy) on this CPU, measured once."""
    global _cpu_speed
    if _cpu_speed is None:
        from grpo_desktop.engine.ops.kernels import fast_linear

        x = torch.randn(512, 1024)
        w = torch.randn(1024, 1024)
        with fast_linear():  # the library the training passes' products run in (kernels.py)
            torch.nn.functional.linear(x, w)  # warm-up (thread pool, library choice)
            reps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.15:
                torch.nn.functional.linear(x, w)
                reps += 1
        flops = 2 * 512 * 1024 * 1024 * reps / (time.perf_counter() - t0)
        src = torch.ones(16 * 2**20)  # 64 MiB
        dst = torch.empty_like(src)
        dst.copy_(src)
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.1:
            dst.copy_(src)
            reps += 1
        bandwidth = 2 * src.numel() * 4 * reps / (time.perf_counter() - t0)
        _cpu_speed = (flops, bandwidth)
    return _cpu_speed


def _host_total() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def detect_device(kind: str, dtype: str, free_bytes: int | None, gpu: dict | None = None) -> Device:
    """The device `kind` ("cuda" or "cpu") with its free memory (`free_bytes` when given) and
    speed; a CUDA device's properties from `gpu` when given (then CUDA is not asked)."""
    from grpo_desktop.engine.estimate.micro_batch import free_bytes as device_free_bytes

    if kind == "cuda":
        props = SimpleNamespace(**gpu) if gpu else torch.cuda.get_device_properties(0)
        free = free_bytes if free_bytes is not None else device_free_bytes(torch.device("cuda"))
        clock = getattr(props, "clock_rate", 1_500_000) * 1e3  # kHz
        cap = (props.major, props.minor)
        per_clock = HALF_FLOPS_PER_SM_CLOCK.get(cap, 512) if dtype != "float32" else 256
        flops = props.multi_processor_count * clock * per_clock * CUDA_FLOPS_EFFICIENCY
        mem_clock = getattr(props, "memory_clock_rate", 0) * 1e3
        bus = getattr(props, "memory_bus_width", 0)
        bandwidth = 2 * mem_clock * bus / 8 * BANDWIDTH_EFFICIENCY if mem_clock and bus else 5e11
        return Device("cuda", props.name, free, int(props.total_memory), flops, bandwidth)
    from grpo_desktop.engine.ops.host_memory import host_available_bytes

    flops, bandwidth = _cpu_speed_now()
    free = free_bytes if free_bytes is not None else host_available_bytes()
    name = f"CPU ({os.cpu_count()} threads)"
    return Device("cpu", name, free, _host_total(), flops * CPU_FLOPS_EFFICIENCY, bandwidth)


def _device_kind(cfg: TrainConfig, device: str | None) -> str:
    choice = device or cfg.model.device
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if choice == "cuda" else "cpu"


def _compute_dtype(cfg: TrainConfig, kind: str, gpu: dict | None = None) -> str:
    if cfg.model.dtype != "auto":
        return cfg.model.dtype
    from grpo_desktop.engine.models.loading import auto_dtype

    capability = None
    if kind == "cuda":
        capability = (gpu["major"], gpu["minor"]) if gpu else torch.cuda.get_device_capability(0)
    return str(auto_dtype(kind, capability)).removeprefix("torch.")


def typical_prompt_tokens(cfg: TrainConfig, path: str) -> tuple[int, str]:
    """(tokens, how it was found): the longest of the data's first prompts with the model's
    chat template, when the data is generated (built-in, a reasoning-gym task) or a local file;
    else assumed."""
    limit = cfg.data.max_prompt_length
    if cfg.data.source not in ("arithmetic", "file", "task") or not os.path.exists(path):
        return min(limit, ASSUMED_PROMPT_TOKENS), "assumed"
    try:
        from grpo_desktop.engine.data.dataset import preview_rows, prompt_for
        from grpo_desktop.engine.models.loading import load_tokenizer
        from grpo_desktop.engine.sampling.rollout import prompt_token_ids

        _columns, rows = preview_rows(cfg.data, 16)
        generated = cfg.data.source in ("arithmetic", "task")
        column = "question" if generated else cfg.data.prompt_column
        if os.path.isdir(path):
            tok = load_tokenizer(path)
        else:  # a GGUF not imported yet: the tokenizer in its header
            from grpo_desktop.engine.models.gguf_import import gguf_tokenizer

            tok = gguf_tokenizer(path)
        texts = [prompt_for(tok, str(r.get(column, "")), cfg.data) for r in rows]
        longest = max((len(ids) for ids in prompt_token_ids(tok, texts)), default=0)
    except Exception:  # noqa: BLE001 - unreadable data or tokenizer: the run will say why
        return min(limit, ASSUMED_PROMPT_TOKENS), "assumed"
    if longest <= 0:
        return min(limit, ASSUMED_PROMPT_TOKENS), "assumed"
    return min(limit, longest), "measured"


def estimate_run(
    cfg: TrainConfig,
    *,
    free_bytes: int | None = None,
    device: str | None = None,
    prompt_tokens: int | None = None,
    gpu: dict | None = None,
) -> dict[str, Any]:
    """The estimate for a run with `cfg` on `device` ("cuda", "cpu"; default the config's), with
    `free_bytes` free (default: what the device has free now). Raises ModelError when the
    model's config cannot be read (a missing folder, an uncached hub id while offline). `gpu`:
    the CUDA device's properties read elsewhere (the app's device probe: name, total_memory,
    major, minor, multi_processor_count, clock_rate, memory_clock_rate, memory_bus_width);
    with it, device="cuda" and `free_bytes`, nothing here queries CUDA. `prompt_tokens`
    overrides the measured prompt length. Returns a JSON-serialisable dict:

        {"model": {"name", "params", "trainable", "layers", "hidden", "vocab", ...},
         "device": {"kind", "name", "free_bytes", "total_bytes", ...},
         "memory": {"weights", "adapters_optimizer", "activations", "logits", "kv_cache",
                    "overhead", "total", "weights_detail": {"4bit": …, "bf16": …}, ...},
         "rows_per_pass", "seconds_per_step", "seconds_detail": {"sampling", "training"},
         "fits", "headroom_bytes", "advice": [str, ...], "advice_detail": [...], "notes": [...],
         "starter": {"text", "change"} or None}

    `starter`: for a pretrained model under ~1.5B parameters whose settings differ from the
    small-model starter (config/starters.py), what it would change, as one sentence, and the
    change itself (for TrainConfig.replace or one set_value a field).
    """
    config, path = read_model_config(cfg.model.name_or_path)
    params, notes = count_params(config, path, cfg)
    shape = ModelShape.from_config(config)
    kind = _device_kind(cfg, device)
    if kind == "cuda" and gpu is None and not torch.cuda.is_available():
        raise ModelError(
            "The device is set to cuda but PyTorch sees no CUDA GPU here, so there is no GPU to "
            "estimate for. Estimate for the CPU (device auto or cpu), or install a CUDA build of "
            "torch (see the README)."
        )
    dtype = _compute_dtype(cfg, kind, gpu)
    if prompt_tokens is None:
        prompt_tokens, how = typical_prompt_tokens(cfg, path)
    else:
        how = "given"
    s = Settings.from_config(cfg, dtype, int(prompt_tokens))
    dev = detect_device(kind, dtype, free_bytes, gpu)
    mem = memory(shape, params, s, dev)
    secs = seconds(shape, params, s, dev, mem["rows_per_pass"])
    needed = mem["needed"]
    fits = None if dev.free_bytes is None else needed <= dev.free_bytes
    headroom = None if dev.free_bytes is None else int(dev.free_bytes - needed)
    tight = headroom is not None and headroom < TIGHT_SHARE * dev.free_bytes
    detail = advise(shape, params, s, dev, needed) if (fits is False or tight) else []
    return {
        "model": {
            "name": cfg.model.name_or_path,
            "params": params.total,
            "trainable": params.lora if s.lora else params.total,
            "layers": shape.layers,
            "hidden": shape.hidden,
            "vocab": shape.vocab,
            "architecture": str((config.get("architectures") or ["?"])[0]),
            "tied_embeddings": params.tied,
            "embedding_params": params.embedding,
            "quantizable_params": params.linear,
        },
        "device": {
            "kind": dev.kind,
            "name": dev.name,
            "free_bytes": dev.free_bytes,
            "total_bytes": dev.total_bytes,
            "flops": dev.flops,
            "bandwidth": dev.bandwidth,
        },
        "memory": {k: v for k, v in mem.items() if k != "rows_per_pass"},
        "rows_per_pass": mem["rows_per_pass"],
        "seconds_per_step": round(secs["sampling"] + secs["training"], 3),
        "seconds_detail": {k: round(v, 3) for k, v in secs.items()},
        "fits": fits,
        "headroom_bytes": headroom,
        "advice": [a["text"] for a in detail],
        "advice_detail": detail,
        "assumed": {
            "prompt_tokens": s.prompt_tokens,
            "prompt_tokens_from": how,
            "completion_tokens": s.completion_tokens,
            "dtype": dtype,
        },
        "notes": notes + _notes(dev, mem, s, how, fits),
        "starter": _starter(cfg, params.total),
    }


def _starter(cfg: TrainConfig, parameters: int) -> dict[str, Any] | None:
    text = starter_recommendation(cfg, parameters)
    return {"text": text, "change": starter_change(cfg)} if text else None


def _notes(dev: Device, mem: dict, s: Settings, how: str, fits: bool | None) -> list[str]:
    notes = [
        "A rough estimate: memory within about ±25 % (within ±13 % of measured peaks on the "
        "CPU), seconds per step within a factor of two, or three on a busy machine, for answers "
        "that differ from the start. A group's answers that begin alike run their shared "
        "beginning once, so a model sure of its answers steps faster: the demo up to four "
        "times.",
    ]
    if dev.kind == "cpu":
        notes.append(
            f"total is the run's peak resident memory (peak RSS); overhead is "
            f"{gb(CPU_BASELINE_BYTES)} for Python, torch and the app themselves, the rest what "
            "the C heap keeps (and bitsandbytes' library when quantized)."
        )
    else:
        notes.append(
            "total is comparable with torch.cuda.max_memory_allocated; the CUDA context and "
            f"torch's cached blocks add about {gb(mem['outside_total'])} outside it, counted "
            "when comparing with the free memory."
        )
    if how == "assumed":
        notes.append(
            f"Prompts assumed {s.prompt_tokens} tokens long (the data was not read); longer "
            "prompts need more."
        )
    if fits is None:
        notes.append("The free memory of this device is unknown, so whether it fits is too.")
    if s.quant != "none" and dev.kind == "cpu":
        notes.append(f"{s.quant} on the CPU runs bitsandbytes' slow CPU kernels.")
    if mem["peak_phase"] == "sampling":
        notes.append("The peak comes while sampling (the key/value cache of all B·G rows).")
    elif mem["peak_phase"] == "optimizer":
        notes.append("The peak comes while the optimizer steps (AdamW's temporaries).")
    name = DTYPE_NAMES.get(s.dtype, s.dtype)
    notes.append(f"Compute precision {name}; prompts {s.prompt_tokens} tokens, completions "
                 f"{s.completion_tokens}.")  # fmt: skip
    return notes
