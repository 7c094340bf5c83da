"""The walls around the process that runs user-written checker code, and what each OS gives.

Two halves. The parent (checker/runner.py) starts the child with `child_command()` in a private
temporary folder (its working, home and temporary directory) with `child_environment()`: an
allow-list (PATH, locale, library path; no tokens, keys or anything else of the user's), in its
own session (POSIX) or process group (Windows). The child then calls `apply()` on itself before
any user code runs: a memory cap, a CPU-time cap per call and between calls, no new processes,
and on Linux the walls of sandbox_linux.py (Landlock: what it may read and write). Each
protection is reported as {"key", "on", "text"}; `describe()` turns the list into the log line.

Not a security boundary: without Landlock the code can still read and write the user's files; on
macOS and Windows far less is held back (docs/guide.md, "The custom checker's sandbox"). The trust
prompt before code from elsewhere runs stays the real boundary. Standard library only.
Try it:  python -c "from grpo_desktop.engine.checker.sandbox import *; print(child_command())"
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
from typing import Any

from grpo_desktop.engine.checker.readable import HOME_ENV

CHILD_FLAG = "--grpo-checker-child"  # argv[1] of the frozen app when it is to be a checker child
LAYERS = ("namespaces", "landlock", "seccomp", "nproc")  # the ones that can be switched off
CPU_LIFETIME_S = 600  # hard RLIMIT_CPU of one child process, seconds
IDLE_CPU_S = 1  # CPU seconds the child may burn between calls before SIGXCPU ends it
IDLE_RECYCLE_S = 0.5  # CPU seconds burnt between calls after which a fresh child takes over
_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "SYSTEMROOT", "WINDIR",
         "SYSTEMDRIVE", "COMSPEC", "PATHEXT", "NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE")  # fmt: skip
_BOOT = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
    "from grpo_desktop.engine.checker.child import main; raise SystemExit(main())"
)


def protection(key: str, on: bool, text: str) -> dict[str, Any]:
    return {"key": key, "on": on, "text": text}


# ---------------------------------------------------------------- parent side


def child_command() -> list[str]:
    """How to start a checker child: this Python in isolated mode, or the frozen app itself."""
    if getattr(sys, "frozen", False):  # PyInstaller: the bundle's entry dispatches CHILD_FLAG
        exe = sys.executable
        if sys.platform == "win32":  # the windowed exe has no usable std handles: its console twin
            stem, ext = os.path.splitext(exe)
            twin = f"{stem}-cli{ext}"
            exe = twin if os.path.isfile(twin) and not stem.endswith("-cli") else exe
        return [exe, CHILD_FLAG]
    # -I: no PYTHON* variables, no user site, no current folder on sys.path. The parent's sys.path
    # (absolute) goes along, so a source checkout imports as it does here.
    path = [os.path.abspath(p) for p in sys.path]
    return [sys.executable, "-I", "-c", _BOOT, json.dumps(path)]


def child_environment(workdir: str) -> dict[str, str]:
    """The child's whole environment: an allow-list, with home and temp in `workdir`."""
    env = {k: v for k, v in os.environ.items() if k.upper() in _KEEP or k.upper().startswith("LC_")}
    env.update(HOME=workdir, TMPDIR=workdir, TEMP=workdir, TMP=workdir)
    if sys.platform == "win32":
        env.update(USERPROFILE=workdir, APPDATA=workdir, LOCALAPPDATA=workdir)
    # One thread per numeric library: thread pools would eat the memory cap (and RLIMIT_NPROC).
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[HOME_ENV] = os.path.expanduser("~")  # never readable as a whole (checker/readable.py)
    return env


