"""A TRL run's `trainer_state.json`: where the newest one is, and its log history as our metrics.

TRL's `Trainer` writes `OUTPUT_DIR/checkpoint-N/trainer_state.json` at every save and, when the
script calls `trainer.save_state()`, `OUTPUT_DIR/trainer_state.json`. Each holds the whole
`log_history`: one entry per logging step with TRL's GRPO metric names, which are the app's own
(reward, kl, clip_ratio/…, step_time, …), plus evaluation entries (`eval_…`) and one summary
entry at the end. `step_metrics(state)` gives {step: metrics} without the evaluation and summary
values (TRL's evaluation loss is not the app's held-out accuracy), `summary(state)` the end entry;
`read_state` raises ValueError for a file that is not (yet) a whole JSON object.

A long run's file is large (300,000 logged steps: 150 MB), and one from elsewhere may be built to
hurt, so `read_state` streams it: one value at a time through a buffer of a few MB, keeping only
the newest `MAX_LOG_ENTRIES` entries of the log history (`truncated(state)` says whether older
ones were left out; a file over 16 MB is read from its two ends); a value nested thousands deep or larger than `MAX_VALUE_CHARS` is a
ValueError naming it, never a RecursionError or a runaway. Reads only; no Qt, no torch.

    python -c "from grpo_desktop.session import trl_state as t;
    print(t.step_metrics(t.read_state('OUTPUT_DIR/trainer_state.json')))"
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import deque

from grpo_desktop.engine.runs.layout import trl_checkpoint_dirs

STATE_FILE = "trainer_state.json"
MAX_LOG_ENTRIES = 20_000  # the newest log history entries read (20,000 steps are plotted)
MAX_VALUE_CHARS = 8 * 1024 * 1024  # one value of the file (a log entry, a callback's state)
CHUNK_CHARS = 1024 * 1024  # read this much at a time
FULL_READ_BYTES = 16 * 1024 * 1024  # larger files are read from their two ends
TAIL_BYTES = 4 * 1024 * 1024  # the first window at the end of a large file
MAX_TAIL_BYTES = 64 * 1024 * 1024  # the largest; beyond it the file is streamed whole
TRUNCATED = "_log_history_truncated"  # in read_state's dict: older entries were left out
HEAD_DONE = "_head_done"
_ENTRY_START = re.compile(r"[,\[]\s*\{")
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
SUMMARY_KEYS = frozenset(
    {
        "train_runtime",
        "train_loss",
        "train_samples_per_second",
        "train_steps_per_second",
        "total_flos",
    }
)
NOT_METRICS = frozenset({"step"})


def state_files(folder: str) -> list[str]:
    """The state files that can hold the newest log history, in the order to try them: the
    top-level one (written at the end), then each checkpoint's, newest first; only those that
    exist."""
    paths = [os.path.join(folder, STATE_FILE)]
    paths += [os.path.join(p, STATE_FILE) for _, p in reversed(trl_checkpoint_dirs(folder))]
    return [p for p in paths if os.path.isfile(p)]


def read_state(path: str, keep: int | None = None) -> dict:
    """The parsed trainer_state.json with only the newest `keep` (default MAX_LOG_ENTRIES)
    entries of its log_history; ValueError when it is not a whole JSON object with a log_history
    list (cut short, being written, or not TRL's), or holds a value nested too deeply or too
    large to read. Memory stays bounded whatever the file's size, and a large file is read from
    its two ends: the members before log_history, then its last entries and what follows them."""
    keep = MAX_LOG_ENTRIES if keep is None else max(keep, 1)
    data = None
    if os.path.getsize(path) > FULL_READ_BYTES:
        data = _read_ends(path, keep)
    if data is None:
        data = _read_all(path, keep)
    if not isinstance(data.get("log_history", []), list):
        raise ValueError("it is not a trainer state (no log_history list)")
    return data


def truncated(state: dict) -> bool:
    """Whether `read_state` left older log history entries out (a long run)."""
    return state.get(TRUNCATED) is True


def _read_all(path: str, keep: int, head_only: bool = False) -> dict:
    """The whole file streamed value by value, keeping the newest `keep` log entries; with
    `head_only`, only the members before log_history (and HEAD_DONE set when it was reached)."""
    with open(path, encoding="utf-8-sig") as fh:
        stream = _Stream(fh)
        if stream.peek() != "{":
            raise ValueError("it is not a trainer state (not a JSON object)")
        stream.pos += 1
        data: dict = {}
        if stream.peek() == "}":
            stream.pos += 1
        else:
            while True:
                key = stream.value("a key")
                if not isinstance(key, str):
                    raise ValueError("it is not a trainer state (not a JSON object)")
                stream.expect(":")
                if key == "log_history" and stream.peek() == "[":
                    if head_only:
                        data[HEAD_DONE] = True
                        return data
                    data[key], data[TRUNCATED] = _log_tail(stream, keep)
                else:
                    data[key] = stream.value(f"'{key}'")
                if stream.expect(",}") == "}":
                    break
        if stream.peek():
            raise ValueError("it holds more than one JSON value")
    return data


def _read_ends(path: str, keep: int) -> dict | None:
    """A large file read from its ends: the members before log_history, then a window at the end
    of the file (growing up to MAX_TAIL_BYTES) that holds its last `keep` entries and the
    members after them; None when that does not work out (then it is read whole)."""
    head = _read_all(path, keep, head_only=True)
    if not head.pop(HEAD_DONE, False):
        return head  # no log history to skip: that was the whole file
    size = os.path.getsize(path)
    window = TAIL_BYTES
    with open(path, "rb") as fh:
        while window < size and window <= MAX_TAIL_BYTES:
            fh.seek(size - window)
            raw = fh.read(window)
            cut = 0
            while cut < len(raw) and 0x80 <= raw[cut] < 0xC0:
                cut += 1  # the window began inside a character
            try:
                text = raw[cut:].decode("utf-8")
            except UnicodeDecodeError:
                return None
            found = _entries_to_end(text, keep)
            if found is not None and len(found[0]) >= keep:
                entries, rest = found
                return {**head, "log_history": entries, TRUNCATED: True, **rest}
            window *= 4
    return None


def _entries_to_end(text: str, keep: int) -> tuple[list, dict] | None:
    """The last `keep` log entries in `text` (the end of the file) and the members after the
    log; the first entry is found as the first "{" after a "," or "[" from which whole entries
    run to the "]" and members to the final "}". None when no such place is found."""
    for tries, candidate in enumerate(_ENTRY_START.finditer(text)):
        if tries >= 50:
            return None
        found = _chain(text, candidate.end() - 1, keep)
        if found is not None:
            return found
    return None


def _chain(text: str, pos: int, keep: int) -> tuple[list, dict] | None:
    tail: deque = deque(maxlen=keep)
    rest: dict = {}
    try:
        while True:
            entry, pos = _DECODER.raw_decode(text, pos)
            if not isinstance(entry, dict):
                return None
            tail.append(entry)
            pos = _SPACE.match(text, pos).end()
            if text[pos : pos + 1] == "]":
                break
            if text[pos : pos + 1] != ",":
                return None
            pos = _SPACE.match(text, pos + 1).end()
        pos = _SPACE.match(text, pos + 1).end()
        while text[pos : pos + 1] == ",":
            key, pos = _DECODER.raw_decode(text, _SPACE.match(text, pos + 1).end())
            pos = _SPACE.match(text, pos).end()
            if not isinstance(key, str) or text[pos : pos + 1] != ":":
                return None
            rest[key], pos = _DECODER.raw_decode(text, _SPACE.match(text, pos + 1).end())
            pos = _SPACE.match(text, pos).end()
    except (ValueError, RecursionError):
        return None
    if text[pos : pos + 1] != "}" or text[pos + 1 :].strip():
        return None
    return list(tail), rest


def _log_tail(stream: _Stream, keep: int) -> tuple[list, bool]:
    """The newest `keep` entries of the log_history array at the stream, and whether older ones
    were left out."""
    stream.pos += 1  # the "["
    tail: deque = deque(maxlen=keep)
    count = 0
    if stream.peek() == "]":
        stream.pos += 1
        return [], False
    while True:
        tail.append(stream.value(f"log_history entry {count + 1}"))
        count += 1
        if stream.expect(",]") == "]":
            break
    return list(tail), count > keep


class _Stream:
    """JSON values read one at a time from a text file through a bounded buffer."""

    def __init__(self, fh):
        self.fh, self.buf, self.pos, self.eof = fh, "", 0, False

    def _fill(self, need: int) -> None:
        """At least `need` characters after `pos` in the buffer, unless the file ends first."""
        if len(self.buf) - self.pos >= need or self.eof:
            return
        parts = [self.buf[self.pos :]]
        have = len(parts[0])
        while have < need:
            chunk = self.fh.read(max(CHUNK_CHARS, need - have))
            if not chunk:
                self.eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self.buf, self.pos = "".join(parts), 0

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            self._fill(1)
            self.pos = _SPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos : self.pos + 1]
            self._fill(CHUNK_CHARS)

    def expect(self, chars: str) -> str:
        found = self.peek()
        if not found or found not in chars:
            where = "the end of the file" if not found else repr(found)
            raise ValueError(f"not whole JSON: expected {' or '.join(chars)}, found {where}")
        self.pos += 1
        return found

    def value(self, what: str):
        """The next JSON value; ValueError naming `what` when it is cut short, invalid, larger
        than MAX_VALUE_CHARS or nested too deeply to read."""
        self.peek()
        need = CHUNK_CHARS
        while True:
            self._fill(need)
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise ValueError(f"{what} is nested too deeply to read") from None
            except json.JSONDecodeError as exc:
                if self.eof:
                    raise ValueError(f"not whole JSON: {exc.msg} in {what}") from None
                if need > MAX_VALUE_CHARS:
                    raise ValueError(
                        f"{what} is not valid JSON within its first {MAX_VALUE_CHARS:,} "
                        "characters (too large, or damaged)"
                    ) from None
                need *= 4
                continue
            if end >= len(self.buf) and not self.eof:  # a number may go on past the buffer
                need = len(self.buf) - self.pos + CHUNK_CHARS
                continue
            self.pos = end
            return value


def global_step(state: dict) -> int:
    value = state.get("global_step")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    steps = step_metrics(state)
    return max(steps) if steps else 0


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def step_metrics(state: dict) -> dict[int, dict[str, float | None]]:
    """{step: metrics} of the training log entries, in step order. Entries of the same step are
    merged (TRL may log twice at one step); evaluation (`eval_…`) and summary values are left
    out, and so are values that are not numbers. A value TRL wrote as null stays None."""
    out: dict[int, dict[str, float | None]] = {}
    for entry in state.get("log_history") or []:
        if not isinstance(entry, dict):
            continue
        step = entry.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            continue
        metrics = {
            k: _number(v)
            for k, v in entry.items()
            if k not in NOT_METRICS
            and k not in SUMMARY_KEYS
            and not k.startswith("eval_")
            and (v is None or _number(v) is not None)
        }
        if any(v is not None for k, v in metrics.items() if k != "epoch"):
            out.setdefault(step, {}).update(metrics)
    return dict(sorted(out.items()))


def summary(state: dict) -> dict | None:
    """The end-of-training entry (train_runtime, train_loss, …), or None while training."""
    for entry in reversed(state.get("log_history") or []):
        if isinstance(entry, dict) and "train_runtime" in entry:
            return entry
    return None


def total_steps(state: dict) -> int:
    value = state.get("max_steps")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
