"""The custom checker's sandbox, probed by checkers that do what a careless or hostile one would.

Each probe runs in a real child process. A protection the machine cannot give (no Landlock, no
user namespaces, RLIMIT_NPROC as root, not Linux) skips its test with the reason the sandbox
itself reports; the rest (environment, private folder, memory and CPU caps, killing the whole
session, bounded output) is asserted everywhere it is claimed. Where a probe could pass for the
wrong reason, a control run with the protection switched off shows that the probe does detect it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from grpo_desktop.engine.checker import sandbox
from grpo_desktop.engine.checker.runner import CheckerProcess
from grpo_desktop.engine.config import RewardsConfig
from grpo_desktop.engine.rewards.functions import RewardSet
from tests.support.paths import ROOT

POSIX = os.name == "posix"
NONE: tuple[str, ...] = ()  # no optional layer: the control runs


def one(source: str, completion: str = "", answer: str = "", **kw):
    """One call of check() in a fresh child; returns (CheckResult, protections by key)."""
    kw.setdefault("timeout_s", 2.0)
    with CheckerProcess(source, **kw) as proc:
        [res] = proc.check_many([completion], [answer], [""])
        return res, {p["key"]: p for p in proc.protection_list}


@pytest.fixture(scope="module")
def active():
    with CheckerProcess("def check(c, a, p):\n    return 0.0\n") as proc:
        return {p["key"]: p for p in proc.protection_list}


def need(active, key: str, also: str = "") -> None:
    p = active.get(key)
    if p is None or not p["on"] or also not in p["text"]:
        reason = p["text"] if p else f"{key}: not on this OS"
        pytest.skip(f"{reason}{f' (needs {also!r})' if also and p and p['on'] else ''}")


def dead(pid: int, within: float = 5.0) -> bool:
    """Whether a process (not necessarily ours) is gone or a zombie within `within` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    return True
        except FileNotFoundError:
            return True
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------- environment and folder


ENV_PROBE = """\
import os

def check(completion, answer, prompt):
    if completion == "environ":
        return float(any("hf_secret" in v for v in os.environ.values()))
    if completion == "proc-self":
        with open("/proc/self/environ", "rb") as fh:
            return float(b"hf_secret" in fh.read())
    if completion == "proc-parent":
        try:
            with open(f"/proc/{os.getppid()}/environ", "rb") as fh:
                return float(len(fh.read()) > 0)
        except PermissionError:
            return -1.0
    raise RuntimeError(f"cwd={os.getcwd()} home={os.environ['HOME']} tmp={os.environ['TMPDIR']}")
"""


