"""The "Will it fit?" estimate's child process, seen from the GUI: a QProcess running
`python -m grpo_desktop.engine.estimate.server` (one JSON line per request and per answer), so
the GUI process never imports torch or transformers for an estimate (no GIL held by them, no
event-loop stalls) and never creates a CUDA context (the probe's device facts are passed on).

`EstimateProcess.request(payload, tag)` starts the child on first use; one request is in the
child at a time, and of those waiting only the newest is kept (an answer to a superseded request
is dropped). `answered(tag, result, error)` says the newest request's answer. A child that dies
is restarted once and its request sent again; dying again is a one-line error answer (the next
request tries afresh). `stop()` (the window's close, or the application quitting) closes its
input, so it exits, and reaps it.

Each result's device gets `speed_load`: the computer's load average when this child measured the
CPU's speed (its first answer), which the view turns into a range (engine/estimate/timing.py).
It does not compute anything itself or know what the estimate means (estimate_view.py does).
Try it: tests/ui/panels/test_estimate.py.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QProcess, Signal

import grpo_desktop
from grpo_desktop.engine.estimate.timing import machine_load

RESTARTS = 1  # a child that dies twice running one request gives up on that request
STOP_WAIT_MS = 1000
STDERR_TAIL = 4000  # characters of the child's stderr kept for the error message
GPU_NEEDED = ("major", "minor", "multi_processor_count")  # clocks and bus: when torch has them


def server_command() -> tuple[str, list[str]]:
    """(program, arguments) of the estimate child: this Python, with this window's copy of the
    package first on its path (not one in the working directory, which stays the window's so
    relative model paths mean the same)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(grpo_desktop.__file__)))
    code = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from grpo_desktop.engine.estimate.server import main; sys.exit(main())"
    )
    return sys.executable, ["-u", "-c", code]


def device_facts(info: dict) -> dict | None:
    """What the device probe found (`SessionModel.device_info`), as the estimate child's
    `device`: {"kind": "cpu"}, a CUDA GPU's name, memory and properties, or None when the probe
    has not answered (or could not say): then the child finds the device itself."""
    if not info.get("probed") or info.get("error"):
        return None
    if not info.get("cuda"):
        return {"kind": "cpu"}
    props = info.get("gpu_props") or {}
    if not all(k in props for k in GPU_NEEDED) or not info.get("gpu_memory"):
        return None
    facts = {"kind": "cuda", "name": info.get("gpu_name", "CUDA GPU")}
    facts.update(total_bytes=int(info["gpu_memory"]), free_bytes=info.get("gpu_free"))
    facts.update(props)
    return facts


