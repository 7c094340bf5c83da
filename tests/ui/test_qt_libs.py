"""Missing Qt system libraries are named with the command that installs them: the
loader's own answers (ldd and dlopen) for a real library whose dependency is gone, the package
names, and the real launch and --self-test with an xcb plugin that lacks a library (Qt's
QT_QPA_PLATFORM_PLUGIN_PATH pointed at one built here, so it does not matter which libraries
this machine has) and a display that answers (a listener on X11's TCP port)."""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys

import pytest

from grpo_desktop.ui import qt_libs


@pytest.fixture(scope="module")
def needy_library(tmp_path_factory):
    """libneedy.so, linked against libgrpo-gone.so.3 built here and then deleted (no system has it)."""
    if not shutil.which("cc"):
        pytest.skip("no C compiler to build a library with a missing dependency")
    d = tmp_path_factory.mktemp("needy")
    (d / "dep.c").write_text("int dep(void) { return 1; }\n")
    (d / "needy.c").write_text("int dep(void);\nint needy(void) { return dep(); }\n")
    dep = d / "libgrpo-gone.so.3"
    cc = ["cc", "-shared", "-fPIC"]
    subprocess.run([*cc, "-Wl,-soname,libgrpo-gone.so.3", "-o", dep, d / "dep.c"], check=True)
    subprocess.run([*cc, "-o", d / "libneedy.so", d / "needy.c", dep], check=True)
    dep.unlink()
    return d / "libneedy.so"


def test_the_missing_dependency_is_named_by_ldd(needy_library, monkeypatch):
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    if not shutil.which("ldd"):
        pytest.skip("no ldd")
    assert qt_libs.missing_libraries(needy_library) == ["libgrpo-gone.so.3"]


def test_the_missing_dependency_is_named_from_the_load_error(needy_library):
    with pytest.raises(OSError) as failure:
        ctypes.CDLL(str(needy_library))
    assert qt_libs.missing_from_load_error(str(failure.value)) == ["libgrpo-gone.so.3"]


def test_the_advice_gives_the_apt_packages():
    text = qt_libs.advice(["libxcb-cursor.so.0", "libxcb-icccm.so.4"])
    if shutil.which("apt-get") or not shutil.which("dnf"):
        assert "sudo apt install libxcb-cursor0 libxcb-icccm4" in text
    assert "libxcb-cursor.so.0, libxcb-icccm.so.4" in text


def test_xcb_is_checked_only_where_qt_would_use_it():
    linux = sys.platform.startswith("linux")
    assert qt_libs.uses_xcb({"QT_QPA_PLATFORM": "xcb"}) is linux
    assert qt_libs.uses_xcb({}) is linux
    assert not qt_libs.uses_xcb({"QT_QPA_PLATFORM": "offscreen"})
    assert not qt_libs.uses_xcb({"WAYLAND_DISPLAY": "wayland-0"})


@pytest.fixture
def plugin_lacking_a_library(needy_library, tmp_path):
    """A platform plugin folder whose libqxcb.so needs libgrpo-gone.so.3, which no system has."""
    folder = tmp_path / "platforms"
    folder.mkdir()
    shutil.copy(needy_library, folder / "libqxcb.so")
    return folder


@pytest.fixture
def answering_display():
    """DISPLAY=127.0.0.1:N with something listening on TCP port 6000+N (it never speaks X:
    the launch must stop before Qt connects)."""
    for number in range(60, 160):
        listener = socket.socket()
        try:
            listener.bind(("127.0.0.1", 6000 + number))
        except OSError:
            listener.close()
            continue
        listener.listen(4)
        yield f"127.0.0.1:{number}"
        listener.close()
        return
    pytest.skip("no free TCP port between 6060 and 6159 to stand in for an X server")


def _env(tmp_path, display, plugins) -> dict:
    env = dict(os.environ, DISPLAY=display, HOME=str(tmp_path))
    env["QT_QPA_PLATFORM_PLUGIN_PATH"] = str(plugins)
    env.pop("QT_QPA_PLATFORM", None)
    env.pop("WAYLAND_DISPLAY", None)
    env.pop("LD_LIBRARY_PATH", None)
    return env


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux's")
def test_the_plugin_qt_loads_first_is_the_one_checked(plugin_lacking_a_library, monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM_PLUGIN_PATH", str(plugin_lacking_a_library))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    assert qt_libs.xcb_plugin() == plugin_lacking_a_library / "libqxcb.so"
    assert qt_libs.missing_libraries(qt_libs.xcb_plugin()) == ["libgrpo-gone.so.3"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux's")
def test_a_launch_names_what_is_missing_and_exits_2(
    tmp_path, plugin_lacking_a_library, answering_display
):
    out = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "--demo"],
        env=_env(tmp_path, answering_display, plugin_lacking_a_library),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "sudo apt install" in out.stderr or "sudo dnf install" in out.stderr
    assert "libgrpo-gone.so.3" in out.stderr
    assert "Traceback" not in out.stderr and "Aborted" not in out.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux's")
def test_the_self_test_names_what_is_missing(tmp_path, plugin_lacking_a_library, answering_display):
    out = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "--self-test"],
        env=_env(tmp_path, answering_display, plugin_lacking_a_library),
        capture_output=True,
        text=True,
        timeout=400,
    )
    first = out.stdout.splitlines()[0]
    assert first.startswith("FAIL  qt system libraries"), out.stdout
    assert "libgrpo-gone.so.3" in first and "sudo " in out.stdout
    assert out.returncode == 1
