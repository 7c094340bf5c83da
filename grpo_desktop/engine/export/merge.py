"""The torch side of export/pipeline.py: write a checkpoint's adapter, or merge it into its base.

`write_adapter` copies the PEFT adapter (its adapter_config.json pointing at the base the run
used: a hub id, or the base folder's absolute path), the base's tokenizer and a README.txt saying
what base it needs and how to load it. `write_merged` merges the LoRA adapter into its base
(`merge_and_unload`: W + scale · B·A) and saves the model as safetensors with its tokenizer,
chat template and a generation_config that stops where the run's completions stopped.

`stage(fraction, message)` reports progress and raises ExportCancelled when the user cancelled.
Writes only into `folder` (a temporary one: pipeline.py renames it into place). Not for GGUF or
TRL (export/gguf.py, export/trl_project.py). Try it: the `export` example in export/pipeline.py.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil

from grpo_desktop import __version__
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.export.plan import (
    ADAPTER_FILES,
    ExportError,
    ExportPlan,
    MissingBaseModel,
    hub_snapshot,
)
from grpo_desktop.engine.models.remote_code import check_permission
from grpo_desktop.engine.units import size_text

EXAMPLE_PROBLEM = "What is 12 * 34?"
FAMILIAR = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "olmo2", "smollm3")


class UnsupportedArchitecture(ExportError):
    """A model whose architecture transformers cannot load as a causal LM."""


def _check_base_available(plan: ExportPlan) -> None:
    if not plan.base_is_local and hub_snapshot(plan.base) is None:
        raise MissingBaseModel(
            f"The run's base model {plan.base} (a Hugging Face hub id) is not in the local "
            "Hugging Face cache, and the export needs its tokenizer (and, merged, its weights). "
            f"Download it once while online (huggingface-cli download {plan.base}), or edit "
            "model.name_or_path in the run's config.json to a local copy."
        )


def _load_tokenizer(path: str, plan: ExportPlan, remote_code):
    from transformers import AutoTokenizer

    trust = check_permission(plan.cfg.model.trust_remote_code, path, remote_code)
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
    except (OSError, ValueError) as exc:
        raise MissingBaseModel(
            f"The tokenizer of {path} cannot be loaded ({str(exc).splitlines()[0]}). The export "
            "needs the base model the run trained on: put it back, or point model.name_or_path "
            "in the run's config.json at a copy of it."
        ) from None


def _prompt_example(tokenizer, plan: ExportPlan) -> str:
    from grpo_desktop.engine.data.dataset import prompt_for

    try:
        return prompt_for(tokenizer, EXAMPLE_PROBLEM, plan.cfg.data)
    except UserError as exc:
        return f"(the chat template failed: {exc})"


def _readme(plan: ExportPlan, what: str, load: str, tokenizer, stop: list[int]) -> str:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    base = plan.base if plan.is_adapter else (plan.base or plan.weights)
    lines = [
        f"Exported by GRPO Desktop {__version__} on {stamp}",
        f"from the run {plan.run_dir}, checkpoint step {plan.step}.",
        "",
        what,
        "",
        "Load it (Python, with transformers" + (" and peft):" if plan.fmt == "adapter" else "):"),
        "",
        *("    " + line for line in load.strip().splitlines()),
        "",
        f"Base model: {base}" + ("" if plan.base_is_local else " (Hugging Face hub id)"),
    ]
    if plan.dtype_reason and plan.fmt != "adapter":
        lines += ["", "Why bfloat16: " + plan.dtype_reason]
    if stop:
        names = ", ".join(f"{i} {tokenizer.convert_ids_to_tokens(i)!r}" for i in stop)
        lines += ["", f"Completions stop at the ids: {names}."]
    lines += [
        "",
        "The run prompted the model like this (system prompt and chat template as trained):",
        "",
        *("    " + line for line in _prompt_example(tokenizer, plan).splitlines()),
        "",
    ]
    return "\n".join(lines)


def write_adapter(plan: ExportPlan, folder: str, stage, remote_code=None) -> dict:
    """The adapter folder: adapter, the base's tokenizer, README.txt; returns summary fields."""
    _check_base_available(plan)
    os.makedirs(folder, exist_ok=True)
    stage(0.1, "Copying the adapter")
    # only the adapter's weights (adapter_config.json is rewritten below; peft's README.md is
    # an empty model card, README.txt says what this is): nothing else in the folder is copied
    for name in ADAPTER_FILES[1:]:
        src = os.path.join(plan.weights, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(folder, name))
    with open(os.path.join(plan.weights, "adapter_config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    config["base_model_name_or_path"] = plan.base  # absolute folder or hub id: loadable as is
    with open(os.path.join(folder, "adapter_config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2)
    stage(0.6, "Saving the tokenizer")
    tokenizer = _load_tokenizer(plan.base, plan, remote_code)
    tokenizer.save_pretrained(folder)
    load = (
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "from peft import PeftModel\n"
        f"base = AutoModelForCausalLM.from_pretrained({plan.base!r})\n"
        f"model = PeftModel.from_pretrained(base, {plan.out_dir!r})\n"
        f"tokenizer = AutoTokenizer.from_pretrained({plan.out_dir!r})"
    )
    what = (
        f"A LoRA adapter (PEFT; r = {config.get('r')}, alpha = {config.get('lora_alpha')}). It "
        f"is not a whole model: it needs the base model {plan.base} that the run trained on"
        + (" (loaded in 4-bit for training; load it as you like)" if plan.quantized else "")
        + '. To get a standalone model, export it as a merged model ("Merged model" in the '
        "Export dialog; --format merged on the command line)." + _imported_note(plan.base)
    )
    eos = tokenizer.eos_token_id
    stop = [eos] if isinstance(eos, int) else []
    _write_text(folder, "README.txt", _readme(plan, what, load, tokenizer, stop))
    stage(0.95, "Adapter written")
    return {"dtype": _adapter_dtype(folder)}


def _imported_note(base: str) -> str:
    """Where a base imported from a GGUF file came from: its folder is the app's cache, which
    means nothing on another computer (found exporting a SmolLM2 run: the README named only
    the cache folder). '' for any other base."""
    from grpo_desktop.engine.models.gguf_import import read_record

    record = read_record(base) if os.path.isdir(base) else None
    if not record or not record.get("source"):
        return ""
    return (
        f" That base is GRPO Desktop's {record.get('dtype', 'float32')} import of the GGUF file "
        f"{record['source']} ({record.get('quantization', '?')}), in the app's model cache: "
        "elsewhere, load that GGUF with transformers (AutoModelForCausalLM.from_pretrained("
        "folder, gguf_file=name)) or open it in GRPO Desktop, which imports it the same way."
    )


def _adapter_dtype(folder: str) -> str | None:
    from grpo_desktop.engine.export.plan import safetensors_tensors

    dtypes = {d for d, _n in safetensors_tensors(folder).values()}
    names = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
    return names.get(dtypes.pop()) if len(dtypes) == 1 else None


def _write_text(folder: str, name: str, text: str) -> None:
    with open(os.path.join(folder, name), "w", encoding="utf-8") as fh:
        fh.write(text)


def _check_architecture(path: str, trust: bool) -> None:
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
    except (ValueError, KeyError) as exc:
        raise UnsupportedArchitecture(
            f"The model in {path} has an architecture this transformers cannot load "
            f"({str(exc).splitlines()[0]}). Export supports the causal language models "
            f"transformers knows ({len(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)} architectures, "
            f"among them {', '.join(FAMILIAR)}); upgrade transformers, or trust the model's own "
            "code if it ships some. (GGUF: Llama and Qwen2 only.)"
        ) from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not trust:
        known = ", ".join(t for t in FAMILIAR if t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
        raise UnsupportedArchitecture(
            f"The model in {path} is a {config.model_type!r} model, which is not a causal "
            f"language model transformers can load for export. Supported: {known} and the "
            f"other causal LMs of transformers ({len(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)} in all)."
        )
    quantized = getattr(config, "quantization_config", None)
    if isinstance(quantized, dict) and quantized.get("quant_method") == "bitsandbytes":
        return  # dequantized before the merge (write_merged)
    if quantized is not None:
        method = quantized.get("quant_method") if isinstance(quantized, dict) else None
        raise ExportError(
            f"The base model in {path} is saved already quantized ({method or 'quantized'}), "
            "so there are no full-precision weights to merge the adapter into. Download the "
            "unquantized model, point model.name_or_path in the run's config.json at it, and "
            'export again (or export the adapter alone: "LoRA adapter" in the Export dialog, '
            "--format adapter on the command line)."
        )


# torch's load_state_dict error for a tensor of another shape (a PEFT adapter's).
_SIZE_MISMATCH = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\(\[([\d, ]*)\]\) from "
    r"checkpoint, the shape in current model is torch\.Size\(\[([\d, ]*)\]\)"
)
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def _shape_text(shape) -> str:
    dims = [str(d).strip() for d in (shape.split(",") if isinstance(shape, str) else shape)]
    return "×".join(d for d in dims if d) or "a scalar"


def _wrong_shape(plan: ExportPlan, file: str, key: str, found, expected) -> UserError:
    """A checkpoint whose tensor `key` has another shape than its model needs: named, with both
    shapes, instead of the loader's traceback."""
    from grpo_desktop.engine.runs.checkpoint import DamagedCheckpoint

    where = plan.checkpoint or os.path.dirname(plan.weights or "")
    inside = os.path.basename(plan.weights or "")
    return DamagedCheckpoint(
        where,
        f"{inside}/{file}" if inside else file,
        f"the tensor {key} has shape {_shape_text(found)}, but the model needs "
        f"{_shape_text(expected)}; it was not exported. Export another checkpoint (--checkpoint "
        "STEP), or put back an intact copy of this one",
    )


def _check_shapes(plan: ExportPlan, trust: bool) -> None:
    """Every tensor in the full weights' safetensors files that the model has, in the shape its
    config.json says (the model built on the meta device: no memory, no weights read). Anything
    this cannot read is left to the loader, which says what is wrong with it."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = plan.weights or ""
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=trust)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust)
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    except Exception:  # noqa: BLE001 - the loader says what is wrong
        return
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".safetensors")):
        try:
            with safe_open(os.path.join(folder, name), "pt") as fh:
                found = {key: tuple(fh.get_slice(key).get_shape()) for key in fh.keys()}  # noqa: SIM118
        except Exception:  # noqa: BLE001 - a damaged file: the loader says what is wrong
            continue
        for key in sorted(found):
            if key in expected and found[key] != expected[key]:
                raise _wrong_shape(plan, name, key, found[key], expected[key])


def write_merged(plan: ExportPlan, folder: str, stage, remote_code=None) -> dict:
    """The merged model folder; returns summary fields.

    Loads the base (or a full fine-tuning checkpoint's weights) in the plan's dtype, merges the
    adapter and saves it; the generation_config's eos_token_id is every id the run stopped
    completions at (engine/sampling/rollout.py, `stop_ids`). A 4-bit or 8-bit run's base is
    reloaded unquantized in bfloat16 from its folder (export/plan.py says why); a base saved
    already quantized by bitsandbytes (no full-precision copy) is dequantized to bfloat16
    first. Other saved quantizations (GPTQ, AWQ …) are refused with what to do."""
    import torch
    from transformers import AutoModelForCausalLM

    from grpo_desktop.engine.models.loading import _quiet_transformers, load_tokenizer
    from grpo_desktop.engine.sampling.rollout import stop_ids

    _quiet_transformers()  # no per-file progress bars: `stage` reports the progress

    if plan.is_adapter:
        _check_base_available(plan)
    source = plan.base if plan.is_adapter else plan.weights
    trust = check_permission(plan.cfg.model.trust_remote_code, source, remote_code)
    _check_architecture(source, trust)
    dtype = getattr(torch, plan.dtype)
    what_base = "the base model" if plan.is_adapter else "the fine-tuned weights"
    stage(0.05, f"Loading {what_base} ({plan.dtype})")
    if plan.prequantized:  # no full-precision copy: the saved quantized weights, dequantized
        model = AutoModelForCausalLM.from_pretrained(
            source, device_map={"": "cpu"}, trust_remote_code=trust
        )
        model = model.dequantize().to(dtype)
    else:
        if not plan.is_adapter:
            _check_shapes(plan, trust)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=trust)
    if plan.is_adapter:
        from peft import PeftModel

        stage(0.4, "Merging the adapter into the weights")
        try:
            model = PeftModel.from_pretrained(model, plan.weights).merge_and_unload()
        except RuntimeError as exc:
            mismatch = _SIZE_MISMATCH.search(str(exc))
            if mismatch is None:
                raise
            key, found, expected = mismatch.groups()
            raise _wrong_shape(
                plan, ADAPTER_WEIGHTS, key.replace(".default.", "."), found, expected
            ) from None
    model.to(dtype)
    token_source = plan.base if plan.is_adapter else plan.weights
    run_tokenizer = load_tokenizer(token_source, plan.cfg.model.trust_remote_code, remote_code)
    stop = stop_ids(model, run_tokenizer)
    gen = model.generation_config
    gen.eos_token_id = stop[0] if len(stop) == 1 else stop
    gen.pad_token_id = run_tokenizer.pad_token_id
    stage(0.55, f"Writing the weights ({size_text(plan.parameters * dtype.itemsize)})")
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    del model
    stage(0.9, "Saving the tokenizer")
    tokenizer = _load_tokenizer(token_source, plan, remote_code)
    tokenizer.save_pretrained(folder)
    load = (
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"model = AutoModelForCausalLM.from_pretrained({plan.out_dir!r})\n"
        f"tokenizer = AutoTokenizer.from_pretrained({plan.out_dir!r})"
    )
    kind = "LoRA adapter merged into the base model" if plan.is_adapter else "fine-tuned model"
    what = (
        f"A whole model ({kind}), {plan.parameters / 1e6:,.1f}M weights in {plan.dtype}; it "
        "needs nothing else."
    )
    _write_text(folder, "README.txt", _readme(plan, what, load, tokenizer, stop))
    return {"dtype": plan.dtype, "stop_ids": stop, "parameters": plan.parameters}
