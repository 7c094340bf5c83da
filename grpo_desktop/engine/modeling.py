"""Load the policy: any causal LM from a local folder or hub id, with LoRA, 8-bit or 4-bit (QLoRA).

The reference policy for the KL penalty is the same model with its LoRA adapter disabled, so there is
one copy of the weights. Only full fine-tuning with β > 0 keeps a second, frozen copy.

Does not generate or compute losses (see rollout.py and trainer.py). Try it:
    python -c "from grpo_desktop.engine.modeling import *; from grpo_desktop.engine.config import \
TrainConfig; m = load_policy(TrainConfig()); print(m.describe())"
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import dataclass
from typing import Any

import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.errors import ModelError
from grpo_desktop.engine.kernels import checkpoint_contexts
from grpo_desktop.engine.remote_code import RemoteCodePermission, check_permission, code_hint

BUILTIN_PREFIX = "builtin:"
# The backward recomputes checkpointed layers with the oneDNN routing their forward had (kernels.py).
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

    @contextlib.contextmanager
    def reference(self):
        """Yield the module that computes reference log-probs (adapter off, or the frozen copy)."""
        if self.uses_lora:
            with self.model.disable_adapter():
                yield self.model
        elif self.ref_model is not None:
            yield self.ref_model
        else:
            raise RuntimeError("No reference model: beta is 0, so none was loaded.")

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def num_parameters(self) -> tuple[int, int]:
        total = sum(p.numel() for p in self.model.parameters())
        trainable = sum(p.numel() for p in self.trainable_parameters())
        return total, trainable

    def describe(self) -> str:
        total, trainable = self.num_parameters()
        return (
            f"{self.name} on {self.device.type} ({self.dtype}), {total / 1e6:.2f}M parameters, "
            f"{trainable / 1e6:.3f}M trainable ({'LoRA' if self.uses_lora else 'full'})"
        )


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise ModelError(
            "Device 'cuda' was chosen but PyTorch sees no CUDA GPU. Install a CUDA build of torch "
            "(see the README) or set the device to auto or cpu."
        )
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def pick_dtype(choice: str, device: torch.device) -> torch.dtype:
    if choice != "auto":
        return getattr(torch, choice)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


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
    from grpo_desktop.engine.tiny import build_tiny_model

    cache = os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
        "grpo-desktop",
        "tiny-random",
    )
    if not os.path.isfile(os.path.join(cache, "config.json")):
        build_tiny_model(cache, "tiny", seed=0)
    return cache


def resolve_model_path(name_or_path: str) -> str:
    """A local folder, a built-in name or a hub id; a missing local folder is a clear error."""
    name = name_or_path.strip()
    if name.startswith(BUILTIN_PREFIX):
        return builtin_model_path(name[len(BUILTIN_PREFIX) :])
    expanded = os.path.expanduser(name)
    if os.path.isdir(expanded):
        if not os.path.isfile(os.path.join(expanded, "config.json")):
            raise ModelError(
                f"The folder {expanded} has no config.json, so it is not a Hugging Face model folder. "
                "Choose the folder that contains config.json and the weights (*.safetensors)."
            )
        return expanded
    looks_local = name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1
    if looks_local or os.path.exists(expanded):
        raise ModelError(
            f"Model folder not found: {expanded}. Check the path, or give a hub id such as "
            "Qwen/Qwen2.5-0.5B-Instruct."
        )
    return name  # a hub id


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


def load_tokenizer(
    path: str, trust_remote_code: bool = False, remote_code: RemoteCodePermission | None = None
):
    """The tokenizer in `path`. Its own code runs only when the setting asks for it and
    `remote_code` covers that code (engine/remote_code.py); else this refuses with a message."""
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
    dropping the input gradients that earlier layers' LoRA adapters need. Keep the trainable path."""
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False


def load_policy(
    cfg: TrainConfig,
    adapter_path: str | None = None,
    weights_path: str | None = None,
    remote_code: RemoteCodePermission | None = None,
) -> Policy:
    """Load model and tokenizer as the config says. To resume, `adapter_path` restores a saved
    LoRA adapter, `weights_path` saved full weights (the reference stays the original model).
    With model.trust_remote_code, code shipped in a folder runs only when `remote_code` (given
    by the caller who asked the user) covers it; otherwise this raises ModelError."""
    from transformers import AutoModelForCausalLM

    _quiet_transformers()
    base_path = resolve_model_path(cfg.model.name_or_path)
    path = weights_path or base_path
    device = pick_device(cfg.model.device)
    dtype = pick_dtype(cfg.model.dtype, device)
    trust = check_permission(cfg.model.trust_remote_code, path, remote_code)
    tokenizer = load_tokenizer(path, cfg.model.trust_remote_code, remote_code)
    quant = _quantization(cfg, dtype)
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": trust}
    if quant is not None:
        kwargs["quantization_config"] = quant
        kwargs["device_map"] = {"": device.index or 0} if device.type == "cuda" else {"": "cpu"}
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
        if ref_model is not None:
            ref_model.eval().requires_grad_(False)
    name = cfg.model.name_or_path  # what the user chose (a hub id, a folder, builtin:demo)
    return Policy(model, tokenizer, device, dtype, cfg.lora.enabled, ref_model, name=name)


def _wrap_lora(model, cfg: TrainConfig, quantized: bool, adapter_path: str | None):
    from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training

    if quantized:
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=cfg.model.gradient_checkpointing,
            gradient_checkpointing_kwargs=CHECKPOINTING,  # peft enables it again: the same way
        )
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