def test_secret_variables_never_reach_the_checker(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_1")
    monkeypatch.setenv("OPENAI_API_KEY", "hf_secret_2")
    assert one(ENV_PROBE, "environ")[0].value == 0.0
    if sys.platform.startswith("linux"):  # the kernel's copy of its start-up environment too
        assert one(ENV_PROBE, "proc-self")[0].value == 0.0


def test_the_parents_environment_cannot_be_read_through_proc(active):
    need(active, "namespaces")  # (Landlock alone leaves /proc/PID/environ readable)
    assert one(ENV_PROBE, "proc-parent", restrict=("namespaces",))[0].value == -1.0
    # Control: without either layer the same user can read it.
    assert one(ENV_PROBE, "proc-parent", restrict=NONE)[0].value == 1.0


def test_a_private_folder_is_its_working_home_and_temp_directory_and_is_removed():
    with CheckerProcess(ENV_PROBE, timeout_s=2.0) as proc:
        [res] = proc.check_many(["where"], [""], [""])
        folder = proc._child.workdir
        assert os.path.isdir(folder)
    found = dict(re.findall(r"(\w+)=(\S+)", res.error))
    assert found == {"cwd": folder, "home": folder, "tmp": folder}
    assert folder != os.getcwd()
    assert os.path.basename(folder).startswith(f"grpo-checker-{os.getpid()}-")
    assert not os.path.exists(folder)  # removed with the child


# ---------------------------------------------------------------- memory and CPU

MEMORY_PROBE = """\
import mmap

def check(completion, answer, prompt):
    if completion == "6 GiB":
        block = bytearray(6 << 30)
        return float(len(block))
    block = mmap.mmap(-1, 1 << 30)  # address space only: nothing is touched
    return 1.0
"""


def test_memory_cap_turns_a_huge_allocation_into_a_memory_error(active):
    need(active, "memory")
    start = time.perf_counter()
    res, _ = one(MEMORY_PROBE, "6 GiB")
    assert res.value is None and res.line == 5
    assert res.error.startswith("check() raised MemoryError at line 5")
    assert "2,048 MB" in res.error and "Checker memory limit" in res.error
    assert time.perf_counter() - start < 5
    # The setting is what counts: 1 GiB of address space fits in 2 GiB, not in 512 MB.
    assert one(MEMORY_PROBE, "1 GiB")[0].value == 1.0
    small, _ = one(MEMORY_PROBE, "1 GiB", memory_mb=512)
    assert small.error.startswith("check() raised OSError at line 7: [Errno 12] Cannot allocate")
    assert "may use 512 MB" in small.error


BURNER = """\
import threading

def burn():
    while True:
        pass

def check(completion, answer, prompt):
    if completion == "leave a thread burning":
        threading.Thread(target=burn, daemon=True).start()
    return 1.0
"""


def test_a_thread_left_burning_cpu_between_calls_ends_its_process(active):
    need(active, "cpu")
    # RLIMIT_NPROC would refuse the thread itself (non-root Linux): leave it off for this probe.
    with CheckerProcess(BURNER, timeout_s=0.5, restrict=("namespaces", "landlock")) as proc:
        assert proc.cpu_s == 2  # ceil(0.5) + 1 whole seconds
        pid = proc.pid
        [res] = proc.check_many(["leave a thread burning"], [""], [""])
        assert res.value == 1.0
        end = time.monotonic() + 30  # ~3 s of CPU; longer in wall time on a busy machine
        while not proc._child.exited() and time.monotonic() < end:
            time.sleep(0.1)
        assert proc._child.exited(), "the burning thread was not stopped"
        [res] = proc.check_many(["ok"], [""], [""])
        assert res.value == 1.0 and proc.pid != pid  # a fresh child took the next call
        assert proc.incidents == [
            "the checker process ended between calls (exit code -24: it used more than its "
            "CPU-time limit); a fresh one took over"
        ]


# ---------------------------------------------------------------- processes

FORKER = """\
import os
import subprocess

def check(completion, answer, prompt):
    try:
        if completion == "fork":
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        else:
            subprocess.run(["true"], check=True)
    except OSError:
        return -1.0
    return 1.0
"""


@pytest.mark.parametrize("layer", ["seccomp", "nproc"])
@pytest.mark.parametrize("how", ["fork", "subprocess"])
def test_no_new_processes(active, layer, how):
    need(active, layer)
    assert one(FORKER, how, restrict=(layer,))[0].value == -1.0
    if POSIX:  # control: the probe does fork when nothing stops it
        assert one(FORKER, how, restrict=NONE)[0].value == 1.0


LEAVER = """\
import subprocess
import time

def check(completion, answer, prompt):
    child = subprocess.Popen(["sleep", "60"])  # inherits the output pipe and holds it open
    if completion == "hang":
        print(f"grandchild {child.pid}", flush=True)
        time.sleep(60)
    return float(child.pid)
"""


@pytest.mark.skipif(not POSIX, reason="sessions and process groups are POSIX")
def test_a_timeout_kills_the_whole_session_even_a_child_holding_the_output_pipe():
    start = time.perf_counter()
    res, _ = one(LEAVER, "hang", timeout_s=0.5, restrict=NONE)
    assert time.perf_counter() - start < 4  # not waiting for `sleep 60` to let go of the pipe
    assert res.error.startswith("check() timed out after 0.5 s\nIts last output")
    assert dead(int(re.search(r"grandchild (\d+)", res.error).group(1)))


@pytest.mark.skipif(not POSIX, reason="sessions and process groups are POSIX")
def test_closing_leaves_no_process_behind():
    proc = CheckerProcess(LEAVER, timeout_s=2.0, restrict=NONE)
    [res] = proc.check_many(["return"], [""], [""])
    grandchild = int(res.value)
    assert not dead(grandchild, within=0.2)  # it really was running
    proc.close()
    assert dead(grandchild)


@pytest.mark.skipif(not POSIX, reason="sessions and process groups are POSIX")
def test_a_parent_that_dies_takes_the_checker_with_it(tmp_path):
    script = (
        "import sys\n"
        "from grpo_desktop.engine.checker.runner import CheckerProcess\n"
        "p = CheckerProcess('import time\\ndef check(c, a, q):\\n    time.sleep(600)\\n', 600)\n"
        "print(p.pid, flush=True)\n"
        "p.check_many(['x'], ['a'], ['q'])\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.3)  # the call is under way
    parent.kill()
    parent.wait()
    assert dead(child)
    # Its folder outlived both; the next checker started anywhere removes it.
    [folder] = [e for e in os.listdir(tempfile.gettempdir()) if f"checker-{parent.pid}-" in e]
    with CheckerProcess("def check(c, a, p):\n    return 1.0\n"):
        assert not os.path.exists(os.path.join(tempfile.gettempdir(), folder))


# ---------------------------------------------------------------- network and files

NETWORK = """\
import socket
_keep = []

def check(completion, answer, prompt):
    try:
        socket.create_connection(("127.0.0.1", int(answer)), timeout=2).close()
        return 1.0  # reached a listener outside
    except OSError:
        pass
    try:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
    except OSError:
        return -1.0
    _keep.append(server)
    return float(server.getsockname()[1])
"""


def _probe_network(restrict) -> float:
    outside = socket.socket()
    outside.bind(("127.0.0.1", 0))
    outside.listen()
    with outside, CheckerProcess(NETWORK, timeout_s=5.0, restrict=restrict) as proc:
        [res] = proc.check_many([""], [str(outside.getsockname()[1])], [""])
        assert res.error is None, res.error
        if res.value > 1:  # it listens: can anyone out here reach it?
            try:
                socket.create_connection(("127.0.0.1", int(res.value)), timeout=2).close()
                return 2.0
            except OSError:
                return 0.0
        return res.value


@pytest.mark.parametrize(
    ("layer", "also"), [("seccomp", ""), ("namespaces", ""), ("landlock", "TCP")]
)
def test_no_network(active, layer, also):
    need(active, layer, also)
    assert _probe_network((layer,)) in (-1.0, 0.0)  # refused, or listening where no one is
    assert _probe_network(NONE) == 1.0  # control


WRITER = """\
import os

def check(completion, answer, prompt):
    with open("mine.txt", "w") as fh:  # its own folder stays writable
        fh.write("ok")
    try:
        with open(answer, "w") as fh:
            fh.write("written by the checker")
    except PermissionError:
        return -1.0
    return 1.0
"""


def test_files_outside_its_folder_are_read_only(active, tmp_path):
    need(active, "landlock")
    target = tmp_path / "victim.txt"
    assert one(WRITER, answer=str(target), restrict=("landlock",))[0].value == -1.0
    assert not target.exists()
    assert one(WRITER, answer=str(target), restrict=NONE)[0].value == 1.0  # control
    assert target.read_text() == "written by the checker"


# ---------------------------------------------------------------- output

LOUD = """\
import os

def check(completion, answer, prompt):
    chunk = "x" * 1_000_000
    for _ in range(100):
        print(chunk)  # 100 MB through print()
    os.write(1, b"straight to fd 1\\n")
    print("the end")
    raise ValueError("after the noise")
"""


def test_100_mb_of_prints_stay_out_of_the_terminal_and_only_the_tail_is_kept(capfd):
    start = time.perf_counter()
    res, _ = one(LOUD, timeout_s=10.0)
    elapsed = time.perf_counter() - start
    head, tail = res.error.split("\n", 1)
    assert head == "check() raised ValueError at line 9: after the noise"
    # 100 lines of 1,000,001 bytes and "the end\n" through print(); the os.write() to fd 1 is
    # drained and dropped by the parent, but not counted here: the tally is of print().
    assert tail.startswith("Its last output (500 of 100,000,108 bytes printed):\n")
    assert tail.endswith("x\nthe end\n") and len(tail) < 600
    out, err = capfd.readouterr()
    assert "xxxx" not in out + err and "the end" not in out + err
    assert elapsed < 10, f"{elapsed:.1f} s"


def test_output_of_a_crash_is_kept_with_the_error():
    source = "import os\ndef check(c, a, p):\n    print('about to go')\n    os._exit(5)\n"
    res, _ = one(source)
    assert res.error == (
        "the checker process crashed (exit code 5)\nIts last output (12 of 12 bytes printed):\n"
        "about to go\n"
    )


# ---------------------------------------------------------------- what is said, and who uses it


def test_the_log_line_names_what_is_active_and_what_is_not(active):
    with RewardSet(RewardsConfig(custom_checker="def check(c, a, p):\n    return 1.0\n")) as rs:
        line = rs.checker_protections
    assert line.startswith("The custom checker runs in a separate process with an environment")
    for p in active.values():
        assert p["text"] in line
    assert ("Not available here" in line) == (not all(p["on"] for p in active.values()))
    assert RewardSet(RewardsConfig()).checker_protections is None


def test_the_math_verify_helper_still_works_inside_the_sandbox(active):
    from grpo_desktop.engine.rewards import functions as rewards

    # The helper's own code (it imports grpo_desktop, math-verify and sympy) under the same caps.
    with CheckerProcess(rewards._VERIFIER_SOURCE, 10.0, label="The math-verify helper") as proc:
        results = proc.check_many(["$\\frac{1}{2}$", "$x+1$"], ["$0.5$", "$x+2$"], ["", ""])
        assert [r.value for r in results] == [1.0, 0.0], results
        assert proc.protections.startswith("The math-verify helper runs in a separate process")
        assert active["memory"]["text"] in proc.protections


def test_a_frozen_app_starts_its_checker_child_through_its_entry(monkeypatch, tmp_path):
    # A stand-in for the frozen executable: the real packaging/entry.py under this interpreter.
    entry = os.path.join(ROOT, "packaging", "entry.py")
    app = tmp_path / "grpo-desktop"
    app.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{os.path.abspath(entry)}" "$@"\n')
    app.chmod(0o755)
    if not POSIX:
        pytest.skip("the stand-in executable is a shell script")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(app))
    assert sandbox.child_command() == [str(app), sandbox.CHILD_FLAG]
    res, _ = one("def check(c, a, p):\n    return float(c == a)\n", "4", "4")
    assert res.value == 1.0
