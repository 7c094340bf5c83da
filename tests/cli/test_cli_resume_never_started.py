"""`grpo-desktop train --resume DIR` on a run that never started (issue 26 §5): killed before its
folder existed, or before it saved anything there. The real command in a subprocess says so and
how to start it (exit 2, one line, no traceback) instead of "not a run folder", and creates or
changes nothing.
"""

from __future__ import annotations

import os

from tests.support.hazards import cli, tree


def _refused(code: int, err: str, folder: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"The run at {folder} never started (nothing was saved there)" in err, err
    assert f"Start it with: grpo-desktop train CONFIG --out {folder}" in err, err


def test_a_run_folder_that_was_never_created(tmp_path):
    folder = str(tmp_path / "runs" / "never")
    code, err = cli("train", "--resume", folder, "--quiet")
    _refused(code, err, folder)
    assert not os.path.exists(tmp_path / "runs")


def test_a_run_folder_with_nothing_of_a_run_in_it(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = cli("train", "--resume", str(empty), "--quiet")
    _refused(code, err, str(empty))
    assert os.listdir(empty) == []

    other = tmp_path / "other"  # a folder the run was about to fill: a note, an empty subfolder
    (other / "checkpoints").mkdir(parents=True)
    (other / "notes.txt").write_text("mine")
    before = tree(str(other))
    code, err = cli("train", "--resume", str(other), "--quiet")
    _refused(code, err, str(other))
    assert tree(str(other)) == before and sorted(os.listdir(other)) == ["checkpoints", "notes.txt"]
