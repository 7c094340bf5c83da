"""Export a run's settings as a self-contained TRL + accelerate project folder.

`write_trl_project(cfg, out_dir)` writes train.py (TRL's GRPOTrainer with GRPO Desktop's rewards),
settings.json (the settings in TRL's terms, from the table in export/trl_map.py), the training
data as the app loads it, the custom checker's source, accelerate configs (one GPU, DDP,
DeepSpeed ZeRO-2/3, FSDP, several nodes), a SLURM job, pinned requirements and a README with the
launch commands, the code from elsewhere the project runs (`code_section`: the checker by its
SHA-256, the model's own code; train.py asks before either runs where it is not trusted) and the
settings TRL has no equivalent for. Whether that code may be exported at all is the caller's
question (the CLI's --trust-checker, the Export dialog's). A built-in model (builtin:demo) is
copied into model/ so the folder runs anywhere grpo-desktop is installed.

The templates are package data under grpo_desktop/resources/trl_project/. Torch-free: nothing
here imports torch, transformers or trl. Does not run the project (the tests do) and does not
know about sessions or runs (export/pipeline.py and the CLI turn those into a TrainConfig).

Try it:  python -c "from grpo_desktop.engine.export.trl_project import write_trl_project as w; \\
from grpo_desktop.engine.config import TrainConfig; print(w(TrainConfig(), '/tmp/trl_demo'))"
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from importlib import resources

from grpo_desktop import __version__
from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.data.dataset import Example, load_data, worked_example
from grpo_desktop.engine.errors import ConfigError, UserError
from grpo_desktop.engine.export.plan import base_location, shipped_builtin_model
from grpo_desktop.engine.export.trl_map import (
    MAPPED,
    batch_layout,
    export_settings,
    unmapped_rows,
)
from grpo_desktop.engine.models.gguf_info import is_gguf_file
from grpo_desktop.engine.models.remote_code import code_to_trust

# The versions the exported project was run with (tests/engine/export/test_export_trl.py checks that they are
# the installed ones, so a change of environment is noticed and the export tested again).
TESTED_VERSIONS = {
    "trl": "1.16.0",
    "transformers": "5.24.0",
    "peft": "0.21.2",
    "accelerate": "1.15.0",
    "datasets": "5.2.0",
    "bitsandbytes": "0.50.2",
}
TORCH_RANGE = "torch>=2.4,<2.15"  # as grpo-desktop's own dependency
ACCELERATE_CONFIGS = (
    "single_gpu.yaml",
    "multi_gpu.yaml",
    "deepspeed_zero2.yaml",
    "deepspeed_zero3.yaml",
    "fsdp.yaml",
    "multi_node.yaml",
)
LAYOUT_PROCESSES = (1, 2, 4, 8, 16)
Progress = Callable[[float, str], None]


def _template(name: str) -> str:
    return (resources.files("grpo_desktop") / "resources" / "trl_project" / name).read_text(
        encoding="utf-8"
    )


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _write_rows(path: str, rows: list[Example], question: str, answer: str) -> None:
    lines = [
        json.dumps({question: ex.problem, answer: ex.answer}, ensure_ascii=False) for ex in rows
    ]
    _write(path, "\n".join(lines) + ("\n" if lines else ""))


def _mixed_precision(dtype: str) -> str:
    return {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, "'no'")


def _copy_builtin_model(name: str, out_dir: str) -> str:
    """Copy builtin:<name>'s folder into out_dir/model; return the project-relative path."""
    source = shipped_builtin_model(name)
    if source is None:  # not shipped (a source checkout without weights): built (needs torch)
        from grpo_desktop.engine.models.loading import resolve_model_path

        source = resolve_model_path(name)
    target = os.path.join(out_dir, "model")
    if os.path.isdir(target):
        shutil.rmtree(target)
    _copy_tree(source, target)
    return "model"


def _copy_tree(source: str, target: str) -> None:
    """shutil.copytree without its shutil.Error list: the first file that cannot be written
    raises its own OSError (ENOSPC on a full disk), for the caller to say what happened."""
    for root, _dirs, files in os.walk(source):
        folder = os.path.join(target, os.path.relpath(root, source))
        os.makedirs(folder, exist_ok=True)
        for name in files:
            shutil.copy2(os.path.join(root, name), os.path.join(folder, name))


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _mapped_table() -> str:
    rows = [f"| `{m.setting}` | `{m.target}` | {_md(m.note)} |" for m in MAPPED]
    return "\n".join(rows)


def _unmapped_table(cfg: TrainConfig) -> str:
    rows = [f"| `{s}` | `{_md(v)}` | {_md(why)} |" for s, v, why in unmapped_rows(cfg)]
    return "\n".join(rows)


