"""Whether the X server in DISPLAY answers, asked before Qt connects (and aborts when it cannot).

Qt's X11 (xcb) plugin aborts the whole process with a core dump (exit 134) and a paragraph about
xcb-cursor0 when no X server answers: over SSH without X forwarding, with a DISPLAY left over
from an ended session, or with no DISPLAY at all. `display_problem()` connects to the server
itself first, the way libxcb does (the socket /tmp/.X11-unix/X<n>, also in Linux's abstract
namespace, for ':n' and 'unix:n'; TCP port 6000+n for 'host:n', as SSH's forwarding uses) with a
short timeout, and says what is wrong and what to do instead. It checks only the connection,
not the X authority (a server that refuses the cookie still makes Qt fail, rarely). Only on
Linux and only when Qt would use xcb (ui/qt_libs.uses_xcb); imports no Qt widgets.

`startup_problem()` is what the window's start asks (app.run_app, before the QApplication):
no display, then missing xcb libraries (ui/qt_libs.py). Try it:
    DISPLAY=:99 grpo-desktop --demo        (no X server at :99: the message, exit 2)
"""

from __future__ import annotations

import os
import re
import socket

from grpo_desktop.ui.qt_libs import advice, missing_xcb_libraries, uses_xcb

TIMEOUT_S = 3.0
_DISPLAY = re.compile(r"^(?P<host>.*):(?P<number>\d+)(?:\.\d+)?$")


def _unix_socket_answers(number: int) -> bool:
    path = f"/tmp/.X11-unix/X{number}"
    for address in ("\0" + path, path):  # libxcb tries the abstract socket first
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(TIMEOUT_S)
            try:
                s.connect(address)
                return True
            except OSError:
                continue
    return False


def _tcp_answers(host: str, number: int) -> bool:
    try:
        with socket.create_connection((host.strip("[]"), 6000 + number), timeout=TIMEOUT_S):
            return True
    except OSError:
        return False


def why_unreachable(display: str) -> str | None:
    """Why no X server answers at `display` (a DISPLAY value), or None when one does (or the
    value has a form this does not check, which Qt is left to judge)."""
    match = _DISPLAY.match(display.strip())
    if match is None:
        return None
    host, number = match["host"], int(match["number"])
    if "/" in host:  # 'host/unix:0' and launchd paths: other platforms' forms
        return None
    if host in ("", "unix"):
        if _unix_socket_answers(number):
            return None
        return f"no X server answers at /tmp/.X11-unix/X{number}"
    if _tcp_answers(host, number):
        return None
    return f"no X server answers at {host} port {6000 + number}"


def display_problem(env: dict[str, str] | None = None, *, unset_is_a_problem: bool = True) -> str:
    """What stops Qt's X11 plugin from reaching a display, and what to do ('' when nothing
    does, or Qt would not use X11 here). `unset_is_a_problem`: whether a missing DISPLAY is one
    (the window needs a display; the self-test then runs offscreen)."""
    env = os.environ if env is None else env
    if not uses_xcb(env):
        return ""
    display = env.get("DISPLAY", "").strip()
    if not display:
        if not unset_is_a_problem:
            return ""
        why = "there is no X server to open the window on"
        shown = "DISPLAY is not set"
    else:
        why = why_unreachable(display)
        if why is None:
            return ""
        shown = f"DISPLAY={display}"
    return (
        f"No display can be reached ({shown}): {why}. The window needs a running X server "
        "(over SSH, connect with `ssh -X` to bring your screen along). To train without a "
        "window, use `grpo-desktop train …` (e.g. `grpo-desktop train --demo`, or `grpo-desktop "
        "train my-run.grpo`), or set DISPLAY to a running X server."
    )


def startup_problem() -> str:
    """Why the window cannot open here, before Qt tries and aborts ('' when it can): no
    reachable display, or xcb libraries this system lacks."""
    problem = display_problem()
    if problem:
        return problem
    missing = missing_xcb_libraries()
    return advice(missing) if missing else ""
