"""The custom checker's sandbox also guards what it reads, what its errors carry out, and CPU
burnt between calls (issue 26 §4), probed by checkers that try it in a real child process.

- Landlock read rules: a planted secret outside the allowed places (a temp folder, a temporary
  HOME's ~/.ssh/id_rsa, the real home folder's listing) cannot be opened, and its text never
  reaches the error, nor the JSON lines `grpo-desktop score` writes; a sys.path entry inside
  home stays importable, the home folder itself does not become readable; the imports checkers
  use (re, math, fractions, json, sympy …) still work. These skip only when the kernel has no
  Landlock (asked through the syscall, not through what the sandbox reports).
- An error's text is capped and cleaned of control characters, whatever the code raises or prints.
- A thread left burning CPU between calls is stopped: SIGXCPU within about a second of CPU, and a
  child that ignores the signal is replaced when the next call comes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import unicodedata

import pytest

from grpo_desktop.engine.checker import sandbox
from grpo_desktop.engine.checker.child import MAX_ERROR, MAX_TEXT
from grpo_desktop.engine.checker.runner import CheckerProcess
from grpo_desktop.engine.config.demo import demo_config

LINUX = sys.platform.startswith("linux")
SECRET = "s3cr3t-PRIVATE-KEY-do-not-leak"


def landlock_or_skip() -> None:
    """Skip only when this kernel has no Landlock at all."""
    if not LINUX:
        pytest.skip("Landlock is Linux only")
    from grpo_desktop.engine.checker.sandbox_linux import Unavailable, landlock_abi

    try:
        landlock_abi()
    except Unavailable as exc:
        pytest.skip(str(exc))


READER = """\
import os

def check(completion, answer, prompt):
    if completion == "list":
        return float(len(os.listdir(answer)))
    if completion == "import":
        import mine_helper
        return mine_helper.VALUE
    with open(answer) as fh:
        raise ValueError("got it: " + fh.read())
"""


def run(source: str, calls: list[tuple[str, str]], **kw):
    kw.setdefault("timeout_s", 10.0)
    with CheckerProcess(source, **kw) as proc:
        results = proc.check_many([c for c, _ in calls], [a for _, a in calls], [""] * len(calls))
        return results, {p["key"]: p for p in proc.protection_list}


# ---------------------------------------------------------------- reads


def test_a_secret_outside_the_allowed_places_cannot_be_read_or_carried_out(tmp_path):
    landlock_or_skip()
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    [res], keys = run(READER, [("read", str(secret))])
    assert keys["landlock"]["on"], keys["landlock"]["text"]
    assert "not your home folder" in keys["landlock"]["text"]
    assert res.value is None
    assert res.error.startswith("check() raised PermissionError at line 9: [Errno 13]")
    assert SECRET not in res.error
    # Control: with Landlock off the same probe does read it (so the test can fail).
    [res], _ = run(READER, [("read", str(secret))], restrict=("seccomp",))
    assert SECRET in res.error


def test_the_home_folder_is_not_readable_but_a_sys_path_entry_inside_it_is(tmp_path, monkeypatch):
    landlock_or_skip()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SECRET)
    project = home / "project"
    project.mkdir()
    (project / "mine_helper.py").write_text("VALUE = 7.0\n")
    monkeypatch.setenv("HOME", str(home))
    # The app started from the home folder puts "~" itself on sys.path (the child gets it too);
    # that must not open the whole home folder. A project folder inside it stays importable.
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.syspath_prepend(str(home))
    import pwd

    real_home = pwd.getpwuid(os.getuid()).pw_dir
    results, _ = run(
        READER,
        [
            ("read", str(home / ".ssh" / "id_rsa")),
            ("list", str(home)),
            ("list", real_home),
            ("import", ""),
        ],
    )
    key, listing, real_listing, imported = results
    assert "PermissionError" in key.error and SECRET not in key.error
    assert listing.error.startswith("check() raised PermissionError at line 5")
    assert real_listing.error.startswith("check() raised PermissionError at line 5")
    assert imported.value == 7.0, imported.error


TYPICAL = """\
def check(completion, answer, prompt):
    import datetime, decimal, fractions, json, math, re, statistics, time, unicodedata
    time.localtime()
    datetime.datetime.now().astimezone()
    total = fractions.Fraction(1, 3) + fractions.Fraction(2, 3)
    value = json.loads(answer)["x"] + math.sqrt(4) + len(re.findall(r"\\d", "a1b2"))
    value += float(decimal.Decimal("0.5")) + statistics.mean([1, 3]) + float(total)
    try:
        import sympy
    except ImportError:
        return value
    return value + float(sympy.nsimplify("1/2") * 2)
"""


def test_the_imports_checkers_use_still_work_after_the_lockdown():
    landlock_or_skip()
    [res], keys = run(TYPICAL, [("", '{"x": 1}')], timeout_s=30.0)
    assert keys["landlock"]["on"]
    try:
        import sympy  # noqa: F401

        expected = 1 + 2 + 2 + 0.5 + 2 + 1 + 1
    except ImportError:
        expected = 1 + 2 + 2 + 0.5 + 2 + 1
    assert res.error is None and res.value == expected


def test_score_never_writes_a_secret_it_could_not_read(tmp_path):
    """The user's path: `grpo-desktop score` with a checker that tries to steal a file."""
    landlock_or_skip()
    secret = tmp_path / "id_rsa"
    secret.write_text(SECRET)
    cfg = demo_config().replace(rewards={"custom_checker": READER, "custom_weight": 1.0})
    config = tmp_path / "thief.json"
    config.write_text(cfg.to_json())
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"completion": "read", "answer": str(secret)}) + "\n")
    out = tmp_path / "scored.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "score", str(config), "--input", str(samples),
         "--output", str(out), "--trust-checker"],
        capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    written = out.read_text()
    [row] = [json.loads(line) for line in written.splitlines()]
    assert row["rewards"]["custom"] is None and "PermissionError" in row["error"]
    assert SECRET not in written + proc.stdout + proc.stderr


