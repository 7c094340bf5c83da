"""The exported TRL project inherits trust, it does not launder it (issue 26 §1), tried the way a
user meets it: the real `grpo-desktop export --format trl` in a subprocess on a demo session
written by hand (as one from elsewhere arrives), then the project's own train.py.

- a custom checker not trusted here is refused (exit 2, one line naming --trust-checker and
  --without-checker, no --out folder); --without-checker exports without it and says so;
  --trust-checker exports it and the README lists it with its SHA-256;
- the exported train.py, on a machine (config folder) where the checker is not trusted, shows
  it and asks before anything runs: "n" (or no answer) stops with exit 2, before TRL is even
  imported; "y" remembers it; --trust-checker skips the question; where it is trusted, no
  question;
- a model that ships its own code with model.trust_remote_code on is refused without
  --trust-remote-code (the planted code never runs); allowed, the README lists the code and
  train.py asks again where it is not trusted.

"Before TRL": the project runs with a stand-in `trl` package first on PYTHONPATH that says it
was reached and exits 3, so a question that needed TRL would never be seen, and passing the
question is seen as reaching TRL (without the minutes a real TRL run takes).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from grpo_desktop.engine.config.demo import demo_config
from tests.support.hazards import cli, model_with_code, write_session
from tests.support.paths import ROOT

REACHED = "REACHED TRL"
QUESTION = "Run it? [y/N]"


def _checker(marker) -> str:
    """Checker code whose import leaves `marker` (how we see that it ran)."""
    return (
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n\n"
        "def check(completion, answer, prompt):\n    return 1.0\n"
    )


@pytest.fixture
def session(tmp_path) -> tuple[str, str, str]:
    """(session folder, its checker source, the marker its import would write)."""
    marker = tmp_path / "checker-ran"
    source = _checker(marker)
    cfg = demo_config().replace(rewards={"custom_checker": source, "custom_weight": 0.5})
    return write_session(str(tmp_path / "From-elsewhere.grpo"), cfg), source, str(marker)


@pytest.fixture
def fake_trl(tmp_path) -> str:
    """A folder holding a stand-in `trl` package: importing it says so and exits 3."""
    folder = tmp_path / "fake-trl"
    (folder / "trl").mkdir(parents=True)
    (folder / "trl" / "__init__.py").write_text(
        f"import sys\nsys.stderr.write({REACHED!r} + '\\n')\nsys.exit(3)\n"
    )
    return str(folder)


def export(source: str, out: str, *more: str) -> tuple[int, str]:
    return cli("export", source, "--format", "trl", "--out", out, "--quiet", *more)


def run_project(project, fake_trl, config_dir, *args: str, answer: str | None = None):
    """The project's `python train.py ARGS` with stdin `answer` (None: closed) and the trust
    list in `config_dir`: (exit code, stderr)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([fake_trl, ROOT]),
        GRPO_DESKTOP_CONFIG_DIR=str(config_dir),
    )
    out = subprocess.run(
        [sys.executable, "train.py", "--max_steps", "1", *args],
        cwd=str(project),
        input=answer if answer is not None else "",
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return out.returncode, out.stderr


def test_an_untrusted_checker_is_refused_and_nothing_is_written(session, tmp_path):
    path, _source, marker = session
    out = tmp_path / "project"
    code, err = export(path, str(out))
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for text in ("custom checker", "not trusted", "--trust-checker", "--without-checker"):
        assert text in err, (text, err)
    assert not out.exists() and not os.path.exists(marker)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".project")] == []


def test_without_checker_exports_the_project_without_it_and_says_so(session, tmp_path):
    path, source, marker = session
    out = tmp_path / "project"
    code, err = export(path, str(out), "--without-checker")
    assert code == 0, err
    assert "exported without it" in err, err
    assert not (out / "custom_checker.py").exists()
    settings = json.loads((out / "settings.json").read_text())
    assert settings["rewards"]["functions"] == ["accuracy", "format"]
    assert settings["rewards"].get("custom_checker") is None
    assert source not in (out / "settings.json").read_text()
    assert "None from elsewhere" in (out / "README.md").read_text()
    assert not os.path.exists(marker)


def test_a_trusted_checker_is_listed_and_train_py_asks_where_it_is_not_trusted(
    session, tmp_path, fake_trl
):
    path, source, marker = session
    out = tmp_path / "project"
    code, err = export(path, str(out), "--trust-checker")
    assert code == 0, err
    assert (out / "custom_checker.py").read_text() == source
    readme = (out / "README.md").read_text()
    section = readme.split("## Code this project runs", 1)[1].split("## Install", 1)[0]
    assert hashlib.sha256(source.encode()).hexdigest() in section
    assert "custom_checker.py" in section and "--trust-checker" in section
    assert "your checker" not in readme

    elsewhere = tmp_path / "another-machine"  # a trust list that has never seen this code
    code, err = run_project(out, fake_trl, elsewhere, answer="n\n")
    assert code == 2, err
    assert QUESTION in err and "custom_checker.py" in err and "--trust-checker" in err, err
    assert REACHED not in err and "Traceback" not in err, err  # stopped before TRL
    assert not os.path.exists(marker)

    code, err = run_project(out, fake_trl, elsewhere)  # a job: no answer at all
    assert code == 2 and QUESTION in err and REACHED not in err, err

    code, err = run_project(out, fake_trl, elsewhere, "--trust-checker")  # a cluster job
    assert code == 3 and REACHED in err and QUESTION not in err, err

    code, err = run_project(out, fake_trl, elsewhere, answer="y\n")
    assert code == 3 and QUESTION in err and REACHED in err, err
    code, err = run_project(out, fake_trl, elsewhere)  # remembered: no second question
    assert code == 3 and QUESTION not in err and REACHED in err, err

    here = os.environ["GRPO_DESKTOP_CONFIG_DIR"]  # the exporting machine trusted it
    code, err = run_project(out, fake_trl, here)
    assert code == 3 and QUESTION not in err and REACHED in err, err
    assert not os.path.exists(marker)  # nothing scored yet: the checker never loaded


def test_a_model_s_own_code_is_refused_then_listed_and_asked_about(
    tiny_model_dir, tmp_path, fake_trl
):
    marker = tmp_path / "model-code-ran"
    model = model_with_code(tiny_model_dir, str(tmp_path / "model-with-code"), str(marker))
    cfg = demo_config().replace(model={"name_or_path": model})
    path = write_session(str(tmp_path / "Remote.grpo"), cfg, trust_code=True)
    out = tmp_path / "project"

    code, err = export(path, str(out))
    assert code == 2, err
    assert "model.trust_remote_code" in err and "--trust-remote-code" in err, err
    assert "Traceback" not in err and not out.exists() and not marker.exists()

    code, err = export(path, str(out), "--trust-remote-code")
    assert code == 0, err
    section = (out / "README.md").read_text().split("## Code this project runs", 1)[1]
    assert "modeling_shipped.py" in section and "unsandboxed" in section
    assert "--trust-remote-code" in section

    code, err = run_project(out, fake_trl, tmp_path / "another-machine", answer="n\n")
    assert code == 2, err
    assert QUESTION in err and "modeling_shipped.py" in err and "--trust-remote-code" in err
    assert REACHED not in err and not marker.exists()
    code, err = run_project(out, fake_trl, tmp_path / "another-machine", "--trust-remote-code")
    assert code == 3 and QUESTION not in err and REACHED in err, err
