"""Missing Qt system libraries are named with the command that installs them: the
loader's own answers (ldd and dlopen) for a real library whose dependency is gone, the package
names, and the real launch and --self-test on a machine that lacks xcb libraries."""

from __future__ import annotations

import ctypes
import os
import shutil
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


def _lacking() -> list[str]:
    plugin = qt_libs.xcb_plugin()
    return [] if plugin is None else qt_libs.missing_libraries(plugin)


@pytest.mark.skipif(not _lacking(), reason="this machine has every library the xcb plugin needs")
def test_a_launch_on_this_machine_names_what_is_missing_and_exits_2(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="xcb", DISPLAY=":0", HOME=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "--demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "sudo apt install" in out.stderr or "sudo dnf install" in out.stderr
    for name in _lacking():
        assert name in out.stderr
    assert "Traceback" not in out.stderr and "Aborted" not in out.stderr


@pytest.mark.skipif(not _lacking(), reason="this machine has every library the xcb plugin needs")
def test_the_self_test_names_what_is_missing(tmp_path):
    env = dict(os.environ, DISPLAY=":0", HOME=str(tmp_path))
    env.pop("QT_QPA_PLATFORM", None)
    env.pop("WAYLAND_DISPLAY", None)
    out = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "--self-test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    first = out.stdout.splitlines()[0]
    assert first.startswith("FAIL  qt system libraries") and "sudo apt install" in out.stdout
    assert out.returncode == 1
