"""`grpo-desktop export` never destroys or leaks (issue 26 §2), tried the way a user meets it: the
real command in a subprocess on a real one-step LoRA run.

- an --out that is, holds or lies inside the source run or its session is refused even with
  --force (real paths: a symlink or a `..` does not get around it), exit 2, naming both folders;
- a symlink planted in the checkpoint's adapter folder that leads out of the run (notes.txt →
  a secret) is refused, naming the link and its target; nothing is written, the secret is not
  copied anywhere;
- --force onto an --out that is a symlink replaces the link with the export and leaves nothing
  behind (no `.replaced-PID`), the link's target untouched; without --force it is refused.
Every case checks that every file of the run (and of the link's target) is byte-identical after.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support.export_runs import small_demo, train_run
from tests.support.hazards import cli, tree


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> str:
    return train_run(small_demo(lora=True), str(tmp_path_factory.mktemp("guards") / "run"))


def export(source: str, out: str, *more: str) -> tuple[int, str]:
    return cli("export", source, "--format", "adapter", "--out", out, "--quiet", *more)


def refused(code: int, err: str, *named: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for text in named:
        assert text in err, (text, err)


def test_an_out_that_is_holds_or_lies_in_the_run_is_refused_even_forced(run, tmp_path):
    before = tree(run)
    link = tmp_path / "link-to-run"
    link.symlink_to(run)
    cases = {
        run: "is the source run",
        os.path.join(run, "checkpoints"): "lies inside the source run",
        os.path.dirname(run): "holds the source run",
        str(link): "is the source run",  # a symlink is resolved
        os.path.join(run, "checkpoints", "..", "checkpoints"): "lies inside the source run",
        str(link / "checkpoints"): "lies inside the source run",
    }
    for out, how in cases.items():
        code, err = export(run, out, "--force")
        refused(code, err, how, run, "Choose an output folder that is neither in")
        assert os.path.abspath(out) in err or "(really" in err, err
        assert tree(run) == before, out  # every checkpoint file, byte for byte
    code, err = cli("export", run, "--format", "trl", "--out", run, "--force", "--quiet")
    refused(code, err, "is the source run")
    assert tree(run) == before and link.is_symlink()


def test_an_out_inside_the_session_is_refused(run, tmp_path):
    from grpo_desktop.session.document import new_session, save_session

    doc = new_session(str(tmp_path / "s.grpo"), small_demo(True))
    shutil.copytree(run, doc.run_dir)
    doc.trained = True
    save_session(doc)
    before = tree(doc.path)
    for out, what in ((doc.path, "is the session"), (os.path.join(doc.path, "x"), "the session")):
        code, err = export(doc.path, out, "--force")
        refused(code, err, what, os.path.abspath(doc.path))
        assert tree(doc.path) == before


def test_a_link_out_of_the_run_in_the_adapter_is_refused_and_not_copied(run, tmp_path):
    secret = tmp_path / "id_rsa"
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY----- not really\n")
    step = sorted(os.listdir(os.path.join(run, "checkpoints")))[-1]
    planted = os.path.join(run, "checkpoints", step, "adapter", "notes.txt")
    before = tree(run)
    os.symlink(secret, planted)
    try:
        out = tmp_path / "adapter"
        code, err = export(run, str(out))
        refused(code, err, planted, str(secret), "leads through a symbolic link", "outside the run")
        assert not out.exists() and os.listdir(tmp_path) == ["id_rsa"]
    finally:
        os.unlink(planted)
    assert tree(run) == before
    assert secret.read_bytes().startswith(b"-----BEGIN")
    # without the link the same export copies only the adapter's own files
    code, err = export(run, str(tmp_path / "adapter-ok"))
    assert code == 0, err
    names = set(os.listdir(tmp_path / "adapter-ok"))
    assert {"adapter_config.json", "adapter_model.safetensors", "README.txt"} <= names
    assert "notes.txt" not in names and "README.md" not in names


def test_forcing_onto_a_symlinked_out_replaces_the_link_not_its_target(run, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_bytes(b"mine\n")
    parent = tmp_path / "exports"
    parent.mkdir()
    out = parent / "adapter"
    out.symlink_to(target)
    code, err = export(run, str(out))  # a link is not replaced without --force
    refused(code, err, str(out), "is a symbolic link", str(target), "--force")
    assert out.is_symlink() and tree(str(target)) == {"keep.txt": b"mine\n"}
    before = tree(run)
    code, err = export(run, str(out), "--force")
    assert code == 0, err
    assert not out.is_symlink() and (out / "adapter_model.safetensors").is_file()
    assert os.listdir(parent) == ["adapter"]  # no .replaced-PID, no .export-PID left
    assert tree(str(target)) == {"keep.txt": b"mine\n"}
    assert tree(run) == before
