"""JSON from files someone else may have written, read within bounds: size, nesting and text.

A session or run folder can come from anywhere, and `json.loads` on a file built to hurt either
raises RecursionError (thousands of nested brackets), or reads a 100 MB string that the app then
copies into every file it writes. So a settings file is read only when its size is under a cap
(`read_text`), its brackets are checked before parsing (`check_depth`: a cheap scan with the
strings taken out, so a message instead of RecursionError), and every text value in it is held to
a length (`long_texts`), named by its dotted path so the message says which field to shorten.
Each raises `error` (a UserError chosen by the caller) with a message that names the file and
what is wrong. Pure Python, no torch.

    python -c "from grpo_desktop.engine.runs.bounded_json import nesting_depth as d;
    print(d('{\\"a\\": [[1], \\"]]]\\"]}'))"
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

from grpo_desktop.engine.errors import UserError, read_utf8
from grpo_desktop.engine.units import size_text

MAX_SETTINGS_BYTES = 8 * 1024 * 1024  # session.json, a run's config.json: a few KB normally
MAX_DEPTH = 64  # settings nest 3 deep, a window layout a few more
MAX_TEXT_CHARS = 200_000  # any one text value: a system prompt, a worked example, checker code

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # one JSON string, escapes included
_BRACKET = re.compile(r"[\[\]{}]")


def read_text(path: str, error: type[UserError], limit: int = MAX_SETTINGS_BYTES) -> str:
    """The UTF-8 text of `path` when it is at most `limit` bytes; `error` names the file and its
    size otherwise (nothing is read). OSError passes through, as read_utf8's does."""
    size = os.stat(path).st_size
    if size > limit:
        raise error(
            f"{path} is {size_text(size)}, far larger than such a file can be (at most "
            f"{size_text(limit)}), so it was not read. It was probably damaged or edited by "
            "mistake; open a copy you trust instead. Nothing was changed."
        )
    return read_utf8(path, error)


def nesting_depth(text: str, stop: int | None = None) -> int:
    """How deep the brackets of the JSON `text` nest (strings do not count); with `stop`, the
    scan ends as soon as that depth is reached."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop is not None and deepest >= stop:
                    return deepest
        else:
            depth -= 1
    return deepest


def check_depth(text: str, file: str, error: type[UserError], limit: int = MAX_DEPTH) -> None:
    """Raise `error` when `text` nests deeper than `limit` (before it is parsed)."""
    if nesting_depth(text, stop=limit + 1) > limit:
        raise error(
            f"{file} is damaged: its brackets nest more than {limit} levels deep, which no "
            "file of this app does, so it was not read. Open a copy you trust instead; nothing "
            "was changed."
        )


def loads(text: str, file: str, error: type[UserError], limit: int = MAX_DEPTH) -> Any:
    """`json.loads(text)` after the depth check; JSONDecodeError passes through."""
    check_depth(text, file, error, limit)
    try:
        return json.loads(text)
    except RecursionError:  # only if the scan and the parser disagree
        raise error(f"{file} is damaged: it nests too deeply to be read.") from None


def long_texts(data: Any, limit: int = MAX_TEXT_CHARS) -> Iterator[tuple[str, int]]:
    """(dotted path, length) of each text value (or key) in `data` longer than `limit`
    characters, e.g. ("config.data.system_prompt", 104857600). Walks without recursion."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if len(value) > limit:
                yield where or "(the whole file)", len(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                name = f"{where}.{key}" if where else str(key)
                if len(str(key)) > limit:
                    yield f"{where or '(top level)'}: a key", len(str(key))
                    continue
                stack.append((name, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))


def check_texts(
    data: Any,
    file: str,
    error: type[UserError],
    labels: dict[str, str] | None = None,
    limit: int = MAX_TEXT_CHARS,
) -> None:
    """Raise `error` naming the first text value of `data` longer than `limit` characters and
    how long it is; `labels` maps a dotted path to the name the app shows for it."""
    for where, length in long_texts(data, limit):
        label = (labels or {}).get(where)
        name = f"{label} ({where})" if label else where
        raise error(
            f"{file}: {name} is {length:,} characters long; the most this app reads in one "
            f"field is {limit:,}. Shorten it in a text editor (or open a copy you trust); the "
            "file was not read and nothing was changed."
        )
