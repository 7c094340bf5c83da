"""Load the policy: any causal LM (a folder, hub id or GGUF file) with LoRA, 8-bit or 4-bit QLoRA.

The reference policy for the KL penalty is the same model with its LoRA adapter disabled, so
there is one copy of the weights; only full fine-tuning with β > 0 keeps a second, frozen copy.

Precision: "auto" is bfloat16 on CUDA GPUs that run it natively (compute capability 8.0 on) and
float32 elsewhere (`auto_dtype`). Full fine-tuning in a half precision keeps float32 master
weights and runs the model's forward under autocast: AdamW's small updates land (in pure bfloat16
most of them round away); bfloat16 on the CPU runs only the linear layers' products in bfloat16. QLoRA keeps embeddings, norms and the output layer in the compute dtype
(peft's preparation would make them float32). Unquantized models load straight to the GPU.
A GGUF file is imported once, in the dtype the run loads (gguf_import.py; `model_import_events`
reports it to the trainer, `Policy.source_note` names the source).

Does not generate or compute losses (sampling/rollout.py, grpo/loss.py). Try it:
    python -c "from grpo_desktop.engine.models.loading import load_policy; \
from grpo_desktop.engine.config import TrainConfig; print(load_policy(TrainConfig()).describe())"
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import os
from dataclasses import dataclass
from typing import Any

import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.errors import ModelError
from grpo_desktop.engine.models.gguf_info import is_gguf_file, read_gguf_info
from grpo_desktop.engine.models.local_models import ollama_model_file
from grpo_desktop.engine.models.remote_code import RemoteCodePermission, check_permission, code_hint
from grpo_desktop.engine.ops.adapters import adapters_off
from grpo_desktop.engine.ops.bf16_products import bf16_products
from grpo_desktop.engine.ops.kernels import checkpoint_contexts

BUILTIN_PREFIX = "builtin:"
# The backward recomputes checkpointed layers with the oneDNN routing their forward had
# (ops/kernels.py).
CHECKPOINTING = {"use_reentrant": False, "context_fn": checkpoint_contexts}


@dataclass
class Policy:
    model: Any  # a peft PeftModel (LoRA) or a plain transformers model (full fine-tuning)
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    uses_lora: bool
    ref_model: Any = None  # frozen copy, only for full fine-tuning with beta > 0
    name: str = ""
    source_note: str = ""  # where an imported (GGUF) model came from, for the run's log

    @contextlib.contextmanager
    def reference(self):
        """Yield the module that computes reference log-probs (adapter off, or the frozen copy)."""
        if self.uses_lora:
            with adapters_off(self.model):
                yield self.model
        elif self.ref_model is not None:
            yield self.ref_model
        else:
            raise RuntimeError("No reference model: beta is 0, so none was loaded.")

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def num_parameters(self) -> tuple[int, int]:
        total = sum(parameter_count(p) for p in self.model.parameters())
        trainable = sum(parameter_count(p) for p in self.trainable_parameters())
        return total, trainable

    def describe(self) -> str:
        total, trainable = self.num_parameters()
        masters = any(p.dtype == torch.float32 for p in self.trainable_parameters())
        precision = f"{self.dtype}" + (
            ", float32 master weights" if masters and self.dtype != torch.float32 else ""
        )
        return (
            f"{self.name} on {self.device.type} ({precision}), {total / 1e6:.2f}M parameters, "
            f"{trainable / 1e6:.3f}M trainable ({'LoRA' if self.uses_lora else 'full'})"
        )


def parameter_count(p: torch.Tensor) -> int:
    """The weights a parameter stands for: bitsandbytes packs two 4-bit weights into each byte
    of a Params4bit (its numel() counts bytes); its quant_state keeps the real shape."""
    shape = getattr(getattr(p, "quant_state", None), "shape", None)
    return math.prod(shape) if shape is not None else p.numel()


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise ModelError(
            "Device 'cuda' was chosen but PyTorch sees no CUDA GPU. Install a CUDA build of torch "
            "(see the README) or set the device to auto or cpu."
        )
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def auto_dtype(device_type: str, capability: tuple[int, int] | None = None) -> torch.dtype:
    """What "auto" precision means on a device of this type and CUDA compute capability:
    bfloat16 on GPUs that run it natively (8.0 on: Ampere and newer); float32 on older GPUs
    (T4 7.5, V100 7.0), where torch only emulates bfloat16 and float16 would need loss scaling
    the training step does not do; float32 on the CPU."""
    if device_type == "cuda" and capability is not None and tuple(capability) >= (8, 0):
        return torch.bfloat16
    return torch.float32


def pick_dtype(choice: str, device: torch.device) -> torch.dtype:
    if choice != "auto":
        return getattr(torch, choice)
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return auto_dtype(device.type, capability)


HALF = (torch.bfloat16, torch.float16)


def load_kwargs(dtype: torch.dtype, device: torch.device, quantized: bool) -> dict[str, Any]:
    """from_pretrained's dtype and placement: weights go straight to a GPU (device_map), never
    whole into host RAM first; on the CPU nothing is placed. `dtype` is what the parameters are
    stored in (float32 master weights for full fine-tuning in a half precision)."""
    kwargs: dict[str, Any] = {"dtype": dtype}
    if device.type == "cuda":
        kwargs["device_map"] = {"": device.index or 0}
    elif quantized:
        kwargs["device_map"] = {"": "cpu"}
    return kwargs


def _autocast_forwards(model, device: torch.device, dtype: torch.dtype) -> None:
    """Run the model's forward, and its decoder's (which log-prob passes call directly), under
    autocast to `dtype`: float32 master weights, half-precision products. bfloat16 on the CPU
    runs only the linear layers' products in bfloat16 instead (ops/bf16_products.py: the CPU's
    bfloat16 attention backward is slower than float32's)."""
    products = device.type == "cpu" and dtype == torch.bfloat16
    modules = [model]
    with contextlib.suppress(AttributeError, NotImplementedError):
        decoder = model.get_decoder()
        if decoder is not None and decoder is not model:
            modules.append(decoder)
    for module in modules:
        forward = module.forward

        @functools.wraps(forward)
        def run(*args, _forward=forward, **kwargs):
            with bf16_products() if products else torch.autocast(device.type, dtype=dtype):
                return _forward(*args, **kwargs)

        module.forward = run
    # logps.py runs the output layer the same way
    model.autocast_forward = ("bf16-products" if products else device.type, dtype)


