"""Errors whose message is written for the user: what is wrong and how to fix it.

The CLI prints them as one paragraph (no traceback) and the GUI shows them in a message bar.
Anything that is not a `UserError` is a bug and is reported with its traceback in the log.
`read_utf8` reads a user's text file and says where it is not UTF-8. Torch-free.

Try it:  printf 'caf\\xe9\\n' > /tmp/latin1.txt && python -c "from grpo_desktop.engine.errors \\
import read_utf8; read_utf8('/tmp/latin1.txt')"
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (a file, a setting, a model): the message says how to fix it."""


class ConfigError(UserError, ValueError):
    """A config that cannot be built or used."""


class DataError(UserError):
    """A dataset that cannot be read or lacks what the run needs."""


class ModelError(UserError):
    """A model that cannot be found or loaded."""


class CheckerError(UserError):
    """User checker code that cannot even be compiled or lacks a check() function."""


def read_utf8(path: str, error: type[UserError] = UserError) -> str:
    """The text of the file at `path` (a UTF-8 byte-order mark is allowed). OSError passes
    through; a file that is not UTF-8 raises `error` with a message naming the file, the line
    where it stops being UTF-8, and how to fix it."""
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(
            f"{path} is not UTF-8 text (line {line} has the byte 0x{raw[exc.start]:02x}): it was "
            "probably saved in another encoding, such as Latin-1 or Windows-1252. Open it in a "
            "text editor and save it as UTF-8."
        ) from None
