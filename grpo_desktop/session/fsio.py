"""Safe file writes: a write either completes or leaves the previous file untouched.

`atomic_write_text` writes a temporary file beside the target, fsyncs it, renames it over the
target (atomic on POSIX and Windows) and fsyncs the folder, so a crash or a full disk mid-write
never leaves a half-written file in place of a good one. Pure Python, no Qt, no torch.

    python -c "from grpo_desktop.session.fsio import atomic_write_text as w; w('/tmp/x.txt', 'hi')"
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile


class SaveError(OSError):
    """A write that failed; the message says why in plain words, the old file is intact."""


def _explain(exc: OSError, path: str) -> str:
    if exc.errno == errno.ENOSPC:
        return (
            f"Could not save {path}: the disk is full. Free some space and save again; the "
            "previously saved version is untouched."
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"Could not save {path}: no permission to write there. Choose another folder with "
            "Save As; the previously saved version is untouched."
        )
    return (
        f"Could not save {path}: {exc.strerror or exc}. The previously saved version is untouched."
    )


def fsync_dir(folder: str) -> None:
    """Make a rename durable (a no-op where folders cannot be opened, e.g. on Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
        fsync_dir(folder)
    except OSError as exc:
        raise SaveError(exc.errno, _explain(exc, path)) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)