def builtin_model_path(name: str) -> str:
    """Folder of a built-in model. `demo` ships with the package once trained; until then (or when
    the package data is missing) a tiny random model is built once in the user's cache."""
    from importlib import resources

    if name == "demo":
        shipped = resources.files("grpo_desktop") / "resources" / "demo_model"
        if shipped.is_dir() and (shipped / "config.json").is_file():
            return str(shipped)
    if name not in ("demo", "tiny-random"):
        raise ModelError(f"Unknown built-in model 'builtin:{name}'. Use builtin:demo.")
    from grpo_desktop.engine.models.tiny import build_tiny_model

    cache = os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
        "grpo-desktop",
        "tiny-random",
    )
    if not os.path.isfile(os.path.join(cache, "config.json")):
        build_tiny_model(cache, "tiny", seed=0)
    return cache


def resolve_model_path(name_or_path: str, dtype: str | None = None) -> str:
    """A local folder, a built-in name, an Ollama model's name or a hub id; a missing local
    folder is a clear error.
    A GGUF file (a .gguf, or an Ollama blob) is imported as a model folder once
    (gguf_import.py) and its folder returned: in `dtype` when given (what the run loads), else
    an import in any dtype that exists, else float32 (a float32 import serves every dtype)."""
    name = name_or_path.strip()
    if name.startswith(BUILTIN_PREFIX):
        return builtin_model_path(name[len(BUILTIN_PREFIX) :])
    expanded = os.path.expanduser(name)
    if is_gguf_file(expanded):
        from grpo_desktop.engine.models.gguf_import import import_gguf, imported_folder

        # a float32 import serves any dtype without loss (from_pretrained converts it)
        found = imported_folder(expanded, dtype) or imported_folder(expanded, "float32")
        return found or import_gguf(expanded, dtype or "float32")
    if os.path.isfile(expanded) and expanded.lower().endswith(".gguf"):
        read_gguf_info(expanded)  # raises what is wrong with it: truncated, not a GGUF
    if os.path.isdir(expanded):
        if not os.path.isfile(os.path.join(expanded, "config.json")):
            raise ModelError(
                f"The folder {expanded} has no config.json, so it is not a Hugging Face model "
                "folder. Choose the folder that contains config.json and the weights "
                "(*.safetensors)."
            )
        return expanded
    looks_local = name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1
    if looks_local or os.path.exists(expanded):
        raise ModelError(
            f"Model folder not found: {expanded}. Check the path, or give a hub id such as "
            "Qwen/Qwen2.5-0.5B-Instruct."
        )
    blob = ollama_model_file(name)  # a name Ollama shows: 'smollm2:135m'
    return resolve_model_path(blob, dtype) if blob else name  # else a hub id


