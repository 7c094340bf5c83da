"""The events a training run yields: plain frozen dataclasses, one JSON line each.

The engine's generator yields these; the CLI writes them to `events.jsonl`, the GUI worker forwards
them as Qt signals, and the session layer appends them to history. They hold only str, int, float,
bool, list, dict and None (never tensors, never NaN: a missing number is None), so they cross
threads and processes safely and read back with `event_from_dict`. `read_events` and
`truncate_events_after` read and trim a run's log.

Deliberately torch-free (enforced by import-linter).
Try it:  python -c "from grpo_desktop.engine.events import LogMessage as L; print(L(1, 'info', 'hi').to_json())"
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from grpo_desktop.engine.alarm_kinds import ALARMS
from grpo_desktop.engine.errors import UserError


def clean(value: Any) -> Any:
    """Make a value strictly JSON-safe: NaN/inf become None, tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


@dataclass(frozen=True)
class Event:
    type: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        out = {"type": self.type}
        out.update(clean(dataclasses.asdict(self)))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class RunStarted(Event):
    """A run (or a resumed run) begins. `start_step` is the last completed step (0 when new)."""

    type: ClassVar[str] = "run_started"
    run_id: str
    config: dict
    start_step: int
    total_steps: int
    device: str
    model: str
    num_parameters: int = 0
    num_trainable: int = 0
    resumed: bool = False
    time: float = 0.0


@dataclass(frozen=True)
class Rollouts(Event):
    """Every completion of one step. `prompts` holds each group's prompt once (a long prompt is
    not repeated G times in events.jsonl); each row holds:

    group (index into prompts), completion, answer, rewards ({function: float | None}), reward
    (weighted total, None when a weighted function could not score it), advantage (None when unscored),
    length (tokens), truncated (hit the length limit), error (checker error text or None),
    extracted (the answer the accuracy checker read), reasons ({function: why it scored so}).
    Files written before prompts were stored once have a "prompt" in every row instead.
    """

    type: ClassVar[str] = "rollouts"
    step: int
    rows: list = field(default_factory=list)
    prompts: list = field(default_factory=list)

    def full_rows(self) -> list[dict]:
        """The rows with each one's "prompt" filled in (see `rows_with_prompts`)."""
        return rows_with_prompts(self.rows, self.prompts)


def rows_with_prompts(rows: list, prompts: list | None) -> list[dict]:
    """Rollout rows with "prompt" set from the step's per-group `prompts` (rows that already carry
    a prompt, from older files, are kept as they are). The strings are shared, not copied."""
    if not prompts:
        return list(rows)
    out = []
    for row in rows:
        if "prompt" in row:
            out.append(row)
            continue
        g = row.get("group")
        prompt = prompts[g] if isinstance(g, int) and 0 <= g < len(prompts) else ""
        out.append({**row, "prompt": prompt})
    return out


ALERT_KINDS = tuple(ALARMS)  # engine/alarm_kinds.py: each kind's title and explanation
SEVERITIES = ("warning", "critical")


@dataclass(frozen=True)
class Alert(Event):
    """Something is wrong with the run that the user must see: the checker failing, and the
    health alarms. kind: one of ALERT_KINDS (more may come); severity: warning | critical;
    message says what happened, advice what to do about it."""

    type: ClassVar[str] = "alert"
    step: int
    kind: str
    severity: str
    message: str
    advice: str = ""


@dataclass(frozen=True)
class StepMetrics(Event):
    """Metrics of one finished step, with TRL's names (docs/grpo.md, "Metrics"), and its
    advantage histogram as {"edges": [n+1 floats], "counts": [n ints]}."""

    type: ClassVar[str] = "step"
    step: int
    total_steps: int
    metrics: dict = field(default_factory=dict)
    advantage_hist: dict = field(default_factory=dict)
    elapsed: float = 0.0


