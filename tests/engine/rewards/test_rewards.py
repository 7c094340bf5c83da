"""Rewards and the custom-checker process: hand-written completions, real child processes."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import pytest

from grpo_desktop.engine.checker import runner as checker
from grpo_desktop.engine.checker.runner import CheckerProcess, CheckResult, compile_checker
from grpo_desktop.engine.config import RewardsConfig
from grpo_desktop.engine.errors import CheckerError
from grpo_desktop.engine.rewards.functions import (
    RewardSet,
    accuracy_reward,
    answers_match,
    extract_answer,
    format_reward,
    weighted_total,
)

T = 0.5  # checker time limit in these tests, seconds

# One checker that can fail in every way, picked by the completion text.
FAULTY = """\
import math
import os


def check(completion, answer, prompt):
    if completion == "raise":
        return 1 / 0
    if completion == "hang":
        while True:
            pass
    if completion == "exit":
        os._exit(3)
    if completion == "sys.exit":
        raise SystemExit(2)
    if completion == "segfault":
        import ctypes
        ctypes.string_at(0)
    returns = {"nan": math.nan, "inf": -math.inf, "str": "yes", "none": None, "list": [1]}
    if completion in returns:
        return returns[completion]
    if completion == "bool":
        return True
    return float(len(completion))