def _from_pretrained(loader, path: str, **kwargs):
    try:
        return loader.from_pretrained(path, **kwargs)
    except OSError as exc:
        if os.path.isdir(path):
            raise ModelError(f"Could not load the model in {path}: {exc}") from exc
        raise ModelError(
            f"Model '{path}' is neither a local folder nor in the local Hugging Face cache, and it "
            "could not be downloaded (no network, or no such model). Download it once while online "
            "(it is cached), or choose a local folder."
        ) from exc


def _quiet_transformers() -> None:
    """No per-file progress bars or deprecation chatter from the libraries in the user's log."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    warnings.filterwarnings(
        "ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning
    )
    # bitsandbytes logs "MatMul8bitLt: inputs will be cast from torch.float32 to float16 during
    # quantization" on every 8-bit product whose input is not float16: thousands in one step.
    # Said once, it is worth knowing; the filter lets the first one through.
    bnb_log = logging.getLogger("bitsandbytes.autograd._functions")
    if not any(isinstance(f, _OnceFilter) for f in bnb_log.filters):
        bnb_log.addFilter(_OnceFilter("MatMul8bitLt: inputs will be cast"))


class _OnceFilter(logging.Filter):
    """Lets the first log record starting with `prefix` through, drops the later ones."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix, self.seen = prefix, False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.prefix):
            return True
        first, self.seen = not self.seen, True
        return first


def load_tokenizer(
    path: str, trust_remote_code: bool = False, remote_code: RemoteCodePermission | None = None
):
    """The tokenizer in `path`. Its own code runs only when the setting asks for it and
    `remote_code` covers that code (remote_code.py); else this refuses with a message."""
    from transformers import AutoTokenizer

    trust = check_permission(trust_remote_code, path, remote_code)
    tok = _from_pretrained(AutoTokenizer, path, trust_remote_code=trust)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation appends on the right
    return tok


def _quantization(cfg: TrainConfig, dtype: torch.dtype):
    mode = cfg.quantization.mode
    if mode == "none":
        return None
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError as exc:
        raise ModelError(
            f"{mode} quantization needs bitsandbytes: pip install bitsandbytes ({exc})."
        ) from exc
    if mode == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=dtype,
        bnb_4bit_use_double_quant=cfg.quantization.double_quant,
    )


def _disable_cpu_4bit_packing(model) -> None:
    """bitsandbytes 0.50 repacks 4-bit weights for a faster CPU kernel on the first no-grad eval
    forward (generation); later training forwards then use a kernel without autograd, silently
    dropping the input gradients that earlier layers' LoRA adapters need. Keep the trainable
    path."""
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False


def _masters(cfg: TrainConfig, dtype: torch.dtype, quantized: bool, for_inference: bool) -> bool:
    """Whether full fine-tuning keeps float32 master weights of a half-precision model."""
    return not for_inference and not cfg.lora.enabled and not quantized and dtype in HALF


def import_dtype(cfg: TrainConfig, for_inference: bool = False) -> str:
    """The dtype a GGUF model is imported in for this config: the one its weights are loaded in
    (float32 for master weights), so a 7B on a bfloat16 GPU is not first made 28 GB."""
    dtype = pick_dtype(cfg.model.dtype, pick_device(cfg.model.device))
    quantized = cfg.quantization.mode != "none"
    stored = torch.float32 if _masters(cfg, dtype, quantized, for_inference) else dtype
    return str(stored).removeprefix("torch.")


def model_import_events(cfg: TrainConfig, step: int = 0, should_stop=None):
    """The progress of importing the config's model when it is a GGUF file not yet imported,
    as log events (gguf_import.py `import_events`); nothing for any other model. Once
    `should_stop()` is true the import stops, removes what it wrote and raises ImportStopped."""
    from grpo_desktop.engine.config import validate
    from grpo_desktop.engine.models.gguf_import import import_events

    name = cfg.model.name_or_path.strip()
    if name.startswith(BUILTIN_PREFIX) or validate(cfg):  # settings to fix: say that first
        return iter(())
    return import_events(ollama_model_file(name) or name, import_dtype(cfg), step, should_stop)


