"""Messages for checker code that cannot load: they say it is the custom checker, and name a
function that was meant to be check(). Checked as written, and through the real
`grpo-desktop score` command, where such a message is all the user sees."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpo_desktop.engine.checker.runner import CheckerProcess, compile_checker
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.errors import CheckerError


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "def reward(completion, answer, prompt):\n    return 1.0\n",
            "The custom checker defines reward() (line 1) instead of check(): rename it to "
            "check(completion, answer, prompt)",
        ),
        (
            "import re\n\n\ndef compute_score(c, a, p):\n    return 1.0\n",
            "The custom checker defines compute_score() (line 4) instead of check(): rename it "
            "to check(completion, answer, prompt)",
        ),
        (
            "def helper(x):\n    return x\n",
            "The custom checker defines helper() but no check(): define a function "
            "check(completion, answer, prompt) that returns a number",
        ),
        (
            "class Checker:\n    def check(self, c, a, p):\n        return 1.0\n",
            "The custom checker defines check() inside class Checker (line 2); define it at the "
            "top level, outside any class",
        ),
        (
            "x = 1\n",
            "The custom checker defines no check() function: define a function "
            "check(completion, answer, prompt) that returns a number",
        ),
        (
            "  \n",
            "The custom checker is empty: define a function check(completion, answer, prompt) "
            "that returns a number",
        ),
        (
            "def check(c, a, p)\n    return 1.0\n",
            "The custom checker has a syntax error, line 1: expected ':' (def check(c, a, p))",
        ),
        (
            "def check(completion):\n    return 1.0\n",
            "The custom checker, line 1: check() must take three arguments (completion, answer, "
            "prompt), not (completion)",
        ),
        (
            "async def check(c, a, p):\n    return 1.0\n",
            "The custom checker, line 1: check must be a plain def, not async def",
        ),
    ],
)
def test_code_that_cannot_work_is_named_as_the_custom_checker(source, message):
    with pytest.raises(CheckerError) as caught:
        compile_checker(source)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "x = 1\nimport no_such_module_here\ndef check(c, a, p):\n    return 1\n",
            "The custom checker failed to load: its code raised ModuleNotFoundError at line 2: "
            "No module named 'no_such_module_here'",
        ),
        (
            "check = 5\n",
            "The custom checker binds check to 5 (int), not a function: define a function "
            "check(completion, answer, prompt) that returns a number",
        ),
        (
            "print('loading the table')\nraise RuntimeError('no table')\n"
            "def check(c, a, p):\n    return 1\n",
            "The custom checker failed to load: its code raised RuntimeError at line 2: no table\n"
            "Its last output (18 of 18 bytes printed):\nloading the table\n",
        ),
    ],
)
def test_code_that_fails_while_loading_is_named_too(source, message):
    with pytest.raises(CheckerError) as caught:
        CheckerProcess(source)
    assert str(caught.value) == message


def test_the_command_line_names_a_reward_function_meant_to_be_check(tmp_path):
    cfg = demo_config().replace(
        rewards={"custom_checker": "def reward(completion, answer, prompt):\n    return 1.0\n"}
    )
    config = tmp_path / "settings.json"
    config.write_text(cfg.to_json())
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"completion": "4", "answer": "4"}) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "score", str(config), "--input", str(samples)]
        + ["--trust-checker"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "The custom checker defines reward() (line 1) instead of check(): rename it to " in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and done.stdout == ""
