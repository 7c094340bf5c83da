"""`grpo-desktop score`, the reward dry-run, run as a user runs it: the real CLI in a subprocess
on real files (the demo's rewards, a config with a custom checker trusted and refused, a session
folder, GSM8K-style answers, malformed input, --output)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import new_session

pytestmark = pytest.mark.timeout(180)

Q = "What is 17 × 24?"
TAGGED_RIGHT = "<think>17 × 24 = 340 + 68 = 408</think><answer>408</answer>"
TAGGED_WRONG = "<think>17 × 20 = 340, plus 4 × 17 = 58</think><answer>398</answer>"
UNTAGGED_RIGHT = "17 times 24 is 408"
GSM8K_GOLD = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)
GSM8K_COMPLETION = "<think>48 in April, half as many in May: 48 + 24</think><answer>72</answer>"

CHECKER = """\
def check(completion, answer, prompt):
    if "boom" in completion:
        raise ValueError("cannot read this one")
    return (0.5 if answer in completion else 0.0) + (0.25 if prompt else 0.0)
"""


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return str(path)


def score(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "score", *args],
        capture_output=True,
        text=True,
        timeout=170,
    )


def lines_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def samples(tmp_path) -> str:
    return write_jsonl(
        tmp_path / "samples.jsonl",
        [
            {"prompt": Q, "completion": TAGGED_RIGHT, "answer": "408"},
            {"prompt": Q, "completion": TAGGED_WRONG, "answer": "408"},
            {"completion": UNTAGGED_RIGHT, "answer": 408},  # a number, as a dataset column
            {"completion": GSM8K_COMPLETION, "answer": GSM8K_GOLD},
        ],
    )


def test_demo_scores_each_line_in_order_with_the_demo_weights(samples):
    proc = score("--demo", "--input", samples)
    assert proc.returncode == 0, proc.stderr
    out = lines_of(proc.stdout)
    assert len(out) == 4
    for line in out:
        assert set(line) == {"rewards", "reward", "extracted", "reasons", "error"}
        assert set(line["rewards"]) == {"accuracy", "format"}  # no checker: no custom part
        assert line["error"] is None and isinstance(line["reasons"], dict)
    # Demo weights: accuracy 1.0, format 0.2.
    # right and tagged: 1·1 + 0.2·1 = 1.2; wrong but tagged: 0 + 0.2 = 0.2;
    # right without tags: 1 + 0 = 1.0; the GSM8K gold "… #### 72" is read as "72": 1.2.
    assert [o["rewards"]["accuracy"] for o in out] == [1.0, 0.0, 1.0, 1.0]
    assert [o["rewards"]["format"] for o in out] == [1.0, 1.0, 0.0, 1.0]
    assert [o["reward"] for o in out] == pytest.approx([1.2, 0.2, 1.0, 1.2])
    assert [o["extracted"] for o in out] == ["408", "398", "408", "72"]
    # Summary on stderr: means 3/4 = 0.750 and 3/4 = 0.750, total (1.2+0.2+1+1.2)/4 = 0.900.
    err = proc.stderr
    assert "Scored 4 samples" in err
    assert "accuracy  mean 0.750" in err and "format    mean 0.750" in err
    assert "reward    mean 0.900" in err and "checker errors: 0 · samples with no score: 0" in err


def test_output_file_gets_the_lines_and_stdout_stays_empty(tmp_path, samples):
    out_path = tmp_path / "scored.jsonl"
    proc = score("--demo", "--input", samples, "--output", str(out_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert [o["reward"] for o in lines_of(out_path.read_text())] == pytest.approx(
        [1.2, 0.2, 1.0, 1.2]
    )
    assert "Scored 4 samples" in proc.stderr
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".score-")]  # no temp left


def test_gsm8k_style_answers_are_read_like_a_dataset_column(tmp_path):
    rows = [
        {"completion": "<answer>1800</answer>", "answer": "She pays 3 × 600.\n#### 1,800"},
        {"completion": "<answer>1800</answer>", "answer": 1800.0},
        {"completion": "<answer>1800</answer>", "answer": "  1,800  "},
        {"completion": "<answer>180</answer>", "answer": "#### 1,800"},
    ]
    proc = score("--demo", "--input", write_jsonl(tmp_path / "g.jsonl", rows))
    assert proc.returncode == 0, proc.stderr
    assert [o["rewards"]["accuracy"] for o in lines_of(proc.stdout)] == [1.0, 1.0, 1.0, 0.0]


def test_malformed_lines_are_named_and_nothing_is_scored(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"completion": TAGGED_RIGHT, "answer": "408"})
        + "\n"
        + "{oops\n"  # line 2
        + "\n"  # blank: skipped, but still counted as a line
        + json.dumps({"answer": "408"})  # line 4
        + "\n"
        + json.dumps({"completion": 408, "answer": "408"})  # line 5
        + "\n"
        + json.dumps({"completion": "x", "answer": ["408"]})  # line 6
        + "\n"
        + json.dumps({"completion": "x", "answer": "#### "})  # line 7
        + "\n"
    )
    out_path = tmp_path / "out.jsonl"
    proc = score("--demo", "--input", str(bad), "--output", str(out_path))
    assert proc.returncode == 2
    err = proc.stderr
    assert "Traceback" not in err and proc.stdout == ""
    assert "5 of 6 lines cannot be scored" in err
    assert "line 2: not valid JSON" in err
    assert 'line 4: no "completion" field (its fields: answer)' in err
    assert 'line 5: "completion" is a number; it must be text' in err
    assert 'line 6: "answer" is a list; it must be text or a number' in err
    assert 'line 7: "answer" "#### " is empty' in err
    assert "line 1" not in err and "line 3" not in err
    assert not out_path.exists()


def test_missing_and_empty_input_and_bad_usage(tmp_path):
    proc = score("--demo", "--input", str(tmp_path / "none.jsonl"))
    assert proc.returncode == 2 and "Sample file not found" in proc.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    proc = score("--demo", "--input", str(empty))
    assert proc.returncode == 2 and "has no lines to score" in proc.stderr
    proc = score("--input", str(empty))  # no config, session or --demo
    assert proc.returncode == 2 and "--demo" in proc.stderr
    assert "Traceback" not in proc.stderr


def _checker_config(tmp_path, **rewards) -> str:
    cfg = demo_config().replace(
        rewards={"custom_checker": CHECKER, "custom_weight": 2.0, **rewards}
    )
    path = tmp_path / "with-checker.json"
    path.write_text(cfg.to_json())
    return str(path)


def test_custom_checker_is_refused_until_trusted_then_scores(tmp_path):
    cfg_path = _checker_config(tmp_path)
    samples = write_jsonl(
        tmp_path / "s.jsonl",
        [
            {"prompt": Q, "completion": TAGGED_RIGHT, "answer": "408"},
            {"completion": TAGGED_WRONG, "answer": "408"},
            {"prompt": Q, "completion": "<think>hm</think><answer>boom</answer>", "answer": "408"},
        ],
    )
    refused = score(cfg_path, "--input", samples)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "custom checker code" in refused.stderr and "--trust-checker" in refused.stderr

    proc = score(cfg_path, "--input", samples, "--trust-checker")
    assert proc.returncode == 0, proc.stderr
    out = lines_of(proc.stdout)
    # custom: 0.5 (answer in it) + 0.25 (a prompt) = 0.75, then 0.0 + 0.0 = 0.0, then an error.
    assert [o["rewards"]["custom"] for o in out] == [0.75, 0.0, None]
    # totals: 1 + 0.2 + 2·0.75 = 2.7; 0 + 0.2 + 0 = 0.2; the error row's total is unknown
    # (None): the checker's part is missing, so neither 0.2 nor a 0 custom (issue 27 §1).
    assert [o["reward"] for o in out[:2]] == pytest.approx([2.7, 0.2])
    assert out[2]["reward"] is None
    assert out[0]["error"] is None
    assert "ValueError" in out[2]["error"] and "cannot read this one" in out[2]["error"]
    assert "checker errors: 1" in proc.stderr and "(1 unscored)" in proc.stderr

    again = score(cfg_path, "--input", samples)  # trusted once: remembered for this code
    assert again.returncode == 0, again.stderr


def test_broken_checker_code_is_a_clear_error(tmp_path):
    cfg = demo_config().replace(rewards={"custom_checker": "def check(c, a, p)\n    return 1\n"})
    path = tmp_path / "broken.json"
    path.write_text(cfg.to_json())
    samples = write_jsonl(tmp_path / "s.jsonl", [{"completion": "x", "answer": "1"}])
    proc = score(str(path), "--input", samples, "--trust-checker")
    assert proc.returncode == 2
    assert "line 1" in proc.stderr and "Traceback" not in proc.stderr and proc.stdout == ""


def test_invalid_reward_settings_are_listed(tmp_path):
    cfg = demo_config().replace(rewards={"accuracy_weight": 0.0, "format_weight": 0.0})
    path = tmp_path / "zero.json"
    path.write_text(cfg.to_json())
    samples = write_jsonl(tmp_path / "s.jsonl", [{"completion": "x", "answer": "1"}])
    proc = score(str(path), "--input", samples)
    assert proc.returncode == 2 and "All reward weights are 0" in proc.stderr


def test_session_folder_scores_with_its_own_weights(tmp_path, samples):
    # A session whose model does not exist here: scoring needs only its reward settings.
    cfg = TrainConfig().replace(
        model={"name_or_path": str(tmp_path / "not-here")},
        rewards={"accuracy_weight": 2.0, "format_weight": 0.0},
    )
    doc = new_session(str(tmp_path / "mine.grpo"), cfg)
    proc = score(doc.path, "--input", samples)
    assert proc.returncode == 0, proc.stderr
    out = lines_of(proc.stdout)
    assert all(set(o["rewards"]) == {"accuracy"} for o in out)  # format weight 0: not used
    assert [o["reward"] for o in out] == [2.0, 0.0, 2.0, 2.0]  # 2 × accuracy
    assert f"the rewards of {doc.path}" in proc.stderr


def test_session_with_untrusted_checker_is_refused(tmp_path, samples):
    cfg = demo_config().replace(rewards={"custom_checker": CHECKER})
    doc = new_session(str(tmp_path / "shared.grpo"), cfg)
    proc = score(doc.path, "--input", samples)
    assert proc.returncode == 2 and "--trust-checker" in proc.stderr


def test_a_reader_that_stops_early_is_not_an_error(tmp_path):
    """`grpo-desktop score … | head -1`: the closed pipe ends the command quietly, exit 0."""
    rows = [{"completion": f"<answer>{i}</answer>", "answer": str(i)} for i in range(5000)]
    samples = write_jsonl(tmp_path / "many.jsonl", rows)  # ~100 bytes a line: beyond a pipe buffer
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_desktop", "score", "--demo", "--input", samples],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = json.loads(proc.stdout.readline())
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert first["rewards"]["accuracy"] == 1.0 and "Traceback" not in err