def load_policy(
    cfg: TrainConfig,
    adapter_path: str | None = None,
    weights_path: str | None = None,
    remote_code: RemoteCodePermission | None = None,
    *,
    for_inference: bool = False,
) -> Policy:
    """Load model and tokenizer as the config says. To resume, `adapter_path` restores a saved
    LoRA adapter, `weights_path` saved full weights (the reference stays the original model).
    `for_inference`: to generate only (Try, Compare, export): full fine-tuning's float32 master
    weights are not made, so a bf16 model takes its bf16 size.
    With model.trust_remote_code, code shipped in a folder runs only when `remote_code` (given
    by the caller who asked the user) covers it; otherwise this raises ModelError."""
    from transformers import AutoModelForCausalLM

    _quiet_transformers()
    device = pick_device(cfg.model.device)
    dtype = pick_dtype(cfg.model.dtype, device)
    quant = _quantization(cfg, dtype)
    masters = _masters(cfg, dtype, quant is not None, for_inference)
    base_path = resolve_model_path(cfg.model.name_or_path, import_dtype(cfg, for_inference))
    path = weights_path or base_path
    trust = check_permission(cfg.model.trust_remote_code, path, remote_code)
    tokenizer = load_tokenizer(path, cfg.model.trust_remote_code, remote_code)
    kwargs = load_kwargs(torch.float32 if masters else dtype, device, quant is not None)
    kwargs["trust_remote_code"] = trust
    if quant is not None:
        kwargs["quantization_config"] = quant
    try:
        model = _from_pretrained(AutoModelForCausalLM, path, **kwargs)
    except ValueError as exc:  # e.g. an architecture this transformers does not know
        hint = "" if trust else code_hint(path)
        raise ModelError(f"Could not load the model '{path}': {exc}{hint}") from exc
    if quant is None:
        model.to(device)
    elif device.type == "cpu" and cfg.quantization.mode == "4bit":
        _disable_cpu_4bit_packing(model)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=CHECKPOINTING)
        model.config.use_cache = False

    ref_model = None
    if cfg.lora.enabled:
        model = _wrap_lora(model, cfg, quantized=quant is not None, adapter_path=adapter_path)
    else:
        if adapter_path is not None:
            raise ModelError("A LoRA adapter was given but LoRA is off in the config.")
        if cfg.algorithm.beta > 0 and weights_path is None:
            ref_model = copy.deepcopy(model)
        elif cfg.algorithm.beta > 0:
            kwargs["trust_remote_code"] = check_permission(
                cfg.model.trust_remote_code, base_path, remote_code
            )
            ref_model = _from_pretrained(AutoModelForCausalLM, base_path, **kwargs).to(device)
        if ref_model is not None:  # frozen: no master weights needed
            ref_model.to(dtype).eval().requires_grad_(False)
        if masters:  # after the copy: the copy's forward must not call this model's
            _autocast_forwards(model, device, dtype)
    name = cfg.model.name_or_path  # what the user chose (a hub id, a folder, builtin:demo)
    policy = Policy(model, tokenizer, device, dtype, cfg.lora.enabled, ref_model, name=name)
    policy.source_note = import_note(base_path)
    return policy


def import_note(folder: str) -> str:
    """For a model imported from a GGUF (gguf_import.py): where from and what its quantization
    costs, for the run's log; '' for any other model."""
    from grpo_desktop.engine.models.gguf_import import read_record, source_note

    record = read_record(folder) if os.path.isdir(folder) else None
    return source_note(record) if record else ""


def _wrap_lora(model, cfg: TrainConfig, quantized: bool, adapter_path: str | None):
    from peft import LoraConfig, PeftModel, get_peft_model

    if quantized:
        _prepare_quantized(model)
    if adapter_path is not None:
        return PeftModel.from_pretrained(model, adapter_path, is_trainable=True)
    targets = cfg.lora.target_modules.strip()
    target_modules: str | list[str] = (
        "all-linear" if targets in ("", "all-linear") else [t.strip() for t in targets.split(",")]
    )
    lora = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=target_modules,
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, lora)
    except ValueError as exc:
        raise ModelError(
            f"LoRA could not be attached: {exc}. Check the target modules (all-linear works for "
            "most models)."
        ) from exc


def _prepare_quantized(model) -> None:
    """What peft's prepare_model_for_kbit_training does that training needs: freeze the base
    weights (checkpointing, when on, is already non-reentrant, so the inputs need no
    requires_grad hook). Not its cast of every unquantized weight to float32: in bfloat16 the
    embedding, the norms and the output layer compute as in a bfloat16 LoRA run (RMSNorm takes
    its statistics in float32 anyway), and float32 norm weights would make every activation
    after them float32. Under float16, whose range is narrow, they become float32 as in peft."""
    for p in model.parameters():
        p.requires_grad_(False)
        if p.dtype == torch.float16:  # quantized weights are uint8 or int8
            p.data = p.data.float()