def make_workdir() -> str:
    """A new private folder, named after this process; folders of parents that are gone (killed
    before they could remove them) are removed first. POSIX only: on Windows os.kill(pid, 0) would
    end that process."""
    if os.name == "posix":
        for entry in os.scandir(tempfile.gettempdir()):
            match = re.fullmatch(r"grpo-checker-(\d+)-\w+", entry.name)
            if match and entry.is_dir(follow_symlinks=False) and not _alive(int(match.group(1))):
                remove_workdir(entry.path)
    return tempfile.mkdtemp(prefix=f"grpo-checker-{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: not ours to judge
        return True
    return True


def remove_workdir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def parent_protections() -> list[dict[str, Any]]:
    """What the parent sets up when it starts the child (always on)."""
    group = (
        "its own session, killed as a whole (no processes left behind)"
        if os.name == "posix"
        else "its own process group (only the checker process itself is killed)"
    )
    return [
        protection("environment", True, "an environment without your keys or tokens"),
        protection("folder", True, "a private temporary working and home folder"),
        protection("group", True, group),
        protection("output", True, "output captured (the end of it kept with errors)"),
    ]


def describe(protections: list[dict[str, Any]], label: str = "The custom checker") -> str:
    """One log line: what is held back and what is not, here."""
    on = [p["text"] for p in protections if p["on"]]
    off = [p["text"] for p in protections if not p["on"]]
    line = f"{label} runs in a separate process with " + "; ".join(on)
    if off:
        line += ". Not available here: " + "; ".join(off)
    return line + ". Only trust checker code you have read: the limits are a guard, not a wall."


# ---------------------------------------------------------------- child side


def _rlimit(name: str, soft: int, hard: int | None = None) -> None:
    import resource

    res = getattr(resource, name)
    _, old_hard = resource.getrlimit(res)
    hard = soft if hard is None else hard
    if old_hard != resource.RLIM_INFINITY:
        hard, soft = min(hard, old_hard), min(soft, old_hard)
    resource.setrlimit(res, (soft, hard))


def _cpu_used() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_seconds() -> float:
    """CPU time this process has used so far, all threads (every OS)."""
    import time

    return time.process_time()


def arm_idle() -> float:
    """After a reply: while the child waits for the next call, a thread left running may burn at
    most IDLE_CPU_S (plus the fraction of a second RLIMIT_CPU rounds up to) before SIGXCPU ends
    the process. Returns the CPU time now, for `burnt_idle`."""
    now = cpu_seconds()
    if os.name == "posix":
        import resource

        soft = math.ceil(_cpu_used() + IDLE_CPU_S)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard == resource.RLIM_INFINITY or soft <= hard:
            with contextlib.suppress(ValueError, OSError):  # then only the per-call limit
                resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    return now


def burnt_idle(since: float) -> str | None:
    """When a call arrives: why this child should be replaced, if something (a thread the code
    left running) burnt CPU while it waited, which no checker needs; else None."""
    burnt = cpu_seconds() - since
    if burnt <= IDLE_RECYCLE_S:
        return None
    return f"it used {burnt:.1f} s of CPU between calls (a thread left running?)"


def arm_cpu(cpu_s: int) -> bool:
    """Before a call: CPU soft limit = used + cpu_s. False when the hard limit is too near (the
    child should be replaced) or the platform has no such limit."""
    if os.name != "posix":
        return True
    import resource

    soft = math.ceil(_cpu_used() + cpu_s)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY and soft > hard:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ValueError, OSError):
        return False
    return True


def _limits(memory_mb: int, load_cpu_s: int, cpu_s: int) -> list[dict[str, Any]]:
    if os.name != "posix":
        why = "no memory or CPU-time limit (Windows has no setrlimit)"
        return [protection("memory", False, why)]
    out = []
    _rlimit("RLIMIT_CORE", 0)
    try:
        _rlimit("RLIMIT_AS", memory_mb << 20)
        if sys.platform == "darwin":
            out.append(protection("memory", False, "no memory cap (macOS ignores RLIMIT_AS)"))
        else:
            out.append(protection("memory", True, f"memory ≤ {memory_mb:,} MB (RLIMIT_AS)"))
    except (ValueError, OSError) as exc:
        out.append(protection("memory", False, f"no memory cap (RLIMIT_AS: {exc})"))
    try:
        hard = max(CPU_LIFETIME_S, 20 * cpu_s, 2 * load_cpu_s)
        _rlimit("RLIMIT_CPU", math.ceil(_cpu_used() + load_cpu_s), hard)
        text = (
            f"CPU time ≤ {cpu_s} s per call and ≤ {IDLE_CPU_S} s between calls, also for "
            "threads left running (RLIMIT_CPU)"
        )
        out.append(protection("cpu", True, text))
    except (ValueError, OSError) as exc:
        out.append(protection("cpu", False, f"no CPU-time cap (RLIMIT_CPU: {exc})"))
    return out


