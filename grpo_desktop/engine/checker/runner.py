"""Run a user-written checker, `check(completion, answer, prompt) -> float`, in a locked-in child.

The child is a fresh interpreter (sandbox.child_command) started with subprocess, not
multiprocessing: only then does it begin with an environment of our choosing (an allow-list: no
HF_TOKEN, no keys), in its own session and a private temporary folder. It locks itself in
(sandbox.apply) before any user code runs; `CheckerProcess.protections` says what took effect
here, and the trainer logs it. Errors are results (`CheckResult.value is None` plus the text),
never a silent 0 and never an exception out of `check_many`.

Not a security boundary: the limits contain accidents and crude misuse; code written to escape
them may find a way (docs/guide.md, "The custom checker's sandbox"). The trust prompt before code
from elsewhere runs is the real boundary. Standard library only. Try it:
    python -c "from grpo_desktop.engine.checker.runner import test_checker as t; \\
print(t('def check(c, a, p):\\n    return float(c == a)', [('4', '4', '2+2?')]))"
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import signal
import subprocess
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from grpo_desktop.engine.checker import sandbox
from grpo_desktop.engine.checker.child import MAX_TEXT, clean_reply
from grpo_desktop.engine.checker.source import LABEL, compile_checker
from grpo_desktop.engine.errors import CheckerError

__all__ = ["CheckResult", "CheckerProcess", "compile_checker", "test_checker"]

DEFAULT_MEMORY_MB = 2048
_KEEP_OUTPUT = 16384  # bytes of a child's output the parent keeps (the rest is read and dropped)
_INCIDENTS = 50
# An answer is one short JSON line; a longer one (code that wrote to the reply pipe itself) is
# dropped unread, so a hostile checker cannot make the parent hold or store a huge text.
MAX_REPLY = 65536
_OVERSIZED = b"oversized"
# A batch whose first calls all time out stops calling check() for the rest of it: a checker
# that hangs on every answer costs these calls' time limits per step, not every answer's.
GIVE_UP_AFTER = 3


@dataclass
class CheckResult:
    value: float | None  # None: could not score, see error
    error: str | None
    line: int | None  # line in the user's source where it failed, when known
    timed_out: bool = False  # the call hit its time limit (or was skipped after such calls)


# ---------------------------------------------------------------- one child process


class _Output:
    """The end of what a child printed (a bounded buffer) and how much it printed in all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        with self.lock:
            self.total += len(chunk)
            self.tail += chunk[-_KEEP_OUTPUT:]
            del self.tail[:-_KEEP_OUTPUT]

    def mark(self) -> None:
        with self.lock:
            self.tail.clear()
            self.total = 0

    def text(self) -> tuple[str, int]:
        with self.lock:
            return self.tail.decode("utf-8", "replace"), self.total


def _with_output(error: str, text: str | None, total: int | None) -> str:
    if not total or not text:
        return error
    shown = text[-MAX_TEXT:]
    return f"{error}\nIts last output ({len(shown):,} of {total:,} bytes printed):\n{shown}"


def _exit_reason(code: int | None) -> str:
    if os.name == "posix" and code == -signal.SIGXCPU:
        return ": it used more than its CPU-time limit"
    return ""


