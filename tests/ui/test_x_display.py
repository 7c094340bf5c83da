"""A DISPLAY with no X server behind it is said before Qt aborts: the real `grpo-desktop` and
`grpo-desktop --self-test` in a subprocess with DISPLAY=:99 (nothing there) exit 2 with the
message and no core dump, whichever xcb libraries this machine has; the check itself against a
real listening socket (X11's abstract Unix socket, a TCP port) and without one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from grpo_desktop.ui import x_display

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="Qt's X11 plugin and these sockets are Linux's"
)


def _env(tmp_path, display: str | None) -> dict:
    env = dict(os.environ, HOME=str(tmp_path))
    for name in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "DISPLAY"):
        env.pop(name, None)
    if display is not None:
        env["DISPLAY"] = display
    return env


def _nothing_at_99():
    if os.path.exists("/tmp/.X11-unix/X99"):
        pytest.skip("this machine has an X server socket at :99")


@pytest.mark.parametrize("option", ["--demo", "--self-test"])
def test_a_display_nobody_answers_is_a_message_and_exit_2(tmp_path, option):
    _nothing_at_99()
    out = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", option],
        env=_env(tmp_path, ":99"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "No display can be reached (DISPLAY=:99)" in out.stderr
    assert "grpo-desktop train" in out.stderr and "set DISPLAY" in out.stderr
    for crash in ("Aborted", "core dumped", "xcb-cursor0", "Traceback"):
        assert crash not in out.stderr
    assert out.stdout == ""  # the self-test ran none of its checks


def test_the_window_without_any_display_says_so(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "--demo"],
        env=_env(tmp_path, None),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "No display can be reached (DISPLAY is not set)" in out.stderr
    assert "Aborted" not in out.stderr and "Traceback" not in out.stderr


def test_a_listening_x_socket_is_reachable_and_a_closed_one_is_not():
    for number in range(700, 800):  # an abstract socket leaves nothing on disk
        path = f"/tmp/.X11-unix/X{number}"
        if os.path.exists(path):
            continue
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind("\0" + path)
        except OSError:
            server.close()
            continue
        server.listen(1)
        try:
            assert x_display.why_unreachable(f":{number}") is None
            assert x_display.why_unreachable(f"unix:{number}.0") is None
        finally:
            server.close()
        assert x_display.why_unreachable(f":{number}") == f"no X server answers at {path}"
        return
    pytest.skip("no free X display number between 700 and 799")


def test_a_forwarded_display_is_checked_over_tcp():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    if port < 6000:
        server.close()
        pytest.skip("the free port the system gave is below X11's range")
    number = port - 6000
    try:
        assert x_display.why_unreachable(f"127.0.0.1:{number}.0") is None
    finally:
        server.close()
    assert x_display.why_unreachable(f"127.0.0.1:{number}") == (
        f"no X server answers at 127.0.0.1 port {port}"
    )


def test_only_qt_s_x11_plugin_is_checked():
    assert x_display.display_problem({"DISPLAY": ":99", "QT_QPA_PLATFORM": "offscreen"}) == ""
    assert x_display.display_problem({"DISPLAY": ":99", "WAYLAND_DISPLAY": "wayland-0"}) == ""
    assert x_display.display_problem({}, unset_is_a_problem=False) == ""
    assert "DISPLAY is not set" in x_display.display_problem({})
