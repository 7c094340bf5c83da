"""Run a user-written checker, `check(completion, answer, prompt) -> float`, in a child process.

The child is started with multiprocessing's "spawn" context (the trainer process has many threads
and torch loaded; forking it is unsafe), compiles the source once and then answers one call at a
time over a pipe. The parent waits for each call with its own time limit. An exception inside
check() comes back as text naming the exception and the line of the user's source; a call that
times out, or a child that dies (os._exit, a segfault, running out of memory), is killed, recorded
as that call's error, and a fresh child takes the next call. NaN, inf and anything that is not a
number become errors too. Errors are results (`CheckResult.value is None` plus the text), never a
silent 0 and never an exception out of `check_many`.

Only plain data crosses the pipe, as JSON: strings in, a float or an error text out. Nothing the
user's code builds is ever unpickled in the parent.

What this is not: a security sandbox. The child runs with the user's permissions and can read or
delete their files; it only contains crashes and hangs. The GUI asks the user to trust the code
before a run. The child is a daemon process, so check() cannot start processes of its own.
This module imports only the standard library, so the child starts fast (about 0.1 s).

Try it:
    python -c "from grpo_desktop.engine.checker import test_checker as t; \
print(t('def check(c, a, p):\\n    return float(c == a)', [('4', '4', '2+2?')]))"
"""

from __future__ import annotations

import ast
import json
import math
import multiprocessing
import numbers
import reprlib
import signal
import threading
import traceback
import weakref
from dataclasses import dataclass
from typing import Any

from grpo_desktop.engine.errors import CheckerError

FILENAME = "<checker>"
NEEDS_CHECK = "define a function check(completion, answer, prompt) that returns a number"
_MAX_TEXT = 500  # characters of an exception message kept per rollout


@dataclass
class CheckResult:
    value: float | None  # None: could not score, see error
    error: str | None
    line: int | None  # line in the user's source where it failed, when known


# ---------------------------------------------------------------- compile check (parent side)