"""


def _run_in_thread(fn):
    """fn() in a fresh non-main thread (as in the GUI's QThread); returns its result or raises."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed back to the test thread
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _gone(pid: int) -> bool:
    """Whether no process has this id (POSIX; elsewhere trust close())."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def faulty():
    with CheckerProcess(FAULTY, timeout_s=T) as proc:
        yield proc


# ---------------------------------------------------------------- extraction and matching


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>7*6</think><answer> 42 </answer>", "42"),
        ("<answer>1</answer> then <answer>2</answer>", None),  # two answers: no one answer
        ("<answer>2</answer> then <answer>2.0</answer>", "2"),  # the same value twice is one
        ("<answer>3</answer><answer>  </answer>", "3"),  # empty tags are skipped
        ("<answer>\\boxed{7}</answer>", "7"),  # boxed inside the tag is unwrapped
        ("so \\boxed{\\frac{1}{\\sqrt{2}}} done", "\\frac{1}{\\sqrt{2}}"),  # nested braces
        ("\\boxed{1} and later \\boxed{2}", None),
        ("\\boxed{5} then an unclosed \\boxed{6", "5"),
        ("<answer>x+1</answer> \\boxed{9} 10", "x+1"),  # tag beats boxed beats number
        ("\\boxed{9} 10", "9"),
        ("first 3 apples, then 12", "12"),
        ("the result is -7.", "-7"),
        ("it costs 3.50 dollars", "3.50"),
        ("population 1,234,567 people", "1,234,567"),
        ("The answer is 18. Each of the 9 eggs sells at 2 dollars.", "18"),  # final sentence
        ("a range 3-5", "5"),  # a minus after a digit is subtraction, not a sign
        ("x2 and y3", None),  # digits glued to a letter are names, not numbers
        ("it is 5km away", "5"),
        ("答案是5", "5"),
        ("no digits at all", None),
        ("", None),
    ],
)
def test_extract_answer_auto(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_lenient_takes_the_last_value():
    assert extract_answer("<answer>1</answer> then <answer>2</answer>", checker="lenient") == "2"
    assert extract_answer("\\boxed{1} and later \\boxed{2}", checker="lenient") == "2"
    assert extract_answer("It is 16 or 17 or 18.", checker="lenient") == "18"
    assert extract_answer("It is 16 or 17 or 18.") is None
    with pytest.raises(ValueError, match="unknown answer checker"):
        extract_answer("4", checker="sloppy")


def test_extract_answer_modes_and_custom_tag():
    text = "<final>4</final> \\boxed{5} 6"
    assert extract_answer(text, "answer_tag", answer_tag="final") == "4"
    assert extract_answer(text, "answer_tag") is None  # no <answer> tag
    assert extract_answer(text, "boxed") == "5"
    assert extract_answer(text, "last_number") == "6"
    assert extract_answer("no box 7", "boxed") is None
    with pytest.raises(ValueError, match="unknown answer extraction mode"):
        extract_answer(text, "first_number")


@pytest.mark.parametrize(
    ("predicted", "reference", "tolerance", "expected"),
    [
        ("42", "42", 1e-6, True),
        ("1,234", "1234", 1e-6, True),
        ("1234.0000001", "1234", 1e-6, False),  # an integer reference compares exactly
        ("1000001", "1000000", 1e-6, False),  # (the tolerance used to accept this)
        ("1234.00", "1234", 1e-6, True),  # the same integer written with decimals
        ("1234.5000001", "1234.5", 1e-6, True),  # |Δ| = 1e-7 ≤ 1e-6 · 1234.5
        ("1234.51", "1234.5", 1e-6, False),  # |Δ| = 0.01 > 1.2e-3
        ("1234.51", "1234.5", 1e-4, True),  # 0.01 ≤ 0.12345
        ("0.0000001", "0", 1e-6, False),  # reference 0 is an integer: exactly
        ("0.01", "0", 1e-6, False),
        ("-3", "3", 1e-6, False),
        ("$18", "18", 1e-6, True),
        ("50%", "50", 1e-6, True),
        ("\\frac{1}{2}", "0.5", 1e-6, True),  # math-verify
        ("\\boxed{7}", "7", 1e-6, True),
        ("0.5", "\\frac{1}{2}", 1e-6, True),
        ("\\sqrt{2}", "2^{1/2}", 1e-6, True),
        ("x+1", "1 + x", 1e-6, True),
        ("\\frac{1}{3}", "0.5", 1e-6, False),
        ("Paris", "paris", 1e-6, True),  # text: case and whitespace ignored
        ("yes", "sey", 1e-6, False),  # words are not products of symbols
        ("1e999999999", "5", 1e-6, False),  # not a plain number: no 10**999999999 built
        (None, "4", 1e-6, False),
        ("", "4", 1e-6, False),
    ],
)
def test_answers_match(predicted, reference, tolerance, expected):
    assert answers_match(predicted, reference, tolerance) is expected


def test_accuracy_reward_on_hand_written_completions():
    completions = [
        "<think>6*7 = 42</think><answer>42</answer>",  # right
        "<think>6*7 = 48</think><answer>48</answer>",  # wrong
        "I am not sure.",  # no answer at all: 0.0, not None
        "The answer is \\boxed{\\frac{1}{2}}.",  # right via math-verify
        "<answer>42</answer>",  # reference empty: cannot score
    ]
    answers = ["42", "42", "42", "0.5", ""]
    assert accuracy_reward(completions, answers) == [1.0, 0.0, 0.0, 1.0, None]
    assert accuracy_reward(["<final>7</final>"], ["7"], answer_tag="final") == [1.0]
    assert accuracy_reward(["7.0000001"], ["7"], tolerance=0.0) == [0.0]
    assert accuracy_reward(["\\boxed{3} but 4"], ["4"], mode="last_number") == [1.0]


def test_accuracy_reward_from_a_non_main_thread():
    # math-verify's signal-based timeout raises in threads; there it runs in a helper process.
    completions = [
        "\\boxed{\\frac{1}{2}}",
        "<answer>\\sqrt{4}</answer>",
        "\\boxed{\\frac{1}{3}}",
        "7",
    ]
    answers = ["0.5", "2", "0.5", "7"]
    assert _run_in_thread(lambda: accuracy_reward(completions, answers)) == [1.0, 1.0, 0.0, 1.0]


def test_pathological_answer_in_a_thread_times_out_instead_of_hanging():
    # verify() on 9^(9^(9^9)) never returns without a timeout; in the helper process math-verify's
    # own 5 s alarm applies (and the process is killed at MATH_VERIFY_TIMEOUT_S as a backstop).
    start = time.perf_counter()
    assert _run_in_thread(lambda: answers_match("9^{9^{9^{9}}}", "5")) is False
    assert time.perf_counter() - start < 15


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>6*7</think><answer>42</answer>", 1.0),
        ("\n<think>\n6*7\n</think>\n\n<answer> 42 </answer>\n", 1.0),  # whitespace is fine
        ("<answer>42</answer><think>6*7</think>", 0.0),  # wrong order
        ("<answer>42</answer>", 0.0),  # missing think
        ("<think>6*7</think>", 0.0),  # missing answer
        ("<think>6*7</think><answer>42</answer> so 42", 0.0),  # text after </answer>
        ("Sure! <think>6*7</think><answer>42</answer>", 0.0),  # text before <think>
        ("<think>6*7</think><answer>  </answer>", 0.0),  # empty answer
        ("<think>a</think><answer>1</answer><answer>2</answer>", 0.0),  # repeated answer
        ("<think>a</think> b </think><answer>1</answer>", 0.0),  # stray closing tag
        ("<think>6*7</think>\n<answer>42", 0.0),  # unclosed answer
    ],
)
def test_format_reward(completion, expected):
    assert format_reward([completion]) == [expected]


def test_format_reward_custom_tags():
    good = "<reasoning>6*7</reasoning><final>42</final>"
    assert format_reward([good], think_tag="reasoning", answer_tag="final") == [1.0]
    assert format_reward([good]) == [0.0]  # default tags are not there


def test_degenerate_completion_is_scored_quickly():
    text = "<answer>\\boxed{12 " * 20_000  # a model stuck repeating itself
    start = time.perf_counter()
    assert accuracy_reward([text], ["12"]) == [1.0]  # last number; the tags never close
    assert format_reward([text]) == [0.0]
    assert time.perf_counter() - start < 1.0


# ---------------------------------------------------------------- combining with weights


CHECKER_LEN = """\
def check(completion, answer, prompt):
    if "boom" in completion:
        raise ValueError("cannot score " + prompt)
    return len(completion) / 100
"""


def test_reward_set_weights_keep_raw_columns_and_a_missing_part_makes_the_total_unknown():
    cfg = RewardsConfig(
        accuracy_weight=1.0, format_weight=0.5, custom_weight=2.0, custom_checker=CHECKER_LEN
    )
    good = "<think>x</think><answer>4</answer>"  # 34 characters
    completions = [good, "the answer is 5", "<think>x</think><answer>boom</answer>"]
    with RewardSet(cfg) as rewards:
        assert rewards.names == ["accuracy", "format", "custom"]
        assert rewards.weights == {"accuracy": 1.0, "format": 0.5, "custom": 2.0}
        batch = rewards.score(["p1", "p2", "p3"], completions, ["4", "4", ""])
    assert batch.names == ["accuracy", "format", "custom"]
    assert batch.values["accuracy"] == [1.0, 0.0, None]  # row 3: empty reference
    assert batch.values["format"] == [1.0, 0.0, 1.0]
    assert batch.values["custom"] == [0.34, 0.15, None]  # raw, unweighted
    # row 1: 1·1 + 0.5·1 + 2·0.34 = 2.18; row 2: 0 + 0 + 2·0.15 = 0.3; row 3: accuracy and
    # checker did not score, so its total is unknown (None), not the format's 0.5 alone.
    assert batch.totals[:2] == pytest.approx([2.18, 0.3])
    assert batch.totals[2] is None
    assert batch.errors[:2] == [None, None]
    assert "ValueError" in batch.errors[2] and "line 3" in batch.errors[2]
    assert "cannot score p3" in batch.errors[2]


def test_reward_set_row_without_any_score_has_total_none():
    cfg = RewardsConfig(accuracy_weight=1.0, format_weight=0.0, custom_checker=CHECKER_LEN)
    with RewardSet(cfg) as rewards:
        assert rewards.names == ["accuracy", "custom"]
        batch = rewards.score(["p", "p"], ["boom", "4"], ["", "4"])
    assert batch.values == {"accuracy": [None, 1.0], "custom": [None, 0.01]}
    assert batch.totals[0] is None  # not 0: nothing could score it
    assert batch.totals[1] == pytest.approx(1.0 + 0.01)


def test_weighted_total_is_unknown_when_any_weighted_part_did_not_score():
    w = {"accuracy": 1.0, "format": 0.2, "custom": 0.8}
    assert weighted_total(w, {"accuracy": 1.0, "format": 1.0, "custom": 1.0}) == 2.0
    # A right, well-formatted answer whose checker failed: unknown, not 1·1 + 0.2·1 = 1.2.
    assert weighted_total(w, {"accuracy": 1.0, "format": 1.0, "custom": None}) is None
    assert weighted_total(w, {"accuracy": 1.0, "format": 1.0, "custom": math.nan}) is None
    assert weighted_total(w, {"accuracy": 1.0, "format": 1.0}) is None  # missing key
    # A part at weight 0 is not in the weights: it cannot make the total unknown.
    assert weighted_total({"accuracy": 1.0}, {"accuracy": 0.0, "format": None}) == 0.0
    assert weighted_total({}, {"accuracy": 1.0}) is None  # nothing weighted: nothing to score


def test_reward_set_uses_only_weighted_functions():
    only_acc = RewardSet(RewardsConfig(format_weight=0.0, custom_checker=""))
    assert only_acc.names == ["accuracy"] and only_acc._checker is None
    only_acc.close()
    no_custom = RewardSet(RewardsConfig(custom_weight=0.0, custom_checker=CHECKER_LEN))
    assert no_custom.names == ["accuracy", "format"] and no_custom._checker is None
    assert list(no_custom.score(["p"], ["4"], ["4"]).values) == ["accuracy", "format"]
    no_custom.close()
    no_custom.close()  # idempotent


def test_reward_set_rejects_broken_checker_at_construction():
    with pytest.raises(CheckerError, match="line 2"):
        RewardSet(RewardsConfig(custom_checker="def check(c, a, p):\n    return (\n"))
    with pytest.raises(CheckerError, match=r"custom checker defines score\(\) .* rename it"):
        RewardSet(RewardsConfig(custom_checker="def score(c, a, p):\n    return 1.0\n"))


def test_reward_set_score_from_a_non_main_thread():
    cfg = RewardsConfig(custom_checker=CHECKER_LEN)
    with RewardSet(cfg) as rewards:
        batch = _run_in_thread(lambda: rewards.score(["p"], ["\\boxed{\\frac{1}{2}}"], ["0.5"]))
    assert batch.values == {"accuracy": [1.0], "format": [0.0], "custom": [0.19]}


# ---------------------------------------------------------------- the checker process


def test_checker_exception_names_type_and_line(faulty):
    [res] = faulty.check_many(["raise"], ["a"], ["p"])
    assert res.value is None and res.line == 7
    assert res.error == "check() raised ZeroDivisionError at line 7: division by zero"


def test_checker_timeout_then_next_call_works(faulty):
    pid = faulty.pid
    start = time.perf_counter()
    results = faulty.check_many(["hang", "four"], ["a", "a"], ["p", "p"])
    assert results[0] == CheckResult(None, "check() timed out after 0.5 s", None, timed_out=True)
    assert results[1] == CheckResult(4.0, None, None)  # a fresh child took the next call
    assert time.perf_counter() - start < T + 3.0
    assert faulty.pid != pid and _gone(pid)


def test_checker_crash_then_next_call_works(faulty):
    results = faulty.check_many(["exit", "four"], ["a", "a"], ["p", "p"])
    assert results[0] == CheckResult(None, "the checker process crashed (exit code 3)", None)
    assert results[1].value == 4.0


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signal exit codes")
def test_checker_segfault_is_a_crash(faulty):
    results = faulty.check_many(["segfault", "ok"], ["a", "a"], ["p", "p"])
    assert results[0].error == "the checker process crashed (exit code -11)"
    assert results[1].value == 2.0


@pytest.mark.parametrize(
    ("completion", "error"),
    [
        ("nan", "check() returned nan; return a finite number"),
        ("inf", "check() returned -inf; return a finite number"),
        ("str", "check() returned str 'yes'; return a number"),
        ("none", "check() returned None; return a number (is a return missing?)"),
        ("list", "check() returned list [1]; return a number"),
        ("sys.exit", "check() raised SystemExit at line 14: 2"),
    ],
)
def test_checker_bad_results_are_errors_not_zero(faulty, completion, error):
    [res] = faulty.check_many([completion], ["a"], ["p"])
    assert (res.value, res.error) == (None, error)


def test_checker_accepts_bool_and_huge_completions(faulty):
    huge = "x" * 5_000_000
    assert [r.value for r in faulty.check_many(["bool", huge], ["a", "a"], ["p", "p"])] == [
        1.0,
        5_000_000.0,
    ]


def test_checker_is_fast_after_start_up():
    with CheckerProcess("def check(c, a, p):\n    return 1.0\n", timeout_s=T) as proc:
        start = time.perf_counter()
        results = proc.check_many(["<answer>4</answer>"] * 64, ["4"] * 64, ["2+2?"] * 64)
        elapsed = time.perf_counter() - start
    assert [r.value for r in results] == [1.0] * 64
    assert elapsed < 0.5, f"64 calls took {elapsed:.3f} s"


def test_checker_serialises_calls_from_several_threads(faulty):
    def work(offset):
        texts = ["x" * (offset + i) for i in range(20)]
        return [r.value for r in faulty.check_many(texts, ["a"] * 20, ["p"] * 20)]

    results: dict[int, list] = {}
    threads = [threading.Thread(target=lambda k=k: results.update({k: work(k)})) for k in (0, 100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {k: [float(k + i) for i in range(20)] for k in (0, 100)}


def test_checker_leaves_no_process_behind():
    proc = CheckerProcess(FAULTY, timeout_s=T)
    first = proc.pid
    proc.check_many(["hang", "x"], ["a", "a"], ["p", "p"])  # the second call gets a new child
    second = proc.pid
    proc.close()
    proc.close()  # idempotent
    assert first != second and _gone(first) and _gone(second) and proc.pid is None
    with pytest.raises(RuntimeError, match="closed"):
        proc.check_many(["x"], ["a"], ["p"])


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def check(c, a, p)\n    return 1.0\n", "line 1: expected ':'"),
        ("x = 1\n\ndef check(c, a, p):\n  return (1\n", "line 4"),
        ("def score(c, a, p):\n    return 1.0\n", r"defines score\(\) \(line 1\) instead of check"),
        ("", "define a function check"),
        ("def check(completion):\n    return 1.0\n", r"line 1: check\(\) must take three"),
        ("async def check(c, a, p):\n    return 1.0\n", "not async"),
    ],
)
def test_compile_checker_rejects(source, message):
    with pytest.raises(CheckerError, match=message):
        compile_checker(source)


def test_compile_checker_accepts_other_ways_to_define_check():
    compile_checker("def check(c, a, p, *rest, scale=1.0):\n    return scale\n")
    compile_checker("def _impl(c, a, p):\n    return 1.0\n\ncheck = _impl\n")


def test_checker_module_level_error_raises_with_line():
    with pytest.raises(CheckerError, match="ModuleNotFoundError at line 2"):
        CheckerProcess("x = 1\nimport no_such_module_here\ndef check(c, a, p):\n    return 1\n")
    with pytest.raises(CheckerError, match="define a function check"):
        CheckerProcess("check = 5\n")  # binds the name, but not to something callable


def test_test_checker_for_the_gui_button():
    source = (
        "def check(completion, answer, prompt):\n    return float(completion.strip() == answer)\n"
    )
    samples = [("4", "4", "2+2?"), ("5", "4", "2+2?"), ("4", 4, "2+2?")]
    assert [r.value for r in checker.test_checker(source, samples, timeout_s=T)] == [1.0, 0.0, 0.0]
    with pytest.raises(CheckerError):
        checker.test_checker("def check(:\n", samples)


def test_checker_values_are_finite_floats(faulty):
    [res] = faulty.check_many(["12345"], ["a"], ["p"])
    assert isinstance(res.value, float) and math.isfinite(res.value) and res.value == 5.0


def test_reward_modules_stay_light():
    code = (
        "import sys, grpo_desktop.engine.rewards.functions, grpo_desktop.engine.checker.runner; "
        "print(sorted(m for m in ('torch', 'math_verify', 'sympy', 'PySide6') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
