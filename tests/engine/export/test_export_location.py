"""Where an export goes without a named folder (issue 27 §5): '<name> exports' beside the
session, run or settings file, a visible folder for a source in a hidden one (an untitled
session in the data folder), never inside the run; and `grpo-desktop export` without --out,
run for real, says where it wrote and writes there. GGUF files say their outtype once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.export.gguf import _file_name
from grpo_desktop.engine.export.location import default_export_dir, exports_folder
from grpo_desktop.engine.units import folder_bytes
from grpo_desktop.session.document import new_session, save_session
from tests.support.paths import ROOT


@pytest.fixture
def home(tmp_path, monkeypatch):
    if any(part.startswith(".") for part in tmp_path.parts):
        pytest.skip("the temporary folder is itself in a hidden folder")
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


def test_beside_a_session_a_run_and_a_settings_file(tmp_path, home):
    session = home / "work" / "Adder.grpo"
    (session / "run" / "checkpoints" / "step-00000004").mkdir(parents=True)
    (session / "run" / "checkpoints" / "step-00000004" / "trainer_state.json").write_text("{}")
    want = str(home / "work" / "Adder exports")
    assert exports_folder(str(session)) == want
    assert exports_folder(str(session / "run")) == want  # not inside the session
    checkpoint = session / "run" / "checkpoints" / "step-00000004"
    assert exports_folder(str(checkpoint)) == want  # not inside the run
    assert exports_folder(str(home / "runs" / "demo")) == str(home / "runs" / "demo exports")
    assert exports_folder(str(home / "my.json")) == str(home / "my exports")
    assert default_export_dir(str(session), "gguf", 4, "q8_0") == os.path.join(
        want, "Adder-step4-gguf-q8_0"
    )


def test_a_source_in_a_hidden_folder_exports_where_the_user_looks(home):
    untitled = home / ".local" / "share" / "grpo-desktop" / "untitled" / "Untitled-1.grpo"
    shared = home / "Documents" / "GRPO Desktop exports"
    assert exports_folder(str(untitled)) == str(shared)
    assert default_export_dir(str(untitled), "merged", 2) == str(shared / "Untitled-1-step2-merged")


def test_a_taken_name_is_stepped_past_and_an_empty_folder_reused(home):
    first = home / "work" / "demo exports" / "demo-trl"
    first.mkdir(parents=True)
    assert default_export_dir(str(home / "work" / "demo"), "trl", None) == str(first)
    (first / "README.md").write_text("an earlier export")
    assert default_export_dir(str(home / "work" / "demo"), "trl", None) == f"{first}-2"


@pytest.mark.parametrize(
    ("name", "outtype", "file"),
    [
        ("Demo-step2-gguf-f16", "f16", "Demo-step2-f16.gguf"),
        ("Demo-step2-gguf-q8_0", "q8_0", "Demo-step2-q8_0.gguf"),
        ("qwen2.5-0.5b-grpo", "f16", "qwen2.5-0.5b-grpo-f16.gguf"),
        ("gguf", "f16", "gguf-f16.gguf"),
        ("my model/v2", "q8_0", "my-model-v2-q8_0.gguf"),
    ],
)
def test_a_gguf_file_says_its_outtype_once(name, outtype, file):
    assert _file_name(name, outtype) == file


def test_the_command_without_out_writes_beside_the_session_and_says_where(tmp_path, home):
    doc = new_session(str(tmp_path / "work" / "Adder.grpo"), demo_config())
    save_session(doc)
    env = dict(os.environ, PYTHONPATH=ROOT, HOME=str(tmp_path))
    outs = []
    for _ in range(2):
        p = subprocess.run(
            [sys.executable, "-m", "grpo_desktop", "export", doc.path, "--format", "trl"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout.strip().splitlines()[-1])["out"])
        assert f"no --out given, so the export goes into {outs[-1]}" in p.stderr
    exports = tmp_path / "work" / "Adder exports"
    assert outs == [str(exports / "Adder-trl"), str(exports / "Adder-trl-2")]
    assert folder_bytes(outs[0]) == folder_bytes(outs[1]) > 0
    assert os.path.isfile(os.path.join(outs[1], "train.py"))