def compile_checker(source: str) -> None:
    """Raise CheckerError when the source cannot work: a syntax error, or no usable check().

    Runs none of the user's code (the parent never does): the syntax is compiled and the module's
    top level is inspected for a `check` definition taking three arguments.
    """
    try:
        tree = compile(source, FILENAME, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        compile(tree, FILENAME, "exec", dont_inherit=True)
    except SyntaxError as exc:
        text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        raise CheckerError(f"line {exc.lineno}: {exc.msg}{text}") from None
    except ValueError as exc:  # null bytes in the source
        raise CheckerError(f"The checker source cannot be compiled: {exc}.") from None
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "check":
            raise CheckerError(f"line {node.lineno}: check must be a plain def, not async def")
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            _check_signature(node)
            return
        if _binds_check(node):
            return
    raise CheckerError(NEEDS_CHECK)


def _binds_check(node: ast.stmt) -> bool:
    """Whether a top-level statement other than a def binds the name `check`."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id == "check" for t in targets)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name) == "check" for a in node.names)
    if isinstance(node, ast.ClassDef):
        return node.name == "check"
    return False


def _check_signature(node: ast.FunctionDef) -> None:
    args = node.args
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    required_kw = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if (positional < 3 and args.vararg is None) or required > 3 or required_kw:
        raise CheckerError(
            f"line {node.lineno}: check() must take three arguments (completion, answer, prompt)"
        )


# ---------------------------------------------------------------- the child process


def _error_line(exc: BaseException) -> int | None:
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == FILENAME]
    if isinstance(exc, SyntaxError) and exc.filename == FILENAME:
        lines.append(exc.lineno)
    return lines[-1] if lines else None


def _describe(exc: BaseException, what: str) -> dict[str, Any]:
    line = _error_line(exc)
    try:
        message = str(exc)
    except Exception:
        message = "(the exception's message could not be shown)"
    if len(message) > _MAX_TEXT:
        message = message[:_MAX_TEXT] + "…"
    where = f" at line {line}" if line is not None else ""
    text = f"{what} raised {type(exc).__name__}{where}"
    return {"error": f"{text}: {message}" if message else text, "line": line}


def _as_reply(result: Any) -> dict[str, Any]:
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


def _child_main(conn: Any, source: str) -> None:
    """Entry point of the child: compile, report ready, then serve calls until EOF or None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the parent

    def send(msg: dict[str, Any]) -> None:
        conn.send_bytes(json.dumps(msg).encode())

    send({"started": True})
    namespace: dict[str, Any] = {"__name__": "checker"}
    try:
        exec(compile(source, FILENAME, "exec", dont_inherit=True), namespace)
        fn = namespace.get("check")
        if not callable(fn):
            raise TypeError(NEEDS_CHECK)
    except BaseException as exc:
        send(_describe(exc, "the checker code"))
        return
    send({"ready": True})
    while True:
        try:
            call = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if call is None:
            return
        try:
            reply = _as_reply(fn(*call))
        except (Exception, SystemExit) as exc:
            reply = _describe(exc, "check()")
        send(reply)


# ---------------------------------------------------------------- the parent side


def _stop(proc: Any, conn: Any) -> int | None:
    """End a child for sure: close its pipe, then terminate, then kill. Returns the exit code."""
    conn.close()
    proc.join(0.05)
    if proc.is_alive():
        proc.terminate()
        proc.join(0.5)
    if proc.is_alive():
        proc.kill()
        proc.join(5.0)
    return proc.exitcode


class CheckerProcess:
    """A persistent child that evaluates check() with a time limit per call. Thread-safe.

    The child is started (and the source run once) in the constructor: problems at the module
    level (an import that fails, no check) raise CheckerError there, not halfway through a run.
    """

    def __init__(self, source: str, timeout_s: float = 5.0, startup_timeout_s: float = 60.0):
        compile_checker(source)
        self.source = source
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None
        self._finalizer: weakref.finalize | None = None
        self._closed = False
        self._start()

    # -- lifecycle

    def _start(self) -> None:
        parent_conn, child_conn = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_child_main, args=(child_conn, self.source), name="grpo-checker", daemon=True
        )
        proc.start()
        child_conn.close()  # so the parent sees EOF when the child dies
        self._proc, self._conn = proc, parent_conn
        self._finalizer = weakref.finalize(self, _stop, proc, parent_conn)
        for key, limit, late in (
            ("started", self.startup_timeout_s, "the checker process did not start"),
            ("ready", self.startup_timeout_s, "the checker code did not finish loading"),
        ):
            if not parent_conn.poll(limit):
                self._discard()
                raise CheckerError(f"{late} within {limit:g} s")
            try:
                msg = json.loads(parent_conn.recv_bytes())
            except (EOFError, OSError):
                code = self._discard()
                raise CheckerError(
                    f"the checker process crashed while loading (exit code {code})"
                ) from None
            if key not in msg:
                self._discard()
                raise CheckerError(msg.get("error", "the checker process failed to start"))

    def _discard(self) -> int | None:
        """Stop the current child (if any) and forget it. Returns its exit code."""
        code = None
        if self._finalizer is not None:
            self._finalizer.detach()
            code = _stop(self._proc, self._conn)
        self._proc = self._conn = self._finalizer = None
        return code

    def close(self) -> None:
        """Stop the child. Idempotent; safe to call from any thread."""
        with self._lock:
            self._closed = True
            self._discard()

    def __enter__(self) -> CheckerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The current child's process id (it changes after a timeout or a crash)."""
        return self._proc.pid if self._proc is not None else None

    # -- calls

    def check_many(
        self, completions: list[str], answers: list[str], prompts: list[str]
    ) -> list[CheckResult]:
        """check() on each triple, one call at a time, each with its own time limit."""
        if not len(completions) == len(answers) == len(prompts):
            raise ValueError(
                f"check_many needs equal lengths, got {len(completions)} completions, "
                f"{len(answers)} answers and {len(prompts)} prompts"
            )
        with self._lock:
            if self._closed:
                raise RuntimeError("this CheckerProcess is closed")
            return [self._call(c, a, p) for c, a, p in zip(completions, answers, prompts)]

    def _call(self, completion: str, answer: str, prompt: str) -> CheckResult:
        payload = json.dumps([completion, answer, prompt], default=str).encode()
        for attempt in (1, 2):
            try:
                if self._proc is None:
                    self._start()
                self._conn.send_bytes(payload)
                break
            except CheckerError as exc:
                return CheckResult(None, f"the checker could not be restarted: {exc}", None)
            except OSError:  # the child died between calls: not this call's fault, retry once
                self._discard()
                if attempt == 2:
                    return CheckResult(None, "the checker process could not be reached", None)
        try:
            if not self._conn.poll(self.timeout_s):
                self._discard()
                return CheckResult(None, f"check() timed out after {self.timeout_s} s", None)
            reply = json.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            code = self._discard()
            return CheckResult(None, f"the checker process crashed (exit code {code})", None)
        except BaseException:  # e.g. KeyboardInterrupt: never leave a reply pending in the pipe
            self._discard()
            raise
        if "error" in reply:
            return CheckResult(None, reply["error"], reply.get("line"))
        value = reply["value"]
        if not math.isfinite(value):
            return CheckResult(None, f"check() returned {value}; return a finite number", None)
        return CheckResult(value, None, None)


def test_checker(
    source: str, samples: list[tuple[str, str, str]], timeout_s: float = 5.0
) -> list[CheckResult]:
    """Run check() on (completion, answer, prompt) samples in a throwaway child: the GUI's
    "Test checker" button. Raises CheckerError when the source cannot even load."""
    with CheckerProcess(source, timeout_s=timeout_s) as proc:
        return proc.check_many(
            [s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples]
        )


test_checker.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
