"""What an export will read and write, found without torch: the run and checkpoint, the base
model, the output's dtype and expected size, and the user-facing errors for a bad source.

`plan_export(source, fmt, checkpoint=None, outtype="f16")` answers the Export dialog's and the
CLI's questions before anything is loaded: which checkpoint (the newest whole one, or step
`checkpoint`), which base model the adapter needs (a folder, a hub id, or the built-in demo's
folder), the dtype the result is written in and why (a 4-bit or 8-bit run merges into bfloat16),
and how many bytes it takes (read from the safetensors headers, nothing loaded; a TRL project
is written into a temporary folder and counted, so the size shown is the size written).
export/pipeline.py does the writing; this module only reads. Errors a user can act on are
`ExportError` (a UserError): no checkpoint yet, a damaged or missing step, a missing base model,
a format that does not fit the run, a symbolic link in the checkpoint that leads out of the run
(`check_links`). Torch-free.

Try it:  python -c "from grpo_desktop.engine.export.plan import plan_export; \\
print(plan_export('runs/demo', 'merged'))"
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field

from grpo_desktop.engine.config import TrainConfig, load_config
from grpo_desktop.engine.errors import ModelError, UserError
from grpo_desktop.engine.models.gguf_info import is_gguf_file
from grpo_desktop.engine.runs.files import is_run_dir, read_run_config
from grpo_desktop.engine.runs.layout import (
    STATE_FILE,
    checkpoint_problem,
    intact_checkpoints,
    list_checkpoints,
)
from grpo_desktop.engine.units import folder_bytes, size_text

FORMATS = ("adapter", "merged", "gguf", "trl")
OUTTYPES = ("f16", "q8_0")
BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
)  # fmt: skip
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
TRL_BYTES = 200_000  # a TRL project's scripts, configs, README: when its data cannot be read


class ExportError(UserError):
    """An export that cannot be done as asked; the message says why and what to do."""


class MissingBaseModel(ExportError, ModelError):
    """The base model the run was trained on cannot be found."""


@dataclass
class ExportPlan:
    fmt: str
    cfg: TrainConfig
    out_dir: str = ""  # where the export ends up (set by export.export)
    run_dir: str | None = None  # None for a settings file (trl)
    checkpoint: str | None = None  # the checkpoint folder
    step: int | None = None
    weights: str | None = None  # its adapter/ or model/ folder
    is_adapter: bool = False
    base: str = ""  # the base model: a local folder (absolute) or a hub id
    base_is_local: bool = True
    dtype: str = ""  # what the weights are written in (merged, gguf's temporary model)
    dtype_reason: str = ""  # why, when it is not the base's own dtype
    prequantized: str = ""  # the base folder's saved quantization ("bitsandbytes 4-bit"), if any
    parameters: int = 0
    result_bytes: int = 0  # what the output folder will take
    needed_bytes: int = 0  # what the disk must hold while writing (gguf: + the merged model)
    notes: list[str] = field(default_factory=list)

    @property
    def quantized(self) -> bool:
        return self.cfg.quantization.mode != "none" and self.is_adapter


def read_config(run_dir: str) -> TrainConfig:
    """The settings a run was started with (its config.json), torch-free."""
    return read_run_config(run_dir, ExportError)


def base_location(name_or_path: str) -> tuple[str, bool]:
    """(where the base model is, whether that is a local folder); MissingBaseModel when a
    local folder is gone."""
    name = name_or_path.strip()
    if name.startswith("builtin:"):
        from importlib import resources

        shipped = resources.files("grpo_desktop") / "resources" / "demo_model"
        if name == "builtin:demo" and (shipped / "config.json").is_file():
            return os.path.abspath(str(shipped)), True
        from grpo_desktop.engine.models.loading import builtin_model_path  # torch: rare fallback

        return os.path.abspath(builtin_model_path(name[len("builtin:") :])), True
    expanded = os.path.expanduser(name)
    if os.path.isdir(expanded) and os.path.isfile(os.path.join(expanded, "config.json")):
        return os.path.abspath(expanded), True
    if is_gguf_file(expanded):  # a GGUF: the folder it was imported into (imported if need be)
        from grpo_desktop.engine.models.gguf_import import import_gguf, imported_folder

        return imported_folder(expanded) or import_gguf(expanded), True
    looks_local = name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1
    if looks_local or os.path.exists(expanded):
        raise MissingBaseModel(
            f"The run's base model {expanded} (model.name_or_path in its config.json) is not "
            "there any more, or is not a model folder (no config.json), and the export needs it "
            "(its weights and tokenizer). Put the model back at that path, or edit "
            "model.name_or_path in the run's config.json to where it is now."
        )
    return name, False  # a hub id: loaded from the local Hugging Face cache


def hub_snapshot(repo: str) -> str | None:
    """The local cache folder of a hub model, or None when it is not cached."""
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo, local_files_only=True)
    except Exception:  # noqa: BLE001 (not cached, a bad id, no hub library: all mean "not here")
        return None


def safetensors_tensors(folder: str) -> dict[str, tuple[str, int]]:
    """{name: (dtype, numel)} of every tensor in the folder's .safetensors files (headers only)."""
    found: dict[str, tuple[str, int]] = {}
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    except OSError:
        return found
    for name in names:
        try:
            with open(os.path.join(folder, name), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            continue
        for key, value in header.items():
            if key != "__metadata__" and isinstance(value, dict):
                found[key] = (value.get("dtype", "F32"), math.prod(value.get("shape", [])))
    return found


def _stored_dtype(folder: str | None) -> str:
    """The dtype a model folder's config.json says its weights are in (float32 if unsaid)."""
    try:
        with open(os.path.join(folder or "", "config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return "float32"
    dtype = config.get("dtype") or config.get("torch_dtype") or "float32"
    return dtype if dtype in DTYPE_BYTES else "float32"


QUANT_STATE = (".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", ".SCB")


def weight_count(tensors: dict[str, tuple[str, int]]) -> int:
    """The weights the tensors hold: bitsandbytes' 4-bit weights pack two into a byte (U8), and
    their quantization constants are not weights."""
    total = 0
    for name, (dtype, numel) in tensors.items():
        if name.endswith(QUANT_STATE) or ".quant_state." in name or name.endswith("weight_format"):
            continue
        total += numel * 2 if dtype == "U8" else numel
    return total


def _saved_quantization(folder: str | None) -> str:
    """The quant_method a model folder's config.json says its weights are saved in ('' if none)."""
    try:
        with open(os.path.join(folder or "", "config.json"), encoding="utf-8") as fh:
            quantization = json.load(fh).get("quantization_config")
    except (OSError, ValueError, AttributeError):
        return ""
    if not isinstance(quantization, dict):
        return ""
    method = str(quantization.get("quant_method") or "quantized")
    if method == "bitsandbytes":
        return "bitsandbytes 4-bit" if quantization.get("load_in_4bit") else "bitsandbytes 8-bit"
    return method


def _folder_bytes(folder: str, names) -> int:
    return sum(
        os.path.getsize(os.path.join(folder, n))
        for n in names
        if os.path.isfile(os.path.join(folder, n))
    )


def pick_checkpoint(run_dir: str, step: int | None) -> tuple[int, str]:
    """(step, folder) of the checkpoint to export: the newest whole one, or `step`."""
    found = list_checkpoints(run_dir)
    if not found:
        raise ExportError(
            f"The run in {run_dir} has saved no checkpoint yet, so there are no trained weights "
            "to export. Train until a checkpoint is saved (run.checkpoint_every steps; Stop also "
            "saves one), then export."
        )
    if step is not None:
        chosen = [(s, p) for s, p in found if s == step]
        if not chosen:
            steps = ", ".join(str(s) for s, _ in found)
            raise ExportError(
                f"The run in {run_dir} has no checkpoint at step {step}; it has: {steps}. "
                "Give one of those with --checkpoint, or leave it out for the newest."
            )
        problem = checkpoint_problem(chosen[0][1])
        if problem is not None:
            raise ExportError(
                f"The checkpoint {chosen[0][1]} is damaged: {problem[0]}: {problem[1]}. Export "
                "another checkpoint."
            )
        return chosen[0]
    whole, damaged = intact_checkpoints(run_dir)
    if not whole:
        why = "; ".join(f"step {s}: {w}" for s, _p, w in damaged)
        raise ExportError(f"No checkpoint of the run in {run_dir} is whole ({why}).")
    return whole[-1]


def shipped_builtin_model(name: str) -> str | None:
    """The folder of builtin:<name> when it ships with the package (the demo, once trained);
    None otherwise (then engine/models/loading.py builds a tiny one in the user's cache)."""
    from importlib import resources

    shipped = resources.files("grpo_desktop") / "resources" / "demo_model"
    if name.strip() == "builtin:demo" and (shipped / "config.json").is_file():
        return str(shipped)
    return None


def _plan_trl(source, fmt: str) -> ExportPlan:
    """The TRL project: its scripts and configs, its data files, and the built-in model it
    copies into model/ (a model folder or hub id is named, not copied), measured."""
    if isinstance(source, TrainConfig):
        cfg = source
    elif os.path.isdir(source):
        cfg = read_config(source)
    else:
        cfg = load_config(source)
    plan = ExportPlan(fmt, cfg)
    measured = trl_project_bytes(cfg)
    if measured is None:  # a hub dataset not in the local cache: its rows are not known here
        model = shipped_builtin_model(cfg.model.name_or_path)
        measured = TRL_BYTES + (folder_bytes(model) if model else 0)
        plan.notes.append(
            f"The size is not known ahead: the data comes from the hub dataset "
            f"'{cfg.data.path}', which is not in the local cache yet (the project holds its "
            "rows)."
        )
    plan.result_bytes = plan.needed_bytes = measured
    return plan


_measured: dict[tuple, int] = {}  # the last measurement (the Export dialog asks on every change)


def trl_project_bytes(cfg: TrainConfig) -> int | None:
    """What the TRL project for `cfg` takes on disk, exactly: the project is written into a
    temporary folder and counted (its data files and the built-in model's copy are most of it,
    and only writing them says their size). None for a hub dataset that is not cached, which
    would be downloaded. Raises what writing the project raises (ConfigError, DataError)."""
    import tempfile

    from grpo_desktop.engine.export.trl_project import write_trl_project

    if cfg.data.source == "hub" and not _hub_cached(cfg):
        return None
    key = (json.dumps(cfg.to_dict(), sort_keys=True, default=str), _data_stamp(cfg))
    if key not in _measured:
        with tempfile.TemporaryDirectory(prefix="grpo-trl-size-") as folder:
            project = os.path.join(folder, "project")
            write_trl_project(cfg, project)
            _measured.clear()
            _measured[key] = folder_bytes(project)
    return _measured[key]


def _hub_cached(cfg: TrainConfig) -> bool:
    from grpo_desktop.engine.data.sources import _cached_subsets, _datasets_cache_dir

    _root, subsets = _cached_subsets(cfg.data, _datasets_cache_dir())
    return bool(subsets) and (not cfg.data.subset or cfg.data.subset in subsets)


def _data_stamp(cfg: TrainConfig) -> tuple:
    """The data file's size and time of change, so an edited file is measured again."""
    if cfg.data.source not in ("file", "disk"):
        return ()
    try:
        info = os.stat(os.path.expanduser(cfg.data.path))
    except OSError:
        return ()
    return (info.st_size, info.st_mtime_ns)


def plan_export(
    source: str | TrainConfig, fmt: str, checkpoint: int | None = None, outtype: str = "f16"
) -> ExportPlan:
    """What exporting `source` (a run folder or one of its checkpoint folders; for trl also a
    settings JSON or a TrainConfig) as `fmt` will do. Raises ExportError."""
    if fmt not in FORMATS:
        raise ExportError(f"Unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}.")
    if outtype not in OUTTYPES:
        raise ExportError(f"Unknown GGUF outtype {outtype!r}: choose f16 or q8_0.")
    if fmt == "trl":
        return _plan_trl(source, fmt)
    if not isinstance(source, str):
        raise ExportError(f"The {fmt} format exports a run folder, not settings alone.")
    path = os.path.abspath(os.path.expanduser(source))
    if os.path.isfile(os.path.join(path, STATE_FILE)):  # a checkpoint folder: RUN/checkpoints/x
        run_dir = os.path.dirname(os.path.dirname(path))
        checkpoint = checkpoint if checkpoint is not None else _state_step(path)
    else:
        run_dir = path
    if not is_run_dir(run_dir):
        raise ExportError(
            f"{source} is not a run folder (one holds config.json and events.jsonl or "
            "checkpoints/): give the folder a run trained into, a session (NAME.grpo), or a "
            "checkpoint folder."
        )
    cfg = read_config(run_dir)
    step, folder = pick_checkpoint(run_dir, checkpoint)
    adapter = os.path.join(folder, "adapter")
    is_adapter = os.path.isdir(adapter)
    weights = adapter if is_adapter else os.path.join(folder, "model")
    plan = ExportPlan(
        fmt,
        cfg,
        run_dir=run_dir,
        checkpoint=folder,
        step=step,
        weights=weights,
        is_adapter=is_adapter,
    )
    if fmt == "adapter" and not is_adapter:
        raise ExportError(
            "This run fine-tuned all the model's weights (LoRA was off), so it has no adapter "
            'to export. Export it as a whole model instead: "Merged model" or GGUF in the Export '
            "dialog (--format merged or gguf on the command line)."
        )
    check_links(run_dir, weights)
    if is_adapter or fmt == "adapter":
        plan.base, plan.base_is_local = base_location(cfg.model.name_or_path)
    else:  # a full fine-tuning checkpoint holds the whole model and its tokenizer
        with_base = _optional_base(cfg.model.name_or_path)
        plan.base, plan.base_is_local = with_base if with_base else (weights, True)
    _sizes(plan, outtype)
    return plan


def check_links(run_dir: str, folder: str) -> None:
    """Refuse a symbolic link in the checkpoint's weights folder that leads out of the run: the
    export reads the files there (and the adapter export copies them), so a planted link would
    carry another file's bytes into it. Links that stay inside the run are followed."""
    real_run = os.path.realpath(run_dir)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        real = os.path.realpath(path)
        if os.path.commonpath([real, real_run]) != real_run:
            raise ExportError(
                f"{path} leads through a symbolic link to {real}, outside the run {run_dir}, "
                "and the export reads only the run's own files. Remove the link (or replace it "
                "with the file the checkpoint saved), then export again."
            )


def _optional_base(name: str) -> tuple[str, bool] | None:
    try:
        return base_location(name)
    except MissingBaseModel:
        return None


def _state_step(path: str) -> int | None:
    try:
        with open(os.path.join(path, STATE_FILE), encoding="utf-8") as fh:
            return int(json.load(fh)["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sizes(plan: ExportPlan, outtype: str) -> None:
    base_folder = plan.base if plan.base_is_local else hub_snapshot(plan.base)
    model_folder = base_folder if plan.is_adapter else plan.weights
    tensors = safetensors_tensors(model_folder or "")
    plan.parameters = weight_count(tensors)
    plan.prequantized = _saved_quantization(base_folder) if plan.is_adapter else ""
    stored = _stored_dtype(base_folder if plan.is_adapter else plan.weights)
    if not plan.is_adapter:  # saved master weights may be float32: the base's dtype decides
        stored = _stored_dtype(base_folder) if base_folder != plan.weights else stored
    plan.dtype = stored
    if plan.prequantized:
        plan.dtype = "bfloat16"
        plan.dtype_reason = (
            f"The base model {plan.base} is saved already quantized ({plan.prequantized}), with "
            "no full-precision copy to merge into, so its weights are dequantized to bfloat16 "
            "and the adapter is merged into them (the weights the run trained with): about "
            f"{size_text(plan.parameters * 2)} ({plan.parameters / 1e6:,.1f}M weights × 2 bytes)."
        )
    elif plan.quantized:
        plan.dtype = "bfloat16"
        mode = "4-bit (NF4)" if plan.cfg.quantization.mode == "4bit" else "8-bit"
        bits = 4.5 if plan.cfg.quantization.mode == "4bit" else 8
        plan.dtype_reason = (
            f"This run trained on a {mode} copy of the base model. Merging adds the adapter's "
            f"update to every weight, which a {mode} weight cannot hold without being quantized "
            "again (losing part of what was learnt), so the base is loaded unquantized in "
            f"bfloat16 from {plan.base} and the adapter is merged into it: about "
            f"{size_text(plan.parameters * 2)} ({plan.parameters / 1e6:,.1f}M weights × 2 "
            f"bytes), against about {size_text(plan.parameters * bits / 8)} in {mode}."
        )
    token_folder = base_folder if plan.is_adapter else plan.weights
    tokenizer_bytes = _folder_bytes(token_folder or "", TOKENIZER_FILES)
    merged = plan.parameters * DTYPE_BYTES[plan.dtype] + tokenizer_bytes + 20_000
    if plan.fmt == "adapter":
        adapter_bytes = _folder_bytes(plan.weights, ADAPTER_FILES)
        plan.result_bytes = plan.needed_bytes = adapter_bytes + tokenizer_bytes + 10_000
    elif plan.fmt == "merged":
        plan.result_bytes = plan.needed_bytes = merged
    else:  # gguf: the merged model in a temporary folder, then the GGUF file
        per_weight = 2 if outtype == "f16" else 34 / 32  # q8_0: 32 int8 and one f16 scale
        plan.result_bytes = int(plan.parameters * per_weight) + tokenizer_bytes + 10_000
        plan.needed_bytes = plan.result_bytes + merged
    if not tensors and plan.fmt != "adapter":
        plan.notes.append(
            f"The size is not known ahead: no .safetensors weights were found in "
            f"{model_folder or plan.base} (the model is read from the Hugging Face cache)."
        )