class EstimateProcess(QObject):
    """The estimate child (see the module docstring)."""

    answered = Signal(object, object, object)  # tag, result dict | None, error text | None

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._proc: QProcess | None = None
        self._next_id = 0
        self._latest = 0  # the id whose answer counts; 0: none
        self._tags: dict[int, Any] = {}
        self._in_flight: tuple[int, bytes] | None = None  # sent to the child, not answered
        self._waiting: tuple[int, bytes] | None = None  # the newest request not yet sent
        self._out = b""
        self._err = ""
        self._deaths = 0
        # the computer's load when the child measured the CPU's speed (its first estimate)
        self.speed_load: tuple[float, int] | None = None
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop)

    # ------------------------------------------------------------------ the API

    def request(self, payload: dict, tag: Any = None) -> int:
        """Ask for an estimate of `payload` ({"config", "free_bytes", "device"}); supersedes
        any earlier request. Returns its id."""
        self._next_id += 1
        ident = self._next_id
        line = json.dumps({"id": ident, **payload}, default=str).encode() + b"\n"
        self._latest, self._tags = ident, {ident: tag}
        self._waiting = (ident, line)
        self._pump()
        return ident

    def cancel(self) -> None:
        """Drop what is waiting and the answer to what the child is working on."""
        self._waiting, self._latest, self._tags = None, 0, {}

    def busy(self) -> bool:
        """Whether the newest request's answer is still to come."""
        return self._latest != 0 and (
            (self._waiting is not None and self._waiting[0] == self._latest)
            or (self._in_flight is not None and self._in_flight[0] == self._latest)
        )

    def running(self) -> bool:
        return self._proc is not None and self._proc.state() != QProcess.ProcessState.NotRunning

    def stop(self) -> None:
        """End the child and reap it: an idle one exits when its input closes, one busy with an
        estimate (which nobody will read) is killed, as is one that does not exit."""
        self.cancel()
        busy, self._in_flight = self._in_flight is not None, None
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.finished.disconnect(self._on_proc_finished)
        proc.errorOccurred.disconnect(self._on_proc_error_occurred)
        if proc.state() != QProcess.ProcessState.NotRunning:
            proc.closeWriteChannel()
            if busy or not proc.waitForFinished(STOP_WAIT_MS):
                proc.kill()
                proc.waitForFinished(STOP_WAIT_MS)
        proc.deleteLater()

    # ------------------------------------------------------------------ the child

    def _start(self) -> None:
        proc = QProcess(self)
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.SeparateChannels)
        proc.readyReadStandardOutput.connect(self._on_proc_ready_read_standard_output)
        proc.readyReadStandardError.connect(self._on_proc_ready_read_standard_error)
        proc.started.connect(self._pump)
        proc.finished.connect(self._on_proc_finished)
        proc.errorOccurred.connect(self._on_proc_error_occurred)
        self._proc, self._out, self._err = proc, b"", ""
        self.speed_load = None  # a new child measures the speed again
        program, args = server_command()
        proc.start(program, args)

    def _pump(self) -> None:
        """Send the waiting request when the child is free (starting it when there is none)."""
        if self._waiting is None or self._in_flight is not None:
            return
        if self._proc is None:
            self._start()
            return
        if self._proc.state() != QProcess.ProcessState.Running:
            return  # starting: `started` pumps again
        self._in_flight, self._waiting = self._waiting, None
        self._proc.write(self._in_flight[1])

    def _on_proc_ready_read_standard_output(self) -> None:
        if self._proc is None:
            return
        self._out += bytes(self._proc.readAllStandardOutput())
        *lines, self._out = self._out.split(b"\n")
        for line in lines:
            if line.strip():
                self._on_answer(line)
        self._pump()

    def _on_answer(self, line: bytes) -> None:
        try:
            message = json.loads(line)
            ident = message.get("id")
        except (ValueError, AttributeError):
            return  # not an answer (the child writes only answers to stdout)
        if self._in_flight is not None and ident in (self._in_flight[0], None):
            ident = self._in_flight[0]
            self._in_flight = None
        self._deaths = 0
        if ident == self._latest and self._latest:
            tag = self._tags.pop(ident, None)
            self._latest = 0
            error = message.get("error")
            result = None if error else message.get("result")
            if not error and not isinstance(result, dict):
                error = "the estimate process gave no result"
            if not error and isinstance(result.get("device"), dict):
                if self.speed_load is None:  # the child timed the CPU for this estimate
                    self.speed_load = machine_load()
                result["device"]["speed_load"] = self.speed_load
            self.answered.emit(tag, result, error)

    def _on_proc_ready_read_standard_error(self) -> None:
        if self._proc is not None:
            text = bytes(self._proc.readAllStandardError()).decode(errors="replace")
            self._err = (self._err + text)[-STDERR_TAIL:]

    def _on_proc_finished(self, code: int, status) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.deleteLater()
        lost, self._in_flight = self._in_flight, None
        if lost is not None and self._waiting is None:
            self._waiting = lost  # the newest: ask again
        if self._waiting is None:
            return  # died idle: the next request starts another
        self._deaths += 1
        if self._deaths <= RESTARTS:
            self._pump()
            return
        crashed = status == QProcess.ExitStatus.CrashExit
        how = "crashed" if crashed else f"exited with code {code}"
        self._give_up(f"the estimate process {how} twice in a row{self._last_words()}")

    def _on_proc_error_occurred(self, error) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._proc = None
            self._in_flight = None
            program = server_command()[0]
            self._give_up(f"the estimate process could not start ({program}){self._last_words()}")

    def _give_up(self, text: str) -> None:
        self._deaths = 0
        self._waiting = self._in_flight = None
        if self._latest:
            tag = self._tags.pop(self._latest, None)
            self._latest = 0
            self.answered.emit(tag, None, text + ". Change a setting to try again.")

    def _last_words(self) -> str:
        lines = [ln.strip() for ln in self._err.strip().splitlines() if ln.strip()]
        return f" (its last words: {lines[-1][:200]})" if lines else ""


__all__ = ["EstimateProcess", "device_facts", "server_command"]
