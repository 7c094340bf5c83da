"""Sessions saved in a test's folder, with or without a copy of a trained run: what the Try and
Compare tab tests open (tests/ui/conftest.py's `lora_session` is one over conftest's
`trained_run`)."""

from __future__ import annotations

import shutil

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.runs.files import read_run_config
from grpo_desktop.session.document import SessionDocument, new_session, save_session


def session_on_disk(tmp_path, run_dir: str | None = None, config=None) -> SessionDocument:
    """A session in `tmp_path`; with `run_dir`, holding a copy of that run as its own (and its
    settings), else on `config` (the built-in demo's by default)."""
    cfg = read_run_config(run_dir) if run_dir else config or demo_config()
    doc = new_session(str(tmp_path / "tab.grpo"), cfg)
    if run_dir:
        shutil.copytree(run_dir, doc.run_dir)
        doc.trained = True
        save_session(doc)
    return doc
