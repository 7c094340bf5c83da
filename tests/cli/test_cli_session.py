"""The command line on sessions: `train SESSION` refuses an untrusted checker unless
--trust-checker, never trains over a run without --resume, continues with --resume (either
spelling); `open SESSION` (and a bare session path) opens the window on it."""

from __future__ import annotations

import os

import pytest

from grpo_desktop.cli import main
from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.events import read_events
from grpo_desktop.session.document import load_session, new_session
from grpo_desktop.session.trust import TrustStore

CHECKER = "def check(completion, answer, prompt):\n    return 1.0\n"


def _session(tmp_path, model_dir: str, checker: str = "", steps: int = 2):
    cfg = TrainConfig().replace(
        model={"name_or_path": model_dir},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 6},
        data={"eval_size": 0},
        rewards={"custom_checker": checker},
        run={"max_steps": steps, "checkpoint_every": 1},
    )
    return new_session(str(tmp_path / "s.grpo"), cfg)


def _steps(doc) -> list[int]:
    return [e.step for e in read_events(doc.events_path) if e.type == "step"]


def test_an_untrusted_checker_is_refused_then_runs_with_trust_checker(
    tmp_path, capsys, micro_model_dir
):
    doc = _session(tmp_path, micro_model_dir, checker=CHECKER, steps=1)
    assert main(["train", doc.path, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--trust-checker" in err and "not trusted" in err and "Traceback" not in err
    assert not doc.has_run()  # nothing ran, nothing was written
    assert main(["train", doc.path, "--quiet", "--trust-checker"]) == 0
    assert _steps(doc) == [1] and TrustStore().is_trusted(CHECKER)
    events = read_events(doc.events_path)
    rows = next(e for e in events if e.type == "rollouts").rows
    assert all(r["rewards"].get("custom") == 1.0 for r in rows)  # the checker really ran
    assert load_session(doc.path).trained


def test_train_session_then_resume_continues_and_never_trains_over_a_run(
    tmp_path, capsys, micro_model_dir
):
    doc = _session(tmp_path, micro_model_dir, steps=2)
    assert main(["train", doc.path, "--quiet"]) == 0
    assert _steps(doc) == [1, 2]
    capsys.readouterr()
    assert main(["train", doc.path, "--quiet"]) == 2  # already holds a run
    err = capsys.readouterr().err
    assert "--resume" in err and "finished all 2 steps" in err
    assert main(["train", doc.path, "--resume", "--steps", "3", "--quiet"]) == 0
    assert main(["train", "--resume", doc.path, "--steps", "4", "--quiet"]) == 0
    starts = [e.start_step for e in read_events(doc.events_path) if e.type == "run_started"]
    assert starts == [0, 2, 3] and _steps(doc) == [1, 2, 3, 4]  # each step once
    assert load_session(doc.path).config.run.max_steps == 4  # the session says what ran


def test_session_errors_are_one_paragraph(tmp_path, capsys):
    bundle = tmp_path / "bad.grpo"
    bundle.mkdir()
    (bundle / "session.json").write_text('{"schema_version": 99}')
    assert main(["train", str(bundle)]) == 2
    assert "newer GRPO Desktop" in capsys.readouterr().err
    doc = new_session(str(tmp_path / "ok.grpo"), TrainConfig())
    assert main(["train", doc.path, "--out", str(tmp_path / "o")]) == 2
    assert "leave out --out" in capsys.readouterr().err
    assert main(["train", "--resume"]) == 2
    assert "train SESSION --resume" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["open", "{path}"], ["{path}"]])
def test_open_session_opens_the_window_on_it(tmp_path, monkeypatch, argv):
    import grpo_desktop.ui.app as app

    doc = new_session(str(tmp_path / "w.grpo"), TrainConfig())
    opened = {}
    monkeypatch.setattr(app, "run_app", lambda **kwargs: opened.update(kwargs) or 0)
    assert main([a.format(path=doc.path) for a in argv]) == 0
    assert opened["session_path"] == doc.path and not opened["autostart"]


def test_a_config_file_with_checker_code_also_needs_trust(tmp_path, capsys, micro_model_dir):
    cfg = _session(tmp_path, micro_model_dir, checker=CHECKER).config
    file = tmp_path / "cfg.json"
    file.write_text(cfg.to_json())
    assert main(["train", str(file), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "--trust-checker" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o")
