"""The checker child process: lock itself in, load the user's code, answer calls one at a time.

Started by checker.CheckerProcess as `python -I -c …` (or, in a frozen build, as the app itself
with sandbox.CHILD_FLAG: the bundle's entry calls `run_if_child()` first). It locks itself in
(sandbox.apply) before the user's code is even compiled, then answers one JSON line per call;
only plain data crosses the pipes, nothing is unpickled. What the code prints is captured, never
shown on the terminal, and its last bytes are sent with an error.

Standard library only (plus sandbox.py), so the child starts without loading the app's heavy
dependencies. Try it: the `test_checker` example in checker/runner.py starts one.
"""

from __future__ import annotations

import errno
import io
import json
import numbers
import os
import queue
import reprlib
import signal
import sys
import threading
import traceback
import unicodedata
from typing import Any

from grpo_desktop.engine.checker import sandbox

FILENAME = "<checker>"
NEEDS_CHECK = "define a function check(completion, answer, prompt) that returns a number"
MAX_TEXT = 500  # characters of an exception message (and of output) kept per rollout
MAX_ERROR = 1000  # characters of a whole error text, whatever it is made of
_MAX_NAME = 100  # characters of an exception's type name
_TAIL = 4096  # bytes of output kept per call
# Unicode's bidirectional overrides and isolates: they make shown text read other than it is.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class _Tee(io.RawIOBase):
    """Writes through to a file descriptor and keeps the last bytes and the count since reset."""

    def __init__(self, fd: int):
        super().__init__()
        self.fd, self.tail, self.total = fd, bytearray(), 0

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        self.total += n
        self.tail += view[-_TAIL:]
        del self.tail[:-_TAIL]
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except OSError:  # the parent stopped reading: it is going away
                break
        return n

    def reset(self) -> None:
        self.tail.clear()
        self.total = 0

    def text(self) -> str:
        return self.tail.decode("utf-8", "replace")


def clean_text(text: str, limit: int, *, lines: bool = False, tail: bool = False) -> str:
    """`text` made safe to store and show: at most `limit` characters (the start, marked "…",
    or with `tail` the end, as output is shown), without control characters (terminal escapes,
    NULs, carriage returns), bidirectional overrides or lone surrogates (which cannot be written
    as UTF-8). Newlines and tabs stay with `lines`; otherwise they become spaces."""
    keep = "\n\t" if lines else ""
    out = []
    for ch in text[-4 * limit :] if tail else text[: 4 * limit]:  # bounded work for huge input
        if ch in keep:
            out.append(ch)
        elif ch in "\n\t":
            out.append(" ")
        elif ch in _BIDI:
            continue
        elif unicodedata.category(ch) in ("Cc", "Cs"):
            out.append("\ufffd" if unicodedata.category(ch) == "Cs" else "")
        else:
            out.append(ch)
    clean = "".join(out)
    if len(clean) <= limit:
        return clean
    return clean[-limit:] if tail else clean[: limit - 1] + "…"


def clean_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """Cap and clean what a reply carries out of the sandbox: the error text and the output."""
    if "error" in reply:
        reply["error"] = clean_text(str(reply["error"]), MAX_ERROR)
    if "output" in reply:
        reply["output"] = clean_text(reply["output"], MAX_TEXT, lines=True, tail=True)
    return reply


def _error_line(exc: BaseException) -> int | None:
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == FILENAME]
    if isinstance(exc, SyntaxError) and exc.filename == FILENAME:
        lines.append(exc.lineno)
    return lines[-1] if lines else None


def describe_exception(exc: BaseException, what: str, memory_mb: int) -> dict[str, Any]:
    line = _error_line(exc)
    try:
        message = str(exc)
    except Exception:
        message = "(the exception's message could not be shown)"
    message = clean_text(message, MAX_TEXT)
    name = clean_text(type(exc).__name__, _MAX_NAME)
    where = f" at line {line}" if line is not None else ""
    text = f"{what} raised {name}{where}"
    text = f"{text}: {message}" if message else text
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        text += (
            f" (the checker may use {memory_mb:,} MB; raise 'Checker memory limit' if it "
            "really needs more)"
        )
    return {"error": text, "line": line}


