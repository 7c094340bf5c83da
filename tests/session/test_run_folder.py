"""A session's run folder must lie inside the session, and the trainer deletes only
what it wrote. A session.json whose `run` is an absolute path, climbs out with `..`, or is a
symlink out (to a victim folder, to /etc) is refused with a message and nothing is touched —
before the fix `train SESSION` deleted the victim's events.jsonl, config.json and checkpoints/
tree (a file it never wrote included) and trained there. Starting over and pruning checkpoints
leave files the app did not write where they are."""

from __future__ import annotations

import os
import shutil

import pytest

from grpo_desktop.engine.runs.layout import checkpoint_problem
from grpo_desktop.session.document import SessionError, load_session
from grpo_desktop.session.run_state import clear_run
from tests.support.hazards import cli, small_config, train_in_process, tree, write_session
from tests.support.paths import FIXTURES

CORPUS = os.path.join(FIXTURES, "bad_inputs", "sessions")


@pytest.fixture
def victim(tmp_path) -> str:
    """Someone's folder with files named like a run's, and one no run ever writes."""
    folder = tmp_path / "victim"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "events.jsonl").write_text("")
    (folder / "config.json").write_text('{"mine": true}')
    (folder / "checkpoints" / "precious.txt").write_text("not the app's")
    (folder / "precious.txt").write_text("not the app's")
    return str(folder)


def _outside(kind: str, session: str, victim: str) -> str:
    """The `run` value of each way out, creating the symlink where there is one."""
    if kind == "absolute":
        return victim
    if kind == "dotdot":
        return os.path.relpath(victim, session)
    if kind == "session folder itself":
        return "."
    target = victim if kind == "symlink" else "/etc"
    os.makedirs(session, exist_ok=True)
    os.symlink(target, os.path.join(session, "run"))
    return "run"


WAYS_OUT = ["absolute", "dotdot", "symlink", "symlink to /etc", "session folder itself"]


@pytest.mark.parametrize("kind", WAYS_OUT)
def test_opening_a_session_whose_run_is_outside_is_refused(tmp_path, victim, kind, micro_model_dir):
    session = str(tmp_path / "from-elsewhere.grpo")
    run = _outside(kind, session, victim)
    write_session(session, small_config(micro_model_dir), run=run)
    before = tree(victim)
    with pytest.raises(SessionError) as caught:
        load_session(session)
    message = str(caught.value)
    assert "is not inside the session folder" in message and "session.json" in message
    assert 'set "run" to "run"' in message  # says how to fix it
    assert tree(victim) == before


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
def test_train_session_with_a_run_outside_exits_2_and_touches_nothing(
    tmp_path, victim, kind, micro_model_dir
):
    session = str(tmp_path / "from-elsewhere.grpo")
    write_session(session, small_config(micro_model_dir), run=_outside(kind, session, victim))
    before = tree(victim)
    code, err = cli("train", session, "--quiet")
    assert code == 2, err
    assert "is not inside the session folder" in err and "Traceback" not in err
    assert tree(victim) == before  # before the fix: precious.txt and config.json gone
    assert sorted(os.listdir(session)) == sorted(["session.json", *(["run"] * (kind == "symlink"))])


@pytest.mark.parametrize("name", ["run_absolute", "run_dotdot"])
def test_the_corpus_sessions_with_a_run_outside_are_refused(tmp_path, name):
    bundle = shutil.copytree(os.path.join(CORPUS, f"{name}.grpo"), tmp_path / f"{name}.grpo")
    before = (bundle / "session.json").read_bytes()
    code, err = cli("train", str(bundle), "--quiet")
    assert code == 2, err
    assert "is not inside the session folder" in err and "Traceback" not in err
    assert (bundle / "session.json").read_bytes() == before
    assert os.listdir(bundle) == ["session.json"]


def test_a_run_folder_inside_through_a_symlink_is_fine(tmp_path, micro_model_dir):
    session = tmp_path / "s.grpo"
    (session / "runs" / "first").mkdir(parents=True)
    os.symlink(session / "runs" / "first", session / "run")
    write_session(str(session), small_config(micro_model_dir))
    assert load_session(str(session)).run_dir == str(session / "run")


def test_starting_over_and_pruning_delete_only_what_the_trainer_wrote(tmp_path, micro_model_dir):
    run = str(tmp_path / "s.grpo" / "run")
    cfg = small_config(micro_model_dir, steps=3, keep_checkpoints=1)
    train_in_process(cfg.replace(run={"max_steps": 1}), run)
    notes = {
        "notes.txt": "mine",
        "checkpoints/notes.txt": "mine",
        "checkpoints/step-00000001/notes.txt": "mine, inside a checkpoint the run will prune",
        "checkpoints/my-backup/optimizer.pt": "mine, named like the app's",
    }
    for rel, text in notes.items():
        os.makedirs(os.path.dirname(os.path.join(run, rel)), exist_ok=True)
        with open(os.path.join(run, rel), "w") as fh:
            fh.write(text)
    train_in_process(cfg, run, resume=True)  # saves steps 2 and 3, pruning 1 and then 2
    names = sorted(os.listdir(os.path.join(run, "checkpoints")))
    assert names == ["my-backup", "notes.txt", "step-00000001", "step-00000003"]  # 1 pruned
    assert os.listdir(os.path.join(run, "checkpoints", "step-00000001")) == ["notes.txt"]
    os.makedirs(os.path.join(run, "checkpoints", ".tmp-step-00000004-99"))  # a crash's leftover
    clear_run(run)  # Start Over
    left = {os.path.relpath(os.path.join(d, f), run) for d, _, fs in os.walk(run) for f in fs}
    assert left == set(notes)  # every file the app never wrote is still there, and only those
    train_in_process(cfg.replace(run={"max_steps": 1}), run)  # the fresh run saves step 1 again
    kept = os.path.join(run, "checkpoints", "step-00000001.kept")
    assert os.listdir(kept) == ["notes.txt"]  # the user's file, moved out of the new one's way
    assert checkpoint_problem(os.path.join(run, "checkpoints", "step-00000001")) is None