def _layouts(cfg: TrainConfig) -> tuple[str, int]:
    """The README's table of splits, and the processes a vLLM server leaves for training on 8."""
    a = cfg.algorithm
    total = a.prompts_per_step * a.num_generations
    rows = []
    for n in LAYOUT_PROCESSES:
        try:
            per, acc = batch_layout(total, n, micro=a.micro_batch_size, group=a.num_generations)
            rows.append(f"| {n} | {per} | {acc} |")
        except ValueError:
            rows.append(f"| {n} | - | - (does not divide {total}) |")
    trainers = max(n for n in range(1, 8) if total % n == 0)
    return "\n".join(rows), trainers


TASKS_REQUIREMENT = "reasoning-gym>=0.1.25"  # a task run's accuracy is the task's own checker


def requirements(task: bool = False) -> str:
    """requirements.txt: the tested versions, pinned (and reasoning-gym for a task run)."""
    lines = [f"grpo-desktop=={__version__}", TORCH_RANGE]
    lines += [f"{name}=={version}" for name, version in TESTED_VERSIONS.items()]
    lines += [TASKS_REQUIREMENT] if task else []
    return "\n".join(lines) + "\n"


def code_section(cfg: TrainConfig) -> str:
    """The README's list of the code from elsewhere this project runs: the custom checker (by
    its SHA-256, as GRPO Desktop remembers trust) and the model's own code when
    model.trust_remote_code is on; train.py asks before either runs where it is not trusted."""
    parts = []
    checker = cfg.rewards.custom_checker
    if checker.strip():
        digest = hashlib.sha256(checker.encode("utf-8")).hexdigest()
        parts.append(
            f"- `custom_checker.py` (SHA-256 `{digest}`): the session's custom checker, Python "
            "that scores every answer. train.py runs it in GRPO Desktop's sandboxed checker "
            "process (time and memory limits; not a security boundary). Read it before you "
            "run the project."
        )
    if cfg.model.trust_remote_code:
        codes = code_to_trust(cfg.model.name_or_path, True)
        where = "; ".join(c.describe() for c in codes) or "none found at export"
        parts.append(
            "- The model's own Python code (`trust_remote_code` is on): transformers imports "
            "the `.py` files that come with the model and its tokenizer, **unsandboxed**, "
            f"with your permissions. At export: {where}."
        )
    if not parts:
        return (
            "None from elsewhere: the rewards are GRPO Desktop's own (no custom checker) and "
            "the model's own code stays off (`trust_remote_code` is false)."
        )
    ask = (
        "Before the first run on a machine where GRPO Desktop has not trusted this exact code "
        "(its trust list: `~/.config/grpo-desktop/trusted_checkers.json`), `python train.py` "
        "shows it and asks; answering `y` remembers it there. A job that cannot answer (SLURM, "
        "several processes) stops with a message instead: pass "
    )
    flags = []
    if checker.strip():
        flags.append("`--trust-checker`")
    if cfg.model.trust_remote_code:
        flags.append("`--trust-remote-code`")
    ask += " and ".join(flags) + " to skip the question once you have read the code."
    return "\n".join(parts) + "\n\n" + ask


def _readme(cfg: TrainConfig, settings: dict, counts: tuple[int, int], model_note: str) -> str:
    a = cfg.algorithm
    layouts, trainers = _layouts(cfg)
    total = a.prompts_per_step * a.num_generations
    model = settings["runtime"]["model"]
    checker = (
        "| `custom_checker.py` | the session's custom checker: code from the session, run in "
        "GRPO Desktop's sandboxed checker process (see *Code this project runs*) |\n"
        if settings["rewards"].get("custom_checker")
        else ""
    )
    readme = _template("README.md.tmpl")
    gpus = ",".join(str(i) for i in range(1, trainers + 1))
    readme = readme.replace("CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7", f"CUDA_VISIBLE_DEVICES={gpus}")
    readme = readme.replace("--num_processes 7 train.py", f"--num_processes {trainers} train.py")
    readme = readme.replace(
        "  (7 processes must divide @BG@; otherwise serve on 2 GPUs and train on 6 or 4.)\n",
        f"  ({trainers} training processes: the most of 7 that divide {total}.)\n",
    )
    values = {
        "@APP_VERSION@": __version__,
        "@ACCELERATE@": TESTED_VERSIONS["accelerate"],
        "@TRAIN_ROWS@": f"{counts[0]:,}",
        "@HELDOUT_ROWS@": f"{counts[1]:,}",
        "@CHECKER_ROW@": checker,
        "@MODEL@": model,
        "@MODEL_NOTE@": model_note,
        "@BG@": str(total),
        "@B@": str(a.prompts_per_step),
        "@G@": str(a.num_generations),
        "@LAYOUTS@": layouts,
        "@MAPPED@": _mapped_table(),
        "@UNMAPPED@": _unmapped_table(cfg),
        "@CODE@": code_section(cfg),
    }
    for key, value in values.items():
        readme = readme.replace(key, value)
    return readme