# ---------------------------------------------------------------- what an error may carry

NOISY = """\
import sys

def check(completion, answer, prompt):
    if completion == "print":
        print("\\x1b]0;owned\\x07\\x1b[2Jvisible\\r\\n\\x00tab\\there\\u202eevil")
        raise RuntimeError("short")
    if completion == "surrogate":
        raise ValueError("half a pair: \\ud800 end")
    if completion == "name":
        raise type("E" * 5000, (Exception,), {})("x")
    raise ValueError("\\x1b[31mred\\x1b[0m\\x00\\r\\n" + "A" * 5000 + "\\u202e")
"""


def _no_controls(text: str, allowed: str = "") -> bool:
    return not any(
        (unicodedata.category(ch) in ("Cc", "Cs") and ch not in allowed) or ch == "\u202e"
        for ch in text
    )


def test_an_error_text_is_capped_and_has_no_control_characters():
    results, _ = run(NOISY, [("long", ""), ("print", ""), ("surrogate", ""), ("name", "")])
    long, printed, surrogate, name = results
    head = "check() raised ValueError at line 11: "
    assert long.error.startswith(head + "[31mred[0m AAA")  # ESC, NUL, CR gone; newline a space
    assert len(long.error) <= len(head) + MAX_TEXT and long.error.endswith("A…")
    assert _no_controls(long.error)
    # Printed output keeps its lines and tabs, loses terminal escapes, bells, CRs and NULs.
    error, output = printed.error.split("\n", 1)
    assert error == "check() raised RuntimeError at line 6: short"
    assert output.endswith("]0;owned[2Jvisible\ntab\thereevil\n")
    assert _no_controls(output, "\n\t")
    # A lone surrogate cannot be written as UTF-8 (events.jsonl): it becomes U+FFFD.
    assert surrogate.error.endswith("half a pair: \ufffd end")
    surrogate.error.encode("utf-8")
    # Even the exception's type name is bounded.
    assert name.error.startswith("check() raised EEEE") and len(name.error) < MAX_ERROR


# ---------------------------------------------------------------- CPU between calls

BURNER = """\
import signal
import threading

def burn():
    while True:
        pass

def check(completion, answer, prompt):
    if completion == "ignore SIGXCPU":
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    if completion != "ok":
        threading.Thread(target=burn, daemon=True).start()
    return 1.0
"""
# RLIMIT_NPROC would refuse the thread itself (non-root Linux): leave it off for these probes.
NO_NPROC = ("namespaces", "landlock", "seccomp")


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process, or a zombie not yet reaped, has used."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.skipif(not LINUX, reason="reads the child's CPU time from /proc")
def test_a_thread_burning_cpu_between_calls_is_stopped_within_a_second_of_cpu():
    # 3 s per call: the per-call limit alone would let it burn 4 s after the reply.
    with CheckerProcess(BURNER, timeout_s=3.0, restrict=NO_NPROC) as proc:
        pid = proc.pid
        [res] = proc.check_many(["burn"], [""], [""])
        assert res.value == 1.0
        after_reply = cpu_of(pid)
        # Idle, it may burn IDLE_CPU_S, rounded up to a whole second of its total: then SIGXCPU.
        assert wait_for(proc._child.exited, 30), "the burning thread was not stopped"
        burnt = cpu_of(pid) - after_reply
        assert burnt <= sandbox.IDLE_CPU_S + 1.1, f"{burnt:.2f} s of CPU between calls"
        [res] = proc.check_many(["ok"], [""], [""])
        assert res.value == 1.0 and proc.pid != pid
        assert proc.incidents[-1].startswith(
            "the checker process ended between calls (exit code -24"
        )


@pytest.mark.skipif(not LINUX, reason="reads the child's CPU time from /proc")
def test_a_child_that_ignores_sigxcpu_and_burns_idle_is_replaced_at_the_next_call():
    with CheckerProcess(BURNER, timeout_s=0.5, restrict=NO_NPROC) as proc:
        pid = proc.pid
        [res] = proc.check_many(["ignore SIGXCPU"], [""], [""])
        assert res.value == 1.0
        start = cpu_of(pid)
        # It keeps burning past the idle limit (the signal is ignored) …
        assert wait_for(lambda: cpu_of(pid) - start > sandbox.IDLE_RECYCLE_S + 0.3, 30)
        assert not proc._child.exited()
        # … until the next call: a fresh child answers it, and the burning one is gone.
        [res] = proc.check_many(["ok"], [""], [""])
        assert res.value == 1.0 and proc.pid != pid
        with pytest.raises(FileNotFoundError):
            cpu_of(pid)


def test_a_syntax_error_shows_the_line_without_its_terminal_escapes(tmp_path):
    """Parent side, before anything runs: `grpo-desktop score` names the bad line, cleaned."""
    source = "def check(c, a, p):\n    return 1 +\x1b[2J\x1b]0;owned\x07\n"
    cfg = demo_config().replace(rewards={"custom_checker": source, "custom_weight": 1.0})
    config = tmp_path / "escapes.json"
    config.write_text(cfg.to_json())
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"completion": "4", "answer": "4"}) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "score", str(config), "--input", str(samples),
         "--trust-checker"],
        capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "syntax error, line 2: invalid non-printable character U+001B" in proc.stderr
    assert "(return 1 +[2J]0;owned)" in proc.stderr
    assert _no_controls(proc.stderr, "\n")
