"""What `grpo-desktop eval` measures: held-out accuracy of the demo model, a run or a model folder.

`evaluate_target(target, n, seed)` loads the model `target` names (`resolve_target`: the built-in
demo, a run folder's latest checkpoint, one checkpoint, or a model folder or hub id) and returns
greedy accuracy and format rate on held-out problems, plus the format rate of answers sampled at
temperature 1, as a plain dict (the JSON line the command prints). `held_out_examples` picks the
problems so that before and after compare on the same ones.

Does not train or write anything. Try it:  grpo-desktop eval --demo --n 50
"""

from __future__ import annotations

import json
import os
import pickle
import time

import torch
from safetensors import SafetensorError

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.data.arithmetic import arithmetic_problems, has_pools, pool_size
from grpo_desktop.engine.data.dataset import Example, load_data
from grpo_desktop.engine.errors import ModelError, UserError
from grpo_desktop.engine.grpo.evaluate import evaluate, sampled_format_rate
from grpo_desktop.engine.models.loading import load_policy, resolve_model_path
from grpo_desktop.engine.models.remote_code import RemoteCodePermission
from grpo_desktop.engine.runs import checkpoint as ckpt
from grpo_desktop.engine.runs.files import config_path, is_run_dir, read_run_config
from grpo_desktop.engine.runs.layout import TRL_CHECKPOINT_DIR
from grpo_desktop.engine.variants.trl_config import trl_run_config
from grpo_desktop.engine.variants.trl_models import is_trl_output, trl_models

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def _is_checkpoint_dir(path: str) -> bool:
    """One of the app's checkpoints: RUN/checkpoints/step-N with its state file (TRL's output
    folders and their checkpoint-N hold a file of the same name)."""
    run = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    return os.path.isfile(os.path.join(path, ckpt.STATE_FILE)) and is_run_dir(run)


def _trl_output_of(path: str) -> str | None:
    """The TRL output folder `path` is, or is a checkpoint-N of; None for anything else."""
    absolute = os.path.abspath(path)
    if is_trl_output(absolute):
        return absolute
    parent = os.path.dirname(absolute)
    in_output = TRL_CHECKPOINT_DIR.fullmatch(os.path.basename(absolute)) and is_trl_output(parent)
    return parent if in_output else None


def _trl_target(path: str, output: str) -> tuple[TrainConfig, str | None, str | None, int | None]:
    """A TRL output folder (its final model, else its newest checkpoint) or one of its
    checkpoint-N folders, scored with the settings of the GRPO Desktop export that trained it
    when found (else the demo's data and rewards), as Try and Compare do."""
    found = trl_models(output)  # only folders that hold weights, the final model last
    if os.path.abspath(path) != output:
        found = [m for m in found if os.path.abspath(m[3]) == os.path.abspath(path)]
    if not found:
        raise UserError(
            f"{path} is a TRL output folder with no saved model in it yet (no final model and no "
            "checkpoint-N holding weights). Evaluate it once its run has saved a checkpoint."
        )
    _key, _label, step, folder, is_adapter = found[-1]
    cfg = trl_run_config(output, demo_config()).config
    return cfg, folder if is_adapter else None, None if is_adapter else folder, step


def resolve_target(target: str | None) -> tuple[TrainConfig, str | None, str | None, int | None]:
    """(config, adapter path, full-weights path, checkpoint step) for an eval target:

    - None: the built-in demo model (`builtin:demo`) with the demo config;
    - a run folder (config.json and events.jsonl or checkpoints/): the latest checkpoint's LoRA
      adapter or full weights on the run's base model, with the run's config (the base model
      itself when the run saved no checkpoint yet);
    - a checkpoint folder (RUN/checkpoints/step-N): that checkpoint, with its run's config;
    - a TRL output folder or its checkpoint-N: its final model or newest checkpoint, or that
      checkpoint (`_trl_target`);
    - anything else: a model folder or hub id, with the demo's data, prompt and rewards."""
    if target is None:
        return demo_config(), None, None, None
    path = os.path.expanduser(target)
    output = None if is_run_dir(path) or _is_checkpoint_dir(path) else _trl_output_of(path)
    if output is not None:
        return _trl_target(path, output)
    checkpoint = None
    if _is_checkpoint_dir(path):
        checkpoint, path = path, os.path.dirname(os.path.dirname(os.path.abspath(path)))
    if checkpoint is not None or is_run_dir(path):
        cfg = read_run_config(path)
        checkpoint = checkpoint or ckpt.latest_checkpoint(path)
        if checkpoint is None:
            return cfg, None, None, 0
        step = int(ckpt.read_state(checkpoint)["step"])
        weights, is_adapter = ckpt.weights_path(checkpoint)
        return cfg, weights if is_adapter else None, None if is_adapter else weights, step
    if os.path.isdir(path) and os.path.isfile(config_path(path)):
        with open(config_path(path), "rb") as fh:
            try:
                looks_like_settings = "algorithm" in json.load(fh)
            except ValueError:  # not JSON, not UTF-8: the model loader says what is wrong
                looks_like_settings = False
        if looks_like_settings:
            raise UserError(
                f"{path} holds training settings but no events.jsonl or checkpoints, so it is not "
                "a run folder. Give a run folder, a checkpoint folder or a model folder."
            )
    return demo_config().replace(model={"name_or_path": target}), None, None, None