@dataclass(frozen=True)
class EvalResult(Event):
    """Held-out accuracy with greedy decoding: the side evaluation the reward cannot game."""

    type: ClassVar[str] = "eval"
    step: int
    accuracy: float
    format_rate: float
    n: int
    mean_length: float = 0.0
    samples: list = field(default_factory=list)


@dataclass(frozen=True)
class CheckpointSaved(Event):
    type: ClassVar[str] = "checkpoint"
    step: int
    path: str


@dataclass(frozen=True)
class LogMessage(Event):
    """Something the user should read: a warning, or a hint about what the run is doing."""

    type: ClassVar[str] = "log"
    step: int
    level: str  # "info" | "warning"
    message: str


@dataclass(frozen=True)
class RunFinished(Event):
    """The last event of every run. status: completed | stopped | failed."""

    type: ClassVar[str] = "run_finished"
    status: str
    step: int
    message: str = ""
    error: str | None = None
    elapsed: float = 0.0


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RunStarted,
        Rollouts,
        StepMetrics,
        EvalResult,
        CheckpointSaved,
        LogMessage,
        Alert,
        RunFinished,
    )
}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from its JSON form; unknown keys (from newer versions) are ignored."""
    data = dict(data)
    kind = data.pop("type", None)
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        raise ValueError(f"Unknown event type {kind!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def read_events(path: str) -> list[Event]:
    """Read an events.jsonl file, tolerating a torn last line (a crash mid-write)."""
    events = []
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(event_from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError, ValueError):
            if i >= len(lines) - 2:  # torn final line
                break
            raise ValueError(f"{path}: line {i + 1} is not a valid event") from None
    return events


def bad_line_message(path: str, offset: int, exc: Exception) -> str:
    """What is wrong with the events.jsonl line that starts at byte `offset` of `path`, with its
    real line number (json's own message counts lines within the one line), for an error."""
    with open(path, "rb") as fh:
        number = fh.read(offset).count(b"\n") + 1
    if isinstance(exc, json.JSONDecodeError):
        what = f"not valid JSON at column {exc.colno}: {exc.msg}"
    elif isinstance(exc, UnicodeDecodeError):
        what = "not UTF-8 text"
    else:
        what = f"not a valid event: {exc}"
    return f"line {number} is {what}; delete or repair that line in a text editor"


def event_step(data: dict[str, Any]) -> int:
    """The step an event belongs to (run_started: the step it starts after)."""
    if data.get("type") == "run_started":
        return int(data.get("start_step", 0))
    return int(data.get("step", 0))


def truncate_events_after(path: str, step: int) -> int:
    """Rewrite an events.jsonl keeping only events of steps ≤ `step` (all of them go when step is
    0), so a resumed run's log holds each step once. Atomic, keeps the file's permissions and
    leaves no temporary file on failure; a torn last line is dropped, but a damaged line before
    one that is kept raises UserError naming its line. Returns the number of events kept."""
    import contextlib
    import os
    import stat
    import tempfile

    if not os.path.isfile(path):
        return 0
    kept, damaged = [], None
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            try:
                data = json.loads(line)
            except ValueError as exc:  # not JSON, or not UTF-8
                damaged = damaged or (number, getattr(exc, "msg", None) or exc.reason)
                continue
            if step > 0 and isinstance(data, dict) and event_step(data) <= step:
                if damaged is not None:  # an event the resumed run keeps follows a broken line
                    raise UserError(
                        f"{path}: line {damaged[0]} is damaged (not valid JSON: {damaged[1]}) and "
                        "the history continues after it. Delete or repair that line in a text "
                        "editor, then resume again."
                    )
                kept.append(line if line.endswith(b"\n") else line + b"\n")
    fd, tmp = tempfile.mkstemp(prefix=".events-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as out:
            out.writelines(kept)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))  # mkstemp makes it 0600: keep the mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # e.g. a full disk: no temporary file left behind
        raise
    return len(kept)
