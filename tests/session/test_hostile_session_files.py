"""Session, run and TRL files built to hurt (issue 26 §3): brackets nested thousands deep, text
fields and files far larger than any the app writes, `schema_version: true`, a TRL log of
300,000 steps, a completions file of millions of rows, a session whose model ships code opened
by a script. Each is met the user's way (the CLI in a subprocess, the TRL reader's poll on a
real folder) and must end in a clear message (exit 2 on the command line), never a traceback,
a hang or a runaway, and with every file of the session exactly as it was."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session import trl_state
from grpo_desktop.session.trl_completions import MAX_ROWS, MAX_TEXT_CHARS
from grpo_desktop.session.trl_run import TrlRunReader
from tests.support.hazards import cli, model_with_code, small_config, tree, write_session

DEEP = 5000  # levels: far past Python's recursion limit
HAS_QT = importlib.util.find_spec("PySide6") is not None


def _session(tmp_path, edit=None, with_run: bool = True) -> str:
    """A session folder written by hand, with a run folder (config.json, events.jsonl) to
    resume; `edit(data)` changes its session.json data, or returns the text to write."""
    path = write_session(str(tmp_path / "hostile.grpo"), demo_config())
    if with_run:
        run = os.path.join(path, "run")
        os.makedirs(run)
        with open(os.path.join(run, "config.json"), "w") as fh:
            fh.write(demo_config().to_json())
        with open(os.path.join(run, "events.jsonl"), "w") as fh:
            fh.write('{"type": "log", "step": 0, "level": "info", "message": "hello"}\n')
    file = os.path.join(path, "session.json")
    with open(file) as fh:
        data = json.load(fh)
    data["trained"] = with_run
    text = edit(data) if edit else None
    with open(file, "w") as fh:
        fh.write(text if isinstance(text, str) else json.dumps(data))
    return path


def _nested_layout(data) -> str:
    data["layout"] = "HOLE"
    return json.dumps(data).replace('"HOLE"', "[" * DEEP + "]" * DEEP)


def _nested_config(data) -> str:
    data["config"]["data"]["system_prompt"] = "HOLE"
    return json.dumps(data).replace('"HOLE"', '{"a": ' * DEEP + "1" + "}" * DEEP)


def _refused(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and "RecursionError" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("edit", [_nested_layout, _nested_config], ids=["layout", "config"])
def test_deeply_nested_session_json_is_refused_by_train_resume_and_open(tmp_path, edit):
    path = _session(tmp_path, edit)
    before = tree(path)
    code, err = cli("train", path, "--resume", "--quiet")
    _refused(code, err, "session.json is damaged", "nest more than 64 levels")
    if HAS_QT:  # `open` is the window's command (CI also runs this folder without Qt)
        code, err = cli("--autostart", "--quit-after-steps", "1", "open", path, timeout=120)
        _refused(code, err, "nest more than 64 levels")
    assert tree(path) == before


def test_a_long_system_prompt_is_named_and_nothing_is_rewritten(tmp_path):
    def long_prompt(data):
        data["config"]["data"]["system_prompt"] = "x" * 300_000

    path = _session(tmp_path, long_prompt)
    before = tree(path)
    code, err = cli("train", path, "--resume", "--quiet")
    _refused(code, err, "System prompt (config.data.system_prompt)", "300,000 characters")
    assert tree(path) == before  # session.json, run/config.json and run/events.jsonl as they were


def test_a_session_file_larger_than_any_session_is_not_read(tmp_path):
    def huge(data):
        data["config"]["data"]["example_problem"] = "y" * (9 * 1024 * 1024)

    path = _session(tmp_path, huge)
    before = tree(path)
    code, err = cli("train", path, "--resume", "--quiet")
    _refused(code, err, "session.json is 9.0 MB", "at most 8.0 MB", "Nothing was changed")
    assert tree(path) == before


@pytest.mark.parametrize("where", ["session", "config"])
def test_schema_version_true_is_not_read_as_version_1(tmp_path, where):
    def boolean(data):
        (data if where == "session" else data["config"])["schema_version"] = True

    path = _session(tmp_path, boolean)
    before = tree(path)
    code, err = cli("train", path, "--resume", "--quiet")
    _refused(code, err, "schema_version")
    assert tree(path) == before


@pytest.mark.parametrize("kind", ["nested", "long"])
def test_a_run_folders_hostile_config_json_is_refused_by_train_resume(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    data = demo_config().to_dict()
    if kind == "long":
        data["rewards"]["custom_checker"] = "#" * 250_000
        text = json.dumps(data)
    else:
        data["run"]["seed"] = "HOLE"
        text = json.dumps(data).replace('"HOLE"', "[" * DEEP + "]" * DEEP)
    (run / "config.json").write_text(text)
    (run / "events.jsonl").write_text("")
    before = tree(str(run))
    code, err = cli("train", "--resume", str(run), "--quiet")
    needle = "(rewards.custom_checker) is 250,000 characters" if kind == "long" else "nest more"
    _refused(code, err, "config.json", needle)
    assert tree(str(run)) == before


# ---------------------------------------------------------------- TRL output folders


def _entry(step: int) -> dict:
    return {"epoch": step / 100, "loss": 0.01, "reward": step / 1e5, "step": step, "step_time": 1.0}


def _write_state(folder, steps: int, extra_entry: dict | None = None) -> str:
    history = [_entry(s) for s in range(1, steps + 1)]
    if extra_entry:
        history.append(extra_entry)
    history.append({"step": steps, "train_runtime": 12.5, "train_loss": 0.01})
    state = {"global_step": steps, "log_history": history, "max_steps": steps, "save_steps": 9}
    path = os.path.join(folder, "trainer_state.json")
    with open(path, "w") as fh:
        json.dump(state, fh, indent=2, sort_keys=True)  # as TRL writes it
    return path


def test_a_deeply_nested_trainer_state_is_a_warning_not_an_error_out_of_the_poll(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"global_step": 1, "log_history": [' + "[" * DEEP + "]" * DEEP + "]}")
    os.utime(path, (1e9, 1e9))  # unchanged for long: damaged, not being written
    events = TrlRunReader(str(tmp_path)).poll()
    warnings = [e.message for e in events if e.type == "log" and e.level == "warning"]
    assert len(warnings) == 1 and "nested too deeply" in warnings[0], warnings


def test_a_long_trl_log_is_read_to_its_newest_entries_with_a_note(tmp_path):
    steps = trl_state.MAX_LOG_ENTRIES + 5000
    _write_state(str(tmp_path), steps)
    events = TrlRunReader(str(tmp_path)).poll()
    shown = [e.step for e in events if e.type == "step"]
    first = steps - trl_state.MAX_LOG_ENTRIES + 2  # TRL's end-of-training entry is one of them
    assert shown == list(range(first, steps + 1))
    notes = [e.message for e in events if e.type == "log" and e.level == "info"]
    assert any(f"the plots start at step {first:,}" in n for n in notes), notes
    assert [e.status for e in events if e.type == "run_finished"] == ["completed"]


def test_reading_a_large_state_from_its_ends_gives_what_reading_it_whole_does(
    tmp_path, monkeypatch
):
    # A string that looks like entries, near the end, must not throw the tail's alignment.
    tricky = {"note": '], [{"step": 99999}, {', "step": 2999, "loss": 0.5}
    path = _write_state(str(tmp_path), 3000, tricky)
    whole = trl_state.read_state(path, keep=700)
    monkeypatch.setattr(trl_state, "FULL_READ_BYTES", 1000)
    monkeypatch.setattr(trl_state, "TAIL_BYTES", 20_000)  # grows until 700 entries fit
    from_ends = trl_state.read_state(path, keep=700)
    assert from_ends == whole
    assert trl_state.truncated(whole) and len(whole["log_history"]) == 700
    assert whole["log_history"][-2] == tricky and whole["max_steps"] == 3000


def test_a_cut_short_large_state_is_still_a_value_error(tmp_path, monkeypatch):
    path = _write_state(str(tmp_path), 3000)
    with open(path, "rb+") as fh:
        fh.truncate(os.path.getsize(path) - 200)
    monkeypatch.setattr(trl_state, "FULL_READ_BYTES", 1000)
    with pytest.raises(ValueError, match="not whole JSON"):
        trl_state.read_state(path)


def test_a_completions_file_of_many_rows_is_read_to_its_last_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = MAX_ROWS * 3 + 5
    folder = tmp_path / "completions"
    folder.mkdir()
    completions = [f"answer {i}" for i in range(rows)]
    completions[-1] = "z" * (MAX_TEXT_CHARS + 50)
    table = pa.table(
        {
            "step": [1] * rows,
            "prompt": [f"question {i // 4}" for i in range(rows)],
            "completion": completions,
            "acc": [float(i % 2) for i in range(rows)],
            "advantage": [0.0] * rows,
        }
    )
    pq.write_table(table, folder / "completions_00001.parquet", row_group_size=1000)
    events = TrlRunReader(str(tmp_path)).poll()
    (rollouts,) = [e for e in events if e.type == "rollouts"]
    got = [r["completion"] for r in rollouts.rows]
    assert len(got) == MAX_ROWS and got[0] == f"answer {rows - MAX_ROWS}"
    assert got[-1].startswith("z" * MAX_TEXT_CHARS) and "50 more characters" in got[-1]
    notes = [e.message for e in events if e.type == "log"]
    assert any(f"holds {rows:,} rows" in n and f"last {MAX_ROWS:,}" in n for n in notes), notes


# ---------------------------------------------------------------- scripted mode


@pytest.mark.skipif(not HAS_QT, reason="`open` is the window's command; needs PySide6")
def test_scripted_open_of_a_session_whose_model_ships_code_refuses_instead_of_waiting(
    tmp_path, micro_model_dir
):
    marker = str(tmp_path / "the-model-code-ran")
    shipped = model_with_code(micro_model_dir, str(tmp_path / "shipped-model"), marker)
    path = write_session(str(tmp_path / "s.grpo"), small_config(shipped), trust_code=True)
    code, err = cli("--autostart", "--quit-after-steps", "1", "open", path, timeout=120)
    _refused(code, err, "has not been trusted", "--trust-remote-code")
    assert not os.path.exists(marker)


def test_an_event_line_nested_too_deeply_is_a_damaged_line_and_nothing_is_rewritten(tmp_path):
    path = _session(tmp_path)
    deep = "[" * DEEP + "]" * DEEP
    with open(os.path.join(path, "run", "events.jsonl"), "a") as fh:
        fh.write(f'{{"type": "log", "step": 0, "level": "info", "message": {deep}}}\n')
        fh.write('{"type": "log", "step": 0, "level": "info", "message": "after"}\n')
    before = tree(path)
    code, err = cli("train", path, "--resume", "--quiet")
    _refused(code, err, "events.jsonl is damaged", "line 2", "nest too deeply")
    assert tree(path) == before


def test_an_event_line_longer_than_any_event_is_not_read(tmp_path, monkeypatch):
    from grpo_desktop.session import history

    monkeypatch.setattr(history, "MAX_LINE_BYTES", 4096)  # the real bound is 64 MB
    path = _session(tmp_path)
    events = os.path.join(path, "run", "events.jsonl")
    with open(events, "a") as fh:
        fh.write('{"type": "log", "step": 0, "level": "info", "message": "' + "x" * 5000 + '"}\n')
    with pytest.raises(ValueError, match="line 2 is not a valid event: it is longer than 4.0 KB"):
        history.RunHistory.from_events_file(events)


def test_a_deeply_nested_config_file_is_refused_by_train(tmp_path):
    data = demo_config().to_dict()
    data["run"]["seed"] = "HOLE"
    config = tmp_path / "deep.json"
    config.write_text(json.dumps(data).replace('"HOLE"', "[" * DEEP + "]" * DEEP))
    code, err = cli("train", str(config), "--out", str(tmp_path / "out"), "--quiet")
    _refused(code, err, "deep.json: The config's brackets nest too deeply to read")
    assert not (tmp_path / "out").exists()


def test_train_resume_on_a_folder_whose_only_log_nests_too_deeply_exits_2(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    deep = "[" * DEEP + "]" * DEEP
    (run / "events.jsonl").write_text(
        f'{{"type": "log", "step": 0, "level": "info", "message": {deep}}}\n'
    )
    before = tree(str(run))
    code, err = cli("train", "--resume", str(run), "--quiet")
    _refused(code, err, str(run))
    assert tree(str(run)) == before


def test_a_config_file_larger_than_any_settings_is_not_read(tmp_path):
    data = demo_config().to_dict()
    data["data"]["system_prompt"] = "x" * (9 * 2**20)
    config = tmp_path / "huge.json"
    config.write_text(json.dumps(data))
    code, err = cli("train", str(config), "--out", str(tmp_path / "out"), "--quiet")
    _refused(code, err, "huge.json is 9.0 MB", "nothing was read")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("state", ["deep", "huge"])
def test_a_checkpoints_hostile_state_file_is_named_by_resume_and_eval(tmp_path, state):
    """A real one-step demo run whose checkpoint's trainer_state.json nests 5,000 deep or
    fills 5 MB: `train --resume` and `eval` name the file, no traceback."""
    cfg = demo_config().replace(
        algorithm={"max_completion_length": 8},
        data={"eval_size": 2},
        run={"max_steps": 1, "eval_every": 0, "checkpoint_every": 1},
    )
    config = tmp_path / "c.json"
    config.write_text(cfg.to_json())
    run = tmp_path / "run"
    code, err = cli("train", str(config), "--out", str(run), "--quiet")
    assert code == 0, err
    [ckpt] = [p for p in (run / "checkpoints").iterdir() if p.name.startswith("step-")]
    text = (
        "[" * DEEP + "]" * DEEP
        if state == "deep"
        else json.dumps({"step": 1, "x": "y" * 5 * 2**20})
    )
    (ckpt / "trainer_state.json").write_text(text)
    code, err = cli("eval", str(ckpt), "--n", "2", "--no-sample")
    _refused(code, err, "trainer_state.json")
    code, err = cli("train", "--resume", str(run), "--quiet")
    assert "Traceback" not in err and "RecursionError" not in err, err
    assert "trainer_state.json" in err, err