def as_reply(result: Any) -> dict[str, Any]:
    """Turn check()'s return value into plain data. Booleans count as numbers (True → 1.0)."""
    if result is None:
        return {"error": "check() returned None; return a number (is a return missing?)"}
    if isinstance(result, numbers.Real) or (
        hasattr(type(result), "__float__") and not isinstance(result, (str, bytes))
    ):  # int, float, bool, Fraction, numpy scalars
        try:
            return {"value": float(result)}
        except Exception as exc:
            return {"error": f"check() returned a number that is not a float: {exc}"}
    try:
        shown = reprlib.repr(result)
    except Exception:
        shown = "(unprintable)"
    return {"error": f"check() returned {type(result).__name__} {shown}; return a number"}


def _end_everything() -> None:
    """The parent is gone: kill this process and whatever it started (its own session)."""
    if os.name == "posix" and os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(0)


def _read_calls(requests: Any, calls: queue.SimpleQueue) -> None:
    try:
        for line in requests:
            calls.put(line)
    except (OSError, ValueError):
        pass
    _end_everything()


def main() -> int:
    """The child's whole life. Returns its exit code.

    The protocol is one JSON line each way: the parent first sends the settings and the source,
    the child answers {"started", "protections"}, then {"ready"} or {"error"}; then each call is
    a line [completion, answer, prompt] answered by {"value"} or {"error", "line", "output",
    "printed"}, or {"recycle"} when this process is near its lifetime CPU limit and a fresh one
    should take the call.

    File descriptors: calls arrive on the original stdin and answers leave on the original
    stdout, both moved to private numbers first; fd 0 becomes /dev/null and fds 1 and 2 the
    parent's capture pipe, so output from C code is captured too. A thread reads the calls, so
    that when the parent goes away (the pipe closes) the whole process group is killed at once,
    even while check() is busy."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the parent
    sys.dont_write_bytecode = True
    sys.argv = ["checker"]
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # print() from C code, or after sys.stdout is replaced, is captured too
    tee = _Tee(2)
    out = io.TextIOWrapper(
        io.BufferedWriter(tee), encoding="utf-8", errors="replace", line_buffering=True
    )
    sys.stdout = sys.stderr = out
    sys.stdin = open(os.devnull)  # noqa: SIM115

    def send(msg: dict[str, Any]) -> None:
        view = memoryview((json.dumps(clean_reply(msg)) + "\n").encode())
        while view:
            view = view[os.write(replies, view) :]

    def flush() -> None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass

    try:
        init = json.loads(requests.readline())
    except ValueError:
        return 2
    memory_mb, cpu_s, label = init["memory_mb"], init["cpu_s"], init["label"]
    layers = frozenset(init["layers"])
    protections = sandbox.apply(os.getcwd(), memory_mb, init["load_cpu_s"], cpu_s, layers)
    calls: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_read_calls, args=(requests, calls), daemon=True).start()
    protections.append(sandbox.limit_processes(layers))
    send({"started": True, "protections": protections})

    namespace: dict[str, Any] = {"__name__": "checker"}
    try:
        exec(compile(init["source"], FILENAME, "exec", dont_inherit=True), namespace)
        fn = namespace.get("check")
        if not callable(fn):
            what = f"{reprlib.repr(fn)} ({type(fn).__name__})"
            send({"error": f"{label} binds check to {what}, not a function: {NEEDS_CHECK}"})
            return 0
    except BaseException as exc:
        flush()
        reply = describe_exception(exc, "its code", memory_mb)
        reply.update(error=f"{label} failed to load: {reply['error']}")
        if tee.total:
            reply.update(output=tee.text(), printed=tee.total)
        send(reply)
        return 0
    send({"ready": True})
    idle_from = sandbox.arm_idle()
    while True:
        line = calls.get()
        call = json.loads(line)
        burnt = sandbox.burnt_idle(idle_from)
        if burnt:  # a fresh child takes this call; this one, and what it left running, ends
            send({"recycle": True, "why": burnt})
            return 0
        if not sandbox.arm_cpu(cpu_s):
            send({"recycle": True, "why": "near its lifetime CPU limit"})
            return 0
        tee.reset()
        try:
            reply = as_reply(fn(*call))
        except (Exception, SystemExit) as exc:
            reply = describe_exception(exc, "check()", memory_mb)
        flush()
        if "error" in reply and tee.total:
            reply.update(output=tee.text(), printed=tee.total)
        send(reply)
        idle_from = sandbox.arm_idle()


def run_if_child() -> None:
    """In a frozen app's entry, before anything else: become a checker child when asked to."""
    if sys.argv[1:2] == [sandbox.CHILD_FLAG]:
        raise SystemExit(main())
