"""Damaged and awkward inputs on the real command line (a subprocess each): every one gets a
message naming the file and what is wrong, exit 2, no traceback, and nothing on disk changed.
The corpus is tests/fixtures/bad_inputs/ (see its README);
cases that need a model are built here."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from grpo_desktop.engine.config import TrainConfig
from tests.support.paths import FIXTURES

CORPUS = os.path.join(FIXTURES, "bad_inputs")


def cli(*args: str, cwd) -> tuple[int, str]:
    """Run `python -m grpo_desktop ARGS` in `cwd`; (exit code, stderr)."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", *args],
        capture_output=True,
        text=True,
        cwd=str(cwd),
        env=env,
        timeout=600,
    )
    return out.returncode, out.stderr


@pytest.fixture
def corpus(tmp_path):
    """A copy of the corpus (train SESSION would write into a session that opened)."""
    shutil.copytree(CORPUS, tmp_path / "bad_inputs")
    return tmp_path / "bad_inputs"


def _small(model_dir: str, **data) -> TrainConfig:
    """One quick step. Full fine-tuning: these cases are about the run folder and the data, and
    a CLI process that trains without LoRA never imports peft (2-3 s of CPU each)."""
    return TrainConfig().replace(
        model={"name_or_path": model_dir},
        lora={"enabled": False},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 6},
        run={"max_steps": 1, "checkpoint_every": 1},
        data={"eval_size": 0, **data},
    )


def _write(path, cfg: TrainConfig) -> str:
    path.write_text(cfg.to_json())
    return str(path)


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err


# (session folder, words the message must hold). Before the fix the first two and not_utf8 ended
# in an UnboundLocalError traceback (exit 1); name/run/layout trained anyway; trained_is_text said
# the run folder was missing.
SESSIONS = [
    ("created_is_text", ["'created' must be a number", '"yesterday"']),
    ("modified_is_list", ["'modified' must be a number", "[1, 2]"]),
    ("name_is_object", ["'name' must be text"]),
    ("run_is_number", ["'run' must be text", "not 5"]),
    ("trained_is_text", ["'trained' must be true or false", '"no"']),
    ("layout_is_list", ["'layout' must be an object"]),
    ("not_utf8", ["not UTF-8 text", "line 4", "0xe9", "save it as UTF-8"]),
]


@pytest.mark.parametrize("name, words", SESSIONS, ids=[s[0] for s in SESSIONS])
def test_train_on_a_damaged_session_names_the_file_and_the_field(corpus, name, words):
    bundle = corpus / "sessions" / f"{name}.grpo"
    before = (bundle / "session.json").read_bytes()
    code, err = cli("train", str(bundle), "--quiet", cwd=corpus)
    assert code == 2, err
    _no_traceback(err)
    assert str(bundle / "session.json") in err
    for word in words:
        assert word in err, (word, err)
    assert (bundle / "session.json").read_bytes() == before  # nothing written
    assert sorted(os.listdir(bundle)) == ["session.json"]  # no run folder made


def test_open_on_a_damaged_session_in_scripted_mode_says_so_and_exits_2(corpus):
    bundle = corpus / "sessions" / "created_is_text.grpo"
    code, err = cli("--autostart", "--quit-after-steps", "1", "open", str(bundle), cwd=corpus)
    assert code == 2, err  # before: a ValueError traceback, exit 1
    _no_traceback(err)
    assert "'created' must be a number" in err


@pytest.mark.parametrize(
    "args", [["train", "FILE", "--out", "run"], ["--autostart", "--config", "FILE"]]
)
def test_settings_that_are_not_utf8_are_named(corpus, args):
    path = str(corpus / "settings" / "not_utf8.json")
    code, err = cli(*[path if a == "FILE" else a for a in args], cwd=corpus)
    assert code == 2, err  # before: a UnicodeDecodeError traceback, exit 1
    _no_traceback(err)
    assert f"{path} is not UTF-8 text (line 28 has the byte 0xe9)" in err
    assert not os.path.exists(corpus / "run")


@pytest.mark.parametrize("name", ["empty", "blank"])
def test_an_empty_settings_file_is_called_empty(corpus, name):
    path = str(corpus / "settings" / f"{name}.json")
    code, err = cli("train", path, "--out", "run", cwd=corpus)
    assert code == 2, err
    assert f"Config file {path} is empty" in err and "grpo-desktop config --demo >" in err
    assert "line 1, column 1" not in err and "Expecting value" not in err  # what it said before


def test_a_broken_line_in_the_middle_of_events_is_named_by_its_line(corpus):
    bundle = corpus / "sessions" / "bad_event_line.grpo"
    code, err = cli("train", str(bundle), "--resume", "--quiet", cwd=corpus)
    assert code == 2, err
    assert "line 3 is not valid JSON at column 29" in err and "events.jsonl" in err
    assert "line 1 column" not in err  # json's count within the one line, as before


