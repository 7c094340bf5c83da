"""Export a trained run for everyday use: a PEFT adapter, a merged model, GGUF, or a TRL project.

    export(source, fmt, out_dir, *, checkpoint=None, outtype="f16", force=False,
           progress=None, cancel=None, remote_code=None) -> dict

`source` is a run folder or a checkpoint folder (RUN/checkpoints/step-N); for `trl` also a
settings JSON or a TrainConfig. Sessions are resolved to their run folder by the caller
(cli/export_cmd.py, the Export dialog): the engine does not read the session layer. Everything is
written into a temporary folder beside `out_dir` and renamed into place at the end, so a crash, a
Cancel or a full disk never leaves a half export under the chosen name.

Try it:  grpo-desktop train --demo --out runs/demo && \\
    python -c "from grpo_desktop.engine.export.pipeline import export; \\
print(export('runs/demo', 'merged', '/tmp/demo-merged', force=True))"
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.export.plan import (  # noqa: F401 (re-exported)
    FORMATS,
    OUTTYPES,
    ExportError,
    ExportPlan,
    MissingBaseModel,
    plan_export,
)
from grpo_desktop.engine.units import folder_bytes, size_text

Progress = Callable[[float, str], None]
SLACK = 1 << 20  # free space kept beyond the expected size (metadata, file system blocks)


class ExportCancelled(UserError):
    """The user cancelled the export; nothing was left behind."""


class ExportDiskFull(ExportError):
    """Not enough free space for the export (before or while writing); nothing was left."""


def _check_out_dir(out_dir: str, force: bool) -> None:
    if os.path.islink(out_dir):
        if not force:
            raise ExportError(
                f"{out_dir} is a symbolic link (to {os.readlink(out_dir)}). Choose another "
                "folder, or replace the link with the export with --force (in the app: confirm "
                "the replacement); what it points to is left as it is."
            )
        return
    if os.path.isfile(out_dir):
        raise ExportError(f"{out_dir} is a file, not a folder: choose a folder to export into.")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not force:
        raise ExportError(
            f"{out_dir} already exists and is not empty. Choose a new or empty folder, or "
            "replace what is there with --force (in the app: confirm the replacement)."
        )


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def _check_not_source(out_dir: str, protected: list[tuple[str, str]]) -> None:
    """Refuse an output that is, holds or lies inside a folder the export reads (the run, the
    session, a local base model): with --force it would be replaced. Real paths are compared,
    so a symlink or a `..` does not get around it."""
    real_out = os.path.realpath(out_dir)
    found = []  # (rank, tie-break, how, what, folder): the most telling relation is named
    for what, folder in protected:
        real = os.path.realpath(folder)
        if real_out == real:
            found.append((0, 0, "is", what, folder))
        elif _inside(real_out, real):  # the innermost folder it lies in (the run, not its session)
            found.append((1, -len(real), "lies inside", what, folder))
        elif _inside(real, real_out):  # the outermost folder it holds (the session, not its run)
            found.append((2, len(real), "holds", what, folder))
    if found:
        _rank, _tie, how, what, folder = min(found)
        shown = out_dir if real_out == out_dir else f"{out_dir} (really {real_out})"
        raise ExportError(
            f"The output folder {shown} {how} {what} {folder}, which the export reads; writing "
            f"there would replace or delete it. Choose an output folder that is neither in "
            f"{folder} nor above it: a new folder beside it, say."
        )


def _protected(plan: ExportPlan, source, protect) -> list[tuple[str, str]]:
    folders = [("the session", os.path.abspath(os.path.expanduser(f))) for f in protect]
    run_dir = plan.run_dir
    if run_dir is None and isinstance(source, str) and os.path.isdir(source):
        run_dir = os.path.abspath(os.path.expanduser(source))  # trl from a run folder
    if run_dir:
        folders.append(("the source run", run_dir))
    if plan.fmt != "trl" and plan.base and plan.base_is_local:
        folders.append(("the base model", plan.base))
    return folders


def _free(folder: str) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _check_space(parent: str, plan: ExportPlan) -> None:
    free = _free(parent)
    if free is not None and free < plan.needed_bytes + SLACK:
        raise ExportDiskFull(
            f"Not enough free space at {parent}: the {plan.fmt} export needs about "
            f"{size_text(plan.needed_bytes)} and {size_text(free)} is free. Free some space or "
            "choose a folder on another disk. Nothing was written."
        )


def _full_disk_message(parent: str, plan: ExportPlan, exc: BaseException) -> ExportDiskFull:
    free = _free(parent)
    left = f"{size_text(free)} is free now" if free is not None else "the free space is unknown"
    # An error's own words when it has them (OSError's strerror), never a list (shutil.Error's).
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "No space left on device"
    return ExportDiskFull(
        f"The disk at {parent} filled up while the {plan.fmt} export was written "
        f"({why}); what was "
        f"written has been removed and {left}. The export needs about "
        f"{size_text(plan.needed_bytes)}: free some space or choose a folder on another disk."
    )


class _Stages:
    """progress and cancel for one export: `stage(fraction, message)` reports and checks."""

    def __init__(self, progress: Progress | None, cancel: Callable[[], bool] | None):
        self.progress, self.cancel = progress, cancel

    def __call__(self, fraction: float, message: str) -> None:
        if self.cancel is not None and self.cancel():
            raise ExportCancelled("The export was cancelled; nothing was written.")
        if self.progress is not None:
            self.progress(max(0.0, min(1.0, fraction)), message)

    def scaled(self, start: float, end: float) -> Callable:
        """A progress callback for another writer (GGUF, TRL), mapped into [start, end]; it
        accepts (fraction, message), (message,) or (done, total[, message])."""

        said = [0]

        def report(*args) -> None:
            numbers = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
            text = next((a for a in args if isinstance(a, str)), "")
            said[0] += 1  # a writer that reports only messages moves the bar a bit each time
            fraction = numbers[0] if len(numbers) == 1 else 1 - 0.75 ** said[0]
            if len(numbers) >= 2 and numbers[1]:
                fraction = numbers[0] / numbers[1]
            self(start + (end - start) * min(1.0, max(0.0, float(fraction))), text)

        return report


def export(
    source: str | TrainConfig,
    fmt: str,
    out_dir: str,
    *,
    checkpoint: int | None = None,
    outtype: str = "f16",
    force: bool = False,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    remote_code=None,
    protect: tuple[str, ...] = (),
) -> dict:
    """Export `source` as `fmt` into `out_dir`. Raises UserError subclasses with a message for
    the user; nothing is left behind on any error.

    - `adapter`: the checkpoint's LoRA adapter (adapter_config.json's base_model_name_or_path
      names the base it needs), the base's tokenizer and a README.txt;
      `PeftModel.from_pretrained(base, out_dir)` loads it.
    - `merged`: the whole model (safetensors, tokenizer, chat template, a generation_config
      listing every stop id the run stopped at), loadable with
      `AutoModelForCausalLM.from_pretrained(out_dir)` (export/merge.py). A full fine-tuning run
      exports its own weights; a 4-bit or 8-bit run merges into the base reloaded unquantized in
      bfloat16 (export/plan.py says why, and how large).
    - `gguf`: the merged model in a temporary folder, then `export.gguf.write_gguf`. A run on
      one of Ollama's models goes back to Ollama: the file is named after it
      (`qwen2.5:0.5b` → qwen2.5-0.5b-grpo-f16.gguf) and the Modelfile keeps its template, stop
      words and parameters, with the run's system prompt (modelfile.back_to_ollama); the summary
      adds `ollama_name` and the `ollama_create` line.
    - `trl`: `export.trl_project.write_trl_project` with the run's (or the given) settings.

    Before writing, the free space is checked against the expected size; a disk that fills up
    anyway (ENOSPC) removes what was written and raises `ExportDiskFull`. An existing, non-empty
    `out_dir` is refused unless `force` (then replaced at the end); one that is, holds or lies
    inside the source run, a local base model or a `protect` folder (the session the run came
    from) is always refused, real paths compared. An `out_dir` that is a symlink is replaced as
    a link: the link goes, its target is never touched. `progress(fraction,
    message)` is called as it goes; `cancel()` returning True stops it between stages
    (`ExportCancelled`). Returns a summary dict (format, out, bytes, seconds, dtype, step, …)."""
    t0 = time.perf_counter()
    stage = _Stages(progress, cancel)
    plan = plan_export(source, fmt, checkpoint, outtype)
    out_dir = os.path.abspath(os.path.expanduser(out_dir))
    _check_not_source(out_dir, _protected(plan, source, protect))
    _check_out_dir(out_dir, force)
    plan.out_dir = out_dir
    parent = os.path.dirname(out_dir)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"Cannot create the folder {parent}: {exc.strerror}.") from None
    _check_space(parent, plan)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.export-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    stage(0.0, f"Exporting {fmt} to {out_dir}")
    try:
        os.makedirs(tmp)
        summary = _write(plan, tmp, outtype, stage, remote_code)
        stage(0.99, "Moving the export into place")
        _replace(tmp, out_dir)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, UserError):
            raise
        from grpo_desktop.engine.runs.checkpoint import is_disk_full

        if isinstance(exc, Exception) and is_disk_full(exc, parent):
            raise _full_disk_message(parent, plan, exc) from exc
        if isinstance(exc, OSError):
            raise ExportError(
                f"Writing the export into {parent} failed: {exc.strerror or exc}. Check that the "
                "folder can be written, or choose another."
            ) from exc
        raise
    size = folder_bytes(out_dir)
    stage(1.0, f"Exported {size_text(size)} to {out_dir}")
    result = {
        "format": fmt,
        "out": out_dir,
        "bytes": size,
        "seconds": round(time.perf_counter() - t0, 2),
        "dtype": summary.pop("dtype", plan.dtype or None),
        "step": plan.step,
        "base": plan.base or None,
    }
    if plan.dtype_reason and fmt in ("merged", "gguf"):
        result["dtype_reason"] = plan.dtype_reason
    result.update(summary)
    return result


def _replace(tmp: str, out_dir: str) -> None:
    """Rename the finished export into place; an old folder (allowed by force) goes last. An
    `out_dir` that is a symlink is removed as a link (its target is not touched)."""
    if os.path.islink(out_dir):
        os.unlink(out_dir)
        os.replace(tmp, out_dir)
        return
    old = None
    if os.path.exists(out_dir):
        old = f"{out_dir}.replaced-{os.getpid()}"
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write(plan: ExportPlan, tmp: str, outtype: str, stage: _Stages, remote_code) -> dict:
    if plan.fmt == "trl":
        return _write_trl(plan, tmp, stage)
    from grpo_desktop.engine.export import merge as export_merge

    if plan.fmt == "adapter":
        return export_merge.write_adapter(plan, tmp, stage, remote_code)
    if plan.fmt == "merged":
        return export_merge.write_merged(plan, tmp, stage, remote_code)
    from grpo_desktop.engine.data.dataset import worked_example
    from grpo_desktop.engine.export.modelfile import (
        add_conversation,
        back_to_ollama,
        grpo_model_name,
    )
    from grpo_desktop.engine.models.local_models import ollama_origin

    origin = ollama_origin(plan.cfg.model.name_or_path)  # an Ollama model goes back to Ollama
    model_name = grpo_model_name(origin.name) if origin else os.path.basename(plan.out_dir)
    merged = os.path.join(tmp, ".merged", model_name)  # names the .gguf
    export_merge.write_merged(
        plan, merged, _Stages(stage.scaled(0.0, 0.6), stage.cancel), remote_code
    )
    stage(0.6, f"Writing the GGUF file ({outtype})")
    try:
        from grpo_desktop.engine.export.gguf import write_gguf
    except ImportError as exc:
        raise ExportError(f"GGUF export is not available in this installation ({exc}).") from None
    gguf_dir = os.path.join(tmp, "gguf")
    result = write_gguf(merged, gguf_dir, outtype=outtype, progress=stage.scaled(0.6, 0.98))
    shutil.rmtree(os.path.dirname(merged), ignore_errors=True)
    for name in os.listdir(gguf_dir):  # the GGUF folder's files become the export's
        os.replace(os.path.join(gguf_dir, name), os.path.join(tmp, name))
    os.rmdir(gguf_dir)
    summary = dict(result) if isinstance(result, dict) else {}
    system, example = plan.cfg.data.system_prompt, worked_example(plan.cfg.data)
    prefix = plan.cfg.data.answer_prefix
    if origin is not None:
        summary.update(back_to_ollama(tmp, origin, model_name, system, example, prefix))
        stage(0.98, f"To add it to Ollama, in {plan.out_dir}: {summary['ollama_create']}")
    elif os.path.exists(os.path.join(tmp, "Modelfile")):  # the run's system prompt and example
        add_conversation(os.path.join(tmp, "Modelfile"), system, example, prefix)
    if "modelfile" in summary:  # where it ends up, not the temporary folder it was written in
        summary["modelfile"] = os.path.join(plan.out_dir, "Modelfile")
    summary.setdefault("dtype", outtype)
    for key in ("out", "out_dir", "path", "bytes", "seconds"):  # the export's own say these
        summary.pop(key, None)
    return summary


def _write_trl(plan: ExportPlan, tmp: str, stage: _Stages) -> dict:
    try:
        from grpo_desktop.engine.export.trl_project import write_trl_project
    except ImportError as exc:
        raise ExportError(f"TRL export is not available in this installation ({exc}).") from None
    stage(0.05, "Writing the TRL project")
    result = write_trl_project(plan.cfg, tmp, progress=stage.scaled(0.05, 0.98))
    summary = dict(result) if isinstance(result, dict) else {}
    for key in ("out", "out_dir", "path", "bytes", "seconds"):  # the export's own say these
        summary.pop(key, None)
    summary.setdefault("dtype", None)
    return summary
