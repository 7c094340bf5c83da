"""Background work of the Dataset panel: read the first rows, count the splits, apply the template.

Runs in the app's thread pool (ui/common/tasks.py), never on the GUI thread. Two steps, so the
first rows show at once: `read_rows` (the data source only) and `apply_template` (loads the
model's tokenizer, which imports transformers and can take seconds). Both return plain data.
A tokenizer's own code (model.trust_remote_code) runs only with the permission the session model
gives once the user trusted it; without one the preview uses the plain template and says why.
Try it: tests/ui/panels/test_panels.py, tests/ui/panels/test_hub.py.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from typing import Any

from grpo_desktop.engine.config import DataConfig

_locks_lock = threading.Lock()
_tokenizer_locks: dict[str, threading.Lock] = {}


@lru_cache(maxsize=4)
def _tokenizer(model_name: str, trust_remote_code: bool, remote_code) -> Any:
    from grpo_desktop.engine.data.hub import (
        cached_model_folder,
        hub_reachable,
        offline_model_message,
    )
    from grpo_desktop.engine.errors import ModelError
    from grpo_desktop.engine.models.loading import load_tokenizer, resolve_model_path

    path = resolve_model_path(model_name)
    if not os.path.isdir(path):  # a hub id: the local cache first, the network only if reachable
        path = cached_model_folder(path) or path
        if not os.path.isdir(path) and not hub_reachable():
            raise ModelError(offline_model_message(model_name))
    return load_tokenizer(path, trust_remote_code, remote_code)


def tokenizer_for(model_name: str, trust_remote_code: bool = False, remote_code=None) -> Any:
    """The tokenizer of `model_name`; `remote_code` (a RemoteCodePermission) lets its own code
    run when the setting asks for it, else loading it refuses (RemoteCodeRefused). A hub id
    comes from the local cache when it is there; offline, one not cached fails within seconds.
    One load per model at a time (later calls hit the cache); a slow hub id never holds up a
    local folder's load."""
    with _locks_lock:
        lock = _tokenizer_locks.setdefault(model_name, threading.Lock())
    with lock:
        return _tokenizer(model_name, trust_remote_code, remote_code)


def read_rows(data: DataConfig, seed: int, n: int = 8) -> dict[str, Any]:
    """Columns, the first `n` problems and answers, split sizes and notes. `data` must be a copy
    the GUI no longer changes. Raises DataError when the source cannot be read at all."""
    from grpo_desktop.engine.data.dataset import load_data, parse_answer, preview_rows
    from grpo_desktop.engine.errors import UserError

    columns, rows = preview_rows(data, n)
    out: dict[str, Any] = {"columns": columns, "notes": [], "train": None, "eval": None}
    out["blocker"] = None  # why a run on this data could not start (Start says so too)
    try:
        loaded = load_data(data, seed=seed)
        out.update(train=len(loaded.train), eval=len(loaded.eval), desc=loaded.source_desc)
        if not loaded.train:
            out["blocker"] = "The held-out split leaves no problems to train on."
    except UserError as exc:
        out["notes"].append(str(exc))
        out["blocker"] = str(exc)
    generated = data.source in ("arithmetic", "task")  # their rows are question and answer
    prompt_column = "question" if generated else data.prompt_column
    answer_column = "answer" if generated else data.answer_column
    problems = [row.get(prompt_column) for row in rows]
    out["problems"] = [None if p is None else str(p) for p in problems]
    out["answers"] = [parse_answer(row.get(answer_column)) for row in rows]
    if rows and all(p is None for p in problems):
        out["notes"].append(f"There is no column '{data.prompt_column}' to take the problems from.")
    return out


def apply_template(
    problems: list[str | None],
    system_prompt: str,
    model_name: str,
    trust_remote_code: bool,
    remote_code=None,
    example: tuple[str, str] | None = None,
    prefix: str = "",
) -> dict[str, Any]:
    """The problems as the model sees them: its chat template, or the plain template, with the
    worked example's turns (problem, answer) before each when there is one, and the answer
    prefix written for the model after each."""
    from grpo_desktop.engine.data.dataset import build_prompt
    from grpo_desktop.engine.errors import UserError
    from grpo_desktop.engine.models.remote_code import RemoteCodeRefused

    shown = tuple(text.strip() for text in example) if example else ()
    example = shown if len(shown) == 2 and all(shown) else None  # both given, or none
    note = ""
    try:
        tokenizer = tokenizer_for(model_name, trust_remote_code, remote_code)
    except RemoteCodeRefused:
        tokenizer = None
        note = (
            f"The tokenizer of '{model_name}' comes with its own code (Trust remote code is on), "
            "which has not been trusted, so it was not loaded: the preview uses the plain prompt "
            "template. Start asks whether to trust it."
        )
    except UserError as exc:  # no such model, an offline hub id: show the plain template
        tokenizer = None
        note = f"{exc} The preview uses the plain prompt template."
    except Exception as exc:  # a broken tokenizer: show the plain template
        tokenizer = None
        note = (
            f"Could not load the tokenizer of '{model_name}' ({type(exc).__name__}: {exc}); the "
            "preview uses the plain prompt template."
        )
    prompts = []
    for problem in problems:
        if problem is None:
            prompts.append("")
            continue
        try:
            prompts.append(build_prompt(tokenizer, problem, system_prompt, example, prefix))
        except UserError as exc:
            prompts.append(f"(the chat template failed: {exc})")
    return {"prompts": prompts, "note": note}
