"""Where an export goes when the user names no folder: a visible folder beside what is exported.

`exports_folder(source)` is '<name> exports' next to the session (NAME.grpo), run folder or
settings file: the folder the user keeps their work in, so the export is found there. A source
in a hidden folder (an untitled session lives in ~/.local/share/grpo-desktop/untitled) would
hide the export too, so those go to ~/Documents/GRPO Desktop exports (the home folder where
there is no Documents). `export_name` names the export after the source, the step and the
format ('my-run-step40-gguf-f16'); `default_export_dir` joins the two and steps past a name
already taken ('…-2'), so a second export never asks to replace the first. Torch-free; the
Export dialog and `grpo-desktop export` without --out use it.

Try it:  python -c "from grpo_desktop.engine.export.location import default_export_dir as d; \\
print(d('runs/demo', 'gguf', 40, 'f16'))"
"""

from __future__ import annotations

import os

from grpo_desktop.engine.runs.layout import STATE_FILE

SESSION_SUFFIX = ".grpo"
SHARED_FOLDER = "GRPO Desktop exports"


def _anchor(source: str) -> str:
    """The session, run folder or file the exports sit beside: a checkpoint folder's run, and a
    run folder's session when the run lives inside one."""
    path = os.path.abspath(os.path.expanduser(source)).rstrip(os.sep) or os.sep
    if os.path.basename(path) == "session.json":  # a session given by its file
        path = os.path.dirname(path)
    if os.path.isfile(os.path.join(path, STATE_FILE)):  # RUN/checkpoints/step-N
        path = os.path.dirname(os.path.dirname(path))
    if os.path.dirname(path).endswith(SESSION_SUFFIX):  # NAME.grpo/run
        path = os.path.dirname(path)
    return path


def source_name(source: str) -> str:
    """The name exports are called after: the session's (without .grpo), the run folder's, or
    the settings file's (without its extension)."""
    name = os.path.basename(_anchor(source))
    for suffix in (SESSION_SUFFIX, ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name or "export"


def _hidden(path: str) -> bool:
    return any(part.startswith(".") and part not in (".", "..") for part in path.split(os.sep))


def exports_folder(source: str) -> str:
    """'<name> exports' beside `source`, or the shared visible folder when `source` is hidden."""
    anchor = _anchor(source)
    parent = os.path.dirname(anchor)
    if _hidden(parent) or _hidden(os.path.basename(anchor)):
        home = os.path.expanduser("~")
        documents = os.path.join(home, "Documents")
        return os.path.join(documents if os.path.isdir(documents) else home, SHARED_FOLDER)
    return os.path.join(parent, f"{source_name(source)} exports")


def export_name(name: str, fmt: str, step: int | None, outtype: str = "f16") -> str:
    """'my-run-step40-gguf-f16': the source, the checkpoint's step and the format."""
    kind = f"gguf-{outtype}" if fmt == "gguf" else fmt
    at = f"-step{step}" if step is not None and fmt != "trl" else ""
    return f"{name}{at}-{kind}".replace(" ", "-")


def unused(path: str) -> str:
    """`path`, or `path`-2, -3, … : the first that does not exist or is an empty folder."""
    candidate, n = path, 2
    while os.path.lexists(candidate) and not (
        os.path.isdir(candidate) and not os.path.islink(candidate) and not os.listdir(candidate)
    ):
        candidate, n = f"{path}-{n}", n + 1
    return candidate


def default_export_dir(source: str, fmt: str, step: int | None, outtype: str = "f16") -> str:
    """The folder an export of `source` goes to when none is named (see the module's text)."""
    name = export_name(source_name(source), fmt, step, outtype)
    return unused(os.path.join(exports_folder(source), name))