def test_eval_on_weights_that_cannot_load_names_the_folder_and_file(tmp_path, micro_model_dir):
    model = tmp_path / "cut"
    shutil.copytree(micro_model_dir, model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    code, err = cli("eval", str(model), "--n", "2", "--no-sample", cwd=tmp_path)
    assert code == 2, err  # before: a SafetensorError traceback, exit 1
    _no_traceback(err)
    assert f"The weights in {model} (model.safetensors) cannot be loaded" in err
    assert "damaged or incomplete" in err


def test_a_run_that_failed_during_setup_leaves_a_folder_that_can_be_reused(
    tmp_path, micro_model_dir
):
    bad = _write(tmp_path / "bad.json", _small(micro_model_dir, source="file", path="gone.jsonl"))
    good = _write(tmp_path / "good.json", _small(micro_model_dir))
    code, err = cli("train", bad, "--out", "run", "--quiet", cwd=tmp_path)
    assert code == 2 and "Data file not found: gone.jsonl" in err
    assert os.path.isfile(tmp_path / "run" / "events.jsonl")  # the failed run's log

    code, err = cli("train", "--resume", "run", "--quiet", cwd=tmp_path)
    assert code == 2, err  # before: "run is not a run folder (no config.json)"
    assert "ended before its first step (Data file not found" in err
    assert "nothing to resume" in err and "--out run` (the folder is reused)" in err

    code, err = cli("train", good, "--out", "run", "--quiet", cwd=tmp_path)
    assert code == 0, err  # before: "run already holds a run" (exit 2)
    assert "starting it again there" in err
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds[0] == "run_started" and kinds.count("run_finished") == 1  # the old log went
    assert json.loads(lines[-1])["status"] == "completed"

    code, err = cli("train", good, "--out", "run", "--quiet", cwd=tmp_path)
    assert code == 2 and "run already holds a run" in err  # a run with steps is never reused


def test_holding_out_the_only_usable_row_says_what_was_skipped_and_what_works(
    tmp_path, micro_model_dir
):
    rows = tmp_path / "rows.csv"
    rows.write_text("question,answer\n1+1,2\n2+2,\n,3\n")
    cfg = _small(micro_model_dir, source="file", path=str(rows), eval_size=1)
    code, err = cli("train", _write(tmp_path / "c.json", cfg), "--out", "r", cwd=tmp_path)
    assert code == 2, err
    assert "has 1 usable row (2 more rows were skipped: 1 with an empty prompt and 1 with " in err
    assert "Set 'Held-out problems' (data.eval_size) to 0 (no held-out set)" in err
    assert "e.g. to 1" not in err  # before: "holding out 1 leaves none … e.g. to 1"
    # The advice works: with eval_size 0 the same file trains, and the run says what it skipped.
    cfg = cfg.replace(data={"eval_size": 0})
    code, err = cli("train", _write(tmp_path / "c.json", cfg), "--out", "r", cwd=tmp_path)
    assert code == 0, err
    assert "warning: " in err and "2 of its 3 rows were skipped" in err


def test_resuming_keeps_the_permissions_of_events_jsonl(tmp_path, micro_model_dir):
    cfg = _write(tmp_path / "c.json", _small(micro_model_dir))
    assert cli("train", cfg, "--out", "run", "--quiet", cwd=tmp_path)[0] == 0
    events = tmp_path / "run" / "events.jsonl"
    os.chmod(events, 0o640)  # not what a new file gets (0644 under umask 022), nor mkstemp (0600)
    code, err = cli("train", "--resume", "run", "--steps", "2", "--quiet", cwd=tmp_path)
    assert code == 0, err
    assert stat.S_IMODE(os.stat(events).st_mode) == 0o640  # before: 0600
    assert [n for n in os.listdir(tmp_path / "run") if n.startswith(".events-")] == []
    assert "Traceback" not in err


def test_resuming_a_run_whose_kept_events_hold_a_broken_line_names_the_line(
    tmp_path, micro_model_dir
):
    cfg = _write(tmp_path / "c.json", _small(micro_model_dir).replace(run={"max_steps": 2}))
    assert cli("train", cfg, "--out", "run", "--quiet", cwd=tmp_path)[0] == 0
    events = tmp_path / "run" / "events.jsonl"
    lines = events.read_text().splitlines(keepends=True)
    damaged = lines[:1] + ['{"type": "step", oops\n'] + lines[1:]
    events.write_text("".join(damaged))
    code, err = cli("train", "--resume", "run", "--steps", "3", "--quiet", cwd=tmp_path)
    assert code == 2, err  # before: the line was dropped without a word
    assert "line 2 is damaged (not valid JSON" in err and "Delete or repair that line" in err
    assert events.read_text().startswith("".join(damaged))  # not rewritten (the failure appended)
