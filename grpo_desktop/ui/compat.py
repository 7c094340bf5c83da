"""Guards against defects of the installed Qt binding that would otherwise crash the app.

PySide6 6.12.0 on Python 3.10 and 3.11 drops one reference to `None` on every call of a Qt method
that returns nothing (`widget.update()`, every Python override such as `paintEvent`), and likewise
to `True`/`False` in some bool-returning paths; from Python 3.12 these objects are immortal.
Before that their count reaches zero after some thousand calls and the interpreter aborts
("none_dealloc: deallocating None"). `guard_none_refcount()` measures whether the installed
binding leaks and, only then, raises the reference counts of `None`, `True` and `False` once by
2**40 (about a trillion calls' worth). Called when `grpo_desktop.ui` is imported; remove once
PySide6 6.12.0 is excluded everywhere.

`drop_platform_noise()` keeps a line that Qt's offscreen platform prints whenever a window is
shown (about the headless platform, not the app) out of the terminal of the self-test and the
scripted demo; every other Qt message is printed. Try it: tests/ui/common/test_widgets.py.
"""

from __future__ import annotations

import ctypes
import sys

_HEADROOM = 1 << 40
_checked = False
leaks_none = False


def _measure_leak() -> bool:
    from PySide6.QtCore import QObject

    probe = QObject()
    calls = 200
    before = sys.getrefcount(None)
    for _ in range(calls):
        probe.setObjectName("")
    return before - sys.getrefcount(None) >= calls // 2


def guard_none_refcount() -> bool:
    """Protect `None` from the leaking binding; True when protection was needed."""
    global _checked, leaks_none
    if sys.version_info >= (3, 12):
        return False
    if not _checked:
        _checked = True
        leaks_none = _measure_leak()
    if leaks_none:
        for obj in (None, True, False):
            if sys.getrefcount(obj) < _HEADROOM // 2:
                ctypes.c_ssize_t.from_address(id(obj)).value += _HEADROOM
    return leaks_none


# Printed by Qt's offscreen platform plugin for every top-level window it shows.
PLATFORM_NOISE = ("This plugin does not support propagateSizeHints()",)


def drop_platform_noise() -> None:
    """Install a Qt message handler that drops PLATFORM_NOISE and hands every other message to
    the handler installed before it (Qt's own when there was none)."""
    from PySide6.QtCore import qFormatLogMessage, qInstallMessageHandler

    previous = None

    def handler(kind, context, message):
        if any(noise in message for noise in PLATFORM_NOISE):
            return
        if previous is not None:
            previous(kind, context, message)
        else:
            sys.stderr.write(qFormatLogMessage(kind, context, message) + "\n")

    previous = qInstallMessageHandler(handler)