def limit_processes(layers: frozenset[str]) -> dict[str, Any]:
    """RLIMIT_NPROC = 0: no new processes (on Linux no new threads either). Call it after the
    child's own threads are started."""
    if os.name != "posix":
        return protection("nproc", False, "new processes not prevented (Windows)")
    if "nproc" not in layers:
        return protection("nproc", False, "new processes allowed (RLIMIT_NPROC switched off)")
    try:
        _rlimit("RLIMIT_NPROC", 0)
    except (ValueError, OSError) as exc:
        return protection("nproc", False, f"no process limit (RLIMIT_NPROC: {exc})")
    if os.geteuid() == 0:
        return protection("nproc", False, "no process limit (RLIMIT_NPROC does not bind root)")
    return protection("nproc", True, "no new processes (RLIMIT_NPROC)")


def apply(
    workdir: str, memory_mb: int, load_cpu_s: int, cpu_s: int, layers: frozenset[str]
) -> list[dict]:
    """Lock this process (the child, still single-threaded) in. Returns what took effect.
    `load_cpu_s` is the CPU time allowed for loading the code; `arm_cpu` sets it per call.

    - memory: RLIMIT_AS (the `checker_memory_mb` setting); a bigger allocation raises MemoryError.
    - CPU: RLIMIT_CPU. `arm_cpu()` moves the soft limit before each call to the time used so far
      plus the per-call allowance, and `arm_idle()` after it to IDLE_CPU_S more, so a call that
      burns more, or a thread left running between calls, is ended by SIGXCPU; a child that burnt
      CPU while idle anyway (it caught the signal) is replaced when the next call comes
      (`burnt_idle`); a hard limit per process (CPU_LIFETIME_S) holds even if the code lifts the
      soft limit. Near it the child asks to be replaced.
    - no new processes: RLIMIT_NPROC = 0 (also no new threads on Linux). Root is exempt from it.
    - no core dumps.
    - Linux only (sandbox_linux.py), each where the kernel allows: a user + network namespace, a
      Landlock ruleset (read-only files outside the folder; only Python's and the system's files
      readable: checker/readable.py), a seccomp filter (no processes, sockets, or signals to
      others)."""
    out: list[dict[str, Any]] = []
    linux = sys.platform.startswith("linux")
    if linux:
        from grpo_desktop.engine.checker import sandbox_linux as lx

        if "namespaces" in layers:  # first: needs a single thread and no Landlock yet
            out.append(_layer("namespaces", lx.enter_namespaces, "no network namespace"))
        try:  # the OOM killer takes the checker before anything of the user's
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")
        except OSError:
            pass
    out += _limits(memory_mb, load_cpu_s, cpu_s)
    if not linux:
        why = "network and files not restricted: it can read and write your files (Linux only)"
        out.append(protection("linux", False, why))
    else:
        if "landlock" in layers:
            fn = lambda: lx.restrict_files(workdir)  # noqa: E731
            missing = "files outside its folder stay writable, and every file you can read readable"
            out.append(_layer("landlock", fn, missing))
        if "seccomp" in layers:
            fn = lx.forbid_processes_and_sockets
            out.append(_layer("seccomp", fn, "processes and sockets not filtered"))
    os.environ.pop(HOME_ENV, None)
    return out


def _layer(key: str, fn: Any, missing: str) -> dict[str, Any]:
    from grpo_desktop.engine.checker.sandbox_linux import Unavailable

    try:
        return protection(key, True, fn())
    except (Unavailable, OSError) as exc:
        return protection(key, False, f"{missing} ({exc})")