def write_trl_project(cfg: TrainConfig, out_dir: str, *, progress: Progress | None = None) -> dict:
    """Write the TRL project for `cfg` into `out_dir` (created; files in it are replaced).

    The data goes to data/train.jsonl and the held-out rows to data/heldout.jsonl, read with the
    app's own loader; requirements.txt pins the versions this export was tested with.
    `progress(fraction, message)` is called before each part is written (fraction 0..1).
    Returns a summary: out_dir, files (relative paths), train_rows, heldout_rows, unmapped (the
    settings TRL has no equivalent for) and command (the one-process launch). Raises ConfigError
    for invalid settings and UserError (DataError, ModelError) when the data or model cannot be
    read."""
    say = progress or (lambda fraction, message: None)
    problems = cfg.validate()
    if problems:
        raise ConfigError("The settings cannot be exported: " + " ".join(problems))
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"Cannot create the export folder {out_dir}: {exc.strerror}.") from None
    files: list[str] = []

    def put(rel: str, text: str) -> None:
        _write(os.path.join(out_dir, rel), text)
        files.append(rel)

    say(0.0, "Reading the training data")
    data = load_data(cfg.data, cfg.run.seed)
    question = cfg.data.prompt_column.strip() or "question"
    answer = cfg.data.answer_column.strip() or "answer"
    if answer == question:
        question, answer = "question", "answer"
    say(0.4, f"Writing data/train.jsonl ({len(data.train):,} rows)")
    _write_rows(os.path.join(out_dir, "data", "train.jsonl"), data.train, question, answer)
    _write_rows(os.path.join(out_dir, "data", "heldout.jsonl"), data.eval, question, answer)
    files += ["data/train.jsonl", "data/heldout.jsonl"]

    settings = export_settings(cfg)
    settings["data"].update(
        train_file="data/train.jsonl",
        heldout_file="data/heldout.jsonl",
        prompt_column=question,
        answer_column=answer,
        max_prompt_length=cfg.data.max_prompt_length,
        description=data.source_desc,
        worked_example=list(worked_example(cfg.data) or []) or None,  # [problem, answer] or none
    )
    task = cfg.data.source == "task"
    if task:  # train.py's accuracy is the task's checker, which regenerates the problems from these
        d = cfg.data
        settings["data"]["task"] = {
            "source": "task",
            "task": d.task,
            "task_options": d.task_options,
            "task_size": d.task_size,
            "task_seed": d.task_seed,
            "eval_size": d.eval_size,
        }
    name = cfg.model.name_or_path.strip()
    model_note = "Pass `--model PATH` to train another copy of it."
    if name.startswith("builtin:"):
        say(0.6, "Copying the built-in model")
        settings["runtime"]["model"] = _copy_builtin_model(name, out_dir)
        files.append("model/")
        model_note = f"GRPO Desktop's built-in model ({name}), copied into `model/`."
    elif is_gguf_file(os.path.expanduser(name)):  # TRL loads folders: the GGUF's import
        say(0.6, "Finding the GGUF model's imported folder")
        settings["runtime"]["model"] = base_location(name)[0]
        model_note = (
            f"The folder GRPO Desktop imported {name} into (its weights dequantized): copy it "
            "to where you train and pass `--model PATH` if the path differs there."
        )
    elif os.path.isdir(os.path.expanduser(name)):
        model_note = (
            "A folder on the machine that exported this project: copy it to where you train "
            "and pass `--model PATH` if the path differs there."
        )
    else:
        model_note = "A Hugging Face hub id: downloaded on first use, then cached."
    if cfg.rewards.custom_checker.strip():  # byte for byte: train.py asks by its SHA-256
        put("custom_checker.py", cfg.rewards.custom_checker)

    say(0.8, "Writing train.py, settings.json and the launch configs")
    put("train.py", _template("train.py.tmpl"))
    document = {
        "format": "grpo-desktop-trl-project",
        "version": 1,
        "exported_by": f"grpo-desktop {__version__}",
        **settings,
        "app_settings": cfg.to_dict(),
    }
    put("settings.json", json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    precision = _mixed_precision(cfg.model.dtype)
    for config in ACCELERATE_CONFIGS:
        text = _template(f"accelerate/{config}").replace("@MIXED_PRECISION@", precision)
        put(f"accelerate/{config}", text)
    put("slurm.sbatch", _template("slurm.sbatch"))
    put("requirements.txt", requirements(task))
    put("README.md", _readme(cfg, settings, (len(data.train), len(data.eval)), model_note))
    say(1.0, "Done")
    return {
        "out_dir": os.path.abspath(out_dir),
        "files": files,
        "train_rows": len(data.train),
        "heldout_rows": len(data.eval),
        "unmapped": [row[0] for row in unmapped_rows(cfg)],
        "command": "python train.py --output_dir output",
    }