def held_out_examples(cfg: TrainConfig, n: int, seed: int) -> list[Example]:
    """The problems `grpo-desktop eval` scores.

    For the built-in arithmetic data of level 2 and up, `n` problems of the level's `test` pool
    drawn with `seed`: problems that no GRPO run and not the demo model's supervised training
    have seen, the same for every run, so before and after compare. For other data, the first
    `n` of the run's own held-out split (its data.eval_size rows; `n` is capped there)."""
    if n < 1:
        raise UserError(f"--n must be at least 1, got {n}.")
    d = cfg.data
    if d.source == "arithmetic" and has_pools(d.arithmetic_difficulty):
        count = min(n, pool_size(d.arithmetic_difficulty, "test"))
        problems = arithmetic_problems(count, d.arithmetic_difficulty, seed, pool="test")
        return [Example(p.question, p.answer) for p in problems]
    held = load_data(d, seed=cfg.run.seed).eval
    if not held:
        raise UserError(
            "This run's data has no held-out split (data.eval_size is 0), so there is nothing "
            "to evaluate on that the run did not train on."
        )
    return held[:n]


def _load(cfg: TrainConfig, adapter: str | None, weights: str | None, remote_code=None):
    """The policy to evaluate; weights that cannot be read (truncated, damaged, not a model's)
    raise ModelError naming the folder and its weight files instead of the loader's traceback."""
    try:
        return load_policy(cfg, adapter, weights, remote_code=remote_code)
    except UserError:
        raise
    except pickle.UnpicklingError as exc:
        raise _pickle_refused(
            adapter or weights or resolve_model_path(cfg.model.name_or_path)
        ) from exc
    except (SafetensorError, OSError, RuntimeError, ValueError, EOFError) as exc:
        folder = adapter or weights or resolve_model_path(cfg.model.name_or_path)
        files = sorted(f for f in _listdir(folder) if f.endswith(WEIGHT_SUFFIXES))
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"The weights in {folder} ({', '.join(files) or 'no weight files'}) cannot be "
            f"loaded: {detail}. The file is probably damaged or incomplete (an interrupted "
            "download, copy or save): copy or download it again, or evaluate another "
            "checkpoint or model."
        ) from None


def _pickle_refused(folder: str) -> UserError:
    """The app's refusal of a pickle (runs/checkpoint.py) for weights that weights_only loading
    refused: naming the checkpoint and file when they are a checkpoint's."""
    pickles = sorted(f for f in _listdir(folder) if f.endswith((".bin", ".pt", ".pth")))
    name = ", ".join(pickles) or "a weight file"
    parent = os.path.dirname(os.path.abspath(folder))
    if _is_checkpoint_dir(parent):
        return ckpt.DamagedCheckpoint(
            parent,
            f"{os.path.basename(folder)}/{name}",
            f"{ckpt.PICKLE_REFUSED}. Evaluate another checkpoint (RUN/checkpoints/step-N)",
        )
    return ModelError(
        f"The weights in {folder} ({name}) were not loaded: {ckpt.PICKLE_REFUSED}. Use a copy "
        "of the model saved as safetensors, or evaluate another model."
    )


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def target_config(target: str | None, trust_remote_code: bool = False):
    """resolve_target, with `trust_remote_code` turning the setting on for a plain model folder
    (a run's own config decides for a run or checkpoint)."""
    cfg, adapter, weights, step = resolve_target(target)
    if trust_remote_code and step is None and target is not None:
        cfg = cfg.replace(model={"trust_remote_code": True})
    return cfg, adapter, weights, step


def evaluate_target(
    target: str | None,
    n: int = 200,
    seed: int = 0,
    sample_t1: bool = True,
    remote_code: RemoteCodePermission | None = None,
    trust_remote_code: bool = False,
) -> dict:
    """Greedy accuracy, format rate and (with sample_t1) the temperature-1 format rate.
    `remote_code`: the permission for the model's own code (engine/models/remote_code.py)."""
    t0 = time.perf_counter()
    cfg, adapter, weights, step = target_config(target, trust_remote_code)
    examples = held_out_examples(cfg, n, seed)
    # Evaluation needs no reference model, and a fresh adapter would change nothing.
    cfg = cfg.replace(algorithm={"beta": 0.0}, lora={"enabled": adapter is not None})
    torch.manual_seed(seed)
    policy = _load(cfg, adapter, weights, remote_code)
    policy.model.eval()
    result = evaluate(policy, examples, cfg, step=step or 0)
    out: dict = {
        "accuracy": round(result.accuracy, 4),
        "format_rate": round(result.format_rate, 4),
    }
    if sample_t1:
        torch.manual_seed(seed)
        out["format_rate_t1"] = round(sampled_format_rate(policy, examples, cfg), 4)
    out.update(
        {
            "n": result.n,
            "seed": seed,
            "model": target or cfg.model.name_or_path,
            "step": step,
            "mean_length": round(result.mean_length, 1),
            "seconds": round(time.perf_counter() - t0, 1),
        }
    )
    return out