class _Child:
    """A started child: its process (a session leader), the threads draining its pipes, its folder."""

    def __init__(self, init: dict[str, Any]):
        self.workdir = sandbox.make_workdir()
        kwargs: dict[str, Any] = {}
        if os.name == "posix":
            kwargs["start_new_session"] = True
        else:
            kwargs["creationflags"] = (
                subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.CREATE_NO_WINDOW
            )
        try:
            self.proc = subprocess.Popen(
                sandbox.child_command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workdir,
                env=sandbox.child_environment(self.workdir),
                close_fds=True,
                **kwargs,
            )
        except OSError as exc:
            sandbox.remove_workdir(self.workdir)
            raise CheckerError(f"{init['label']} could not start its process: {exc}") from None
        self.replies: queue.SimpleQueue = queue.SimpleQueue()
        self.output = _Output()
        self._threads = [
            threading.Thread(target=self._read_replies, daemon=True, name="checker-replies"),
            threading.Thread(target=self._drain_output, daemon=True, name="checker-output"),
        ]
        for thread in self._threads:
            thread.start()
        self._stopped = False
        self.send(json.dumps(init).encode())

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_replies(self) -> None:
        try:
            while line := self.proc.stdout.readline(MAX_REPLY + 1):
                if len(line) > MAX_REPLY:  # read the rest of it and drop it
                    while (rest := self.proc.stdout.readline(MAX_REPLY)) and not rest.endswith(
                        b"\n"
                    ):
                        pass
                    line = _OVERSIZED
                self.replies.put(line)
        except (OSError, ValueError):
            pass
        self.replies.put(None)  # the child is gone

    def _drain_output(self) -> None:
        fd = self.proc.stderr.fileno()
        try:
            while chunk := os.read(fd, 65536):
                self.output.add(chunk)
        except OSError:
            pass

    def send(self, payload: bytes) -> None:
        """One line to the child. Raises OSError when it is gone."""
        self.proc.stdin.write(payload + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next answer; None when the child died. Raises queue.Empty after `timeout`."""
        line = self.replies.get(timeout=timeout)
        if line is None:
            return None
        if line is _OVERSIZED:
            return {"error": f"the checker process sent an answer over {MAX_REPLY:,} bytes"}
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            return {"error": "the checker process sent something that is not an answer"}
        return clean_reply(msg)  # capped and cleaned again here: the child's code is not trusted

    def exited(self) -> bool:
        """Whether the process has ended, without reaping it (its id stays ours until stop())."""
        if not hasattr(os, "waitid"):  # Windows, macOS: reaps it (killpg may then find none)
            return self.proc.poll() is not None
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def stop(self) -> int | None:
        """Kill the child and everything in its session, reap it, remove its folder. Idempotent.
        Returns its exit code (negative: the signal that ended it)."""
        if self._stopped:
            return self.proc.returncode
        self._stopped = True
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        if os.name == "posix":
            with contextlib.suppress(OSError):  # before reaping: the group id is still ours
                os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            self.proc.kill()
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        for thread in self._threads:  # they end at EOF, once nothing holds the pipes open
            thread.join(1.0)
        for pipe in (self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                pipe.close()
        sandbox.remove_workdir(self.workdir)
        return code


# ---------------------------------------------------------------- the parent side


class CheckerProcess:
    """A persistent child that evaluates check() with a time limit per call. Thread-safe.

    The child is started (and the source run once) in the constructor: problems at the module
    level (an import that fails, no check) raise CheckerError there, not halfway through a run.
    An exception inside check() comes back as text naming the exception and the line of the
    user's source; a call that times out, or a child that dies (os._exit, a segfault, its CPU
    time used up), is killed with everything it started (the whole session), recorded as that
    call's error, and a fresh child takes the next call. NaN, inf and anything that is not a
    number are errors too. What the code prints goes to a pipe the parent drains; the last bytes
    of it are kept with that call's error. When the first `give_up_after` calls of a
    `check_many` batch all time out, the rest of that batch is not called (each an error that
    says so): a checker that hangs on everything costs a few time limits per step, not one per
    answer; the next batch tries again (0 turns this off).
    `label` names the code in messages ("The custom checker"). `restrict` picks which optional
    protections (sandbox.LAYERS) to try; the default is all of them; tests switch some off.
    """

    def __init__(
        self,
        source: str,
        timeout_s: float = 5.0,
        startup_timeout_s: float = 60.0,
        *,
        memory_mb: int = DEFAULT_MEMORY_MB,
        label: str = LABEL,
        restrict: tuple[str, ...] = sandbox.LAYERS,
        give_up_after: int = GIVE_UP_AFTER,
    ):
        compile_checker(source, label)
        self.source = source
        self.label = label
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.memory_mb = int(memory_mb)
        self.cpu_s = math.ceil(self.timeout_s) + 1  # RLIMIT_CPU counts whole seconds
        self.restrict = tuple(restrict)
        self.give_up_after = int(give_up_after)
        self.protection_list: list[dict[str, Any]] = []
        self.incidents: list[str] = []  # children replaced between calls, and why
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._finalizer: weakref.finalize | None = None
        self._closed = False
        self._start()

    @property
    def protections(self) -> str:
        """One line for the log: which protections are active for this checker here."""
        return sandbox.describe(self.protection_list, self.label)

    # -- lifecycle

    def _start(self) -> None:
        init = {
            "source": self.source,
            "label": self.label,
            "memory_mb": self.memory_mb,
            "cpu_s": self.cpu_s,
            "load_cpu_s": math.ceil(self.startup_timeout_s),
            "layers": list(self.restrict),
        }
        child = _Child(init)
        self._child = child
        self._finalizer = weakref.finalize(self, child.stop)
        for key, late in (
            ("started", f"{self.label}'s process did not start"),
            ("ready", f"{self.label} did not finish loading"),
        ):
            try:
                msg = child.receive(self.startup_timeout_s)
            except queue.Empty:
                self._discard()
                raise CheckerError(f"{late} within {self.startup_timeout_s:g} s") from None
            if msg is None:
                text, total = child.output.text()
                code = self._discard()
                error = f"{self.label}'s process crashed while loading (exit code {code})"
                raise CheckerError(_with_output(error, text, total))
            if key not in msg:
                self._discard()
                error = msg.get("error", f"{self.label}'s process failed to start")
                raise CheckerError(_with_output(error, msg.get("output"), msg.get("printed")))
            if key == "started":
                self.protection_list = sandbox.parent_protections() + msg["protections"]

    def _discard(self) -> int | None:
        """Stop the current child (if any) and forget it. Returns its exit code."""
        code = None
        if self._finalizer is not None:
            self._finalizer.detach()
            code = self._child.stop()
        self._child = self._finalizer = None
        return code

    def _note(self, text: str) -> None:
        self.incidents = [*self.incidents[-(_INCIDENTS - 1) :], text]

    def close(self) -> None:
        """Stop the child and all it started. Idempotent; safe to call from any thread."""
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
        return self._child.pid if self._child is not None else None

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
            results: list[CheckResult] = []
            for c, a, p in zip(completions, answers, prompts):
                if self._gave_up(results):
                    results += self._skipped(len(completions) - len(results))
                    break
                results.append(self._call(c, a, p))
            return results

    def _gave_up(self, results: list[CheckResult]) -> bool:
        """Whether this batch's first `give_up_after` calls all timed out (then it stops)."""
        n = self.give_up_after
        return n > 0 and len(results) == n and all(r.timed_out for r in results)

    def _skipped(self, count: int) -> list[CheckResult]:
        """The rest of a batch whose first calls all timed out: not called, each an error that
        says so (worded as a timeout, as the run's checker watch counts them)."""
        error = (
            f"not called: check() timed out on the first {self.give_up_after} answers of this "
            f"batch ({self.timeout_s:g} s each), so the rest of the batch was not checked"
        )
        return [CheckResult(None, error, None, timed_out=True) for _ in range(count)]

    def _ended_between_calls(self) -> None:
        code = self._discard()
        self._note(
            f"the checker process ended between calls (exit code {code}{_exit_reason(code)}); "
            "a fresh one took over"
        )

    def _send(self, payload: bytes) -> CheckResult | None:
        """Hand one call to a live child (starting one if needed). A result only on failure."""
        for _ in range(3):
            try:
                if self._child is not None and self._child.exited():
                    self._ended_between_calls()
                if self._child is None:
                    self._start()
                self._child.send(payload)
                return None
            except CheckerError as exc:
                return CheckResult(None, f"the checker could not be restarted: {exc}", None)
            except OSError:  # the child died between calls: not this call's fault, retry
                self._ended_between_calls()
        return CheckResult(None, "the checker process could not be reached", None)

    def _call(self, completion: str, answer: str, prompt: str) -> CheckResult:
        payload = json.dumps([completion, answer, prompt], default=str).encode()
        for _ in range(2):  # a second round only after the child asked to be replaced
            failed = self._send(payload)
            if failed is not None:
                return failed
            child = self._child
            child.output.mark()
            try:
                reply = child.receive(self.timeout_s)
            except queue.Empty:
                self._discard()
                text, total = child.output.text()
                error = f"check() timed out after {self.timeout_s} s"
                return CheckResult(None, _with_output(error, text, total), None, timed_out=True)
            except BaseException:  # e.g. KeyboardInterrupt: never leave a reply pending
                self._discard()
                raise
            if reply is None:
                code = self._discard()
                text, total = child.output.text()
                error = f"the checker process crashed (exit code {code}){_exit_reason(code)}"
                return CheckResult(None, _with_output(error, text, total), None)
            if not reply.get("recycle"):
                break
            self._discard()  # near its lifetime CPU limit: a fresh child takes the same call
        else:
            return CheckResult(None, "the checker process kept asking to be replaced", None)
        if "error" in reply:
            error = _with_output(reply["error"], reply.get("output"), reply.get("printed"))
            return CheckResult(None, error, reply.get("line"))
        value = reply["value"]
        if not math.isfinite(value):
            return CheckResult(None, f"check() returned {value}; return a finite number", None)
        return CheckResult(value, None, None)


def test_checker(
    source: str,
    samples: list[tuple[str, str, str]],
    timeout_s: float = 5.0,
    memory_mb: int = DEFAULT_MEMORY_MB,
) -> list[CheckResult]:
    """Run check() on (completion, answer, prompt) samples in a throwaway child: the GUI's
    "Test checker" button. Raises CheckerError when the source cannot even load."""
    with CheckerProcess(source, timeout_s=timeout_s, memory_mb=memory_mb) as proc:
        return proc.check_many(
            [s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples]
        )


test_checker.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
