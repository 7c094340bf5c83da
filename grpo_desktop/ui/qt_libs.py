"""Which system libraries Qt's X11 (xcb) platform plugin needs and this Linux lacks, and the
command that installs them, said before Qt aborts with "Could not load the Qt platform plugin".

A fresh Linux desktop often lacks a few xcb libraries (libxcb-cursor0, libxcb-icccm4, …) that
PySide6's wheel does not bundle. `missing_xcb_libraries()` asks the system's loader which of the
plugin's dependencies are not found (`ldd`, else the error of loading the plugin itself; the
plugin in QT_QPA_PLATFORM_PLUGIN_PATH when set, as Qt tries that one first) and
`advice()` names them with the package that holds each (apt on Debian/Ubuntu, dnf on Fedora).
Only on Linux and only when Qt would use xcb; it imports no Qt module, so it runs before the
QApplication exists. It does not install anything. Try it: tests/ui/test_qt_libs.py.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# soname -> (Debian/Ubuntu package, Fedora package)
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
}
_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.M)
_DLOPEN = re.compile(r"(\S+\.so[.\d]*): cannot open shared object file")


def uses_xcb(env: dict[str, str] | None = None) -> bool:
    """Whether Qt would load its xcb plugin here (Linux, X11 or no platform chosen)."""
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(":")[0].split(";")[0] == "xcb"
    return not env.get("WAYLAND_DISPLAY")  # on Wayland Qt 6 takes its wayland plugin first


def xcb_plugin() -> Path | None:
    """The xcb platform plugin Qt loads, found without importing Qt: the one in
    QT_QPA_PLATFORM_PLUGIN_PATH when that folder has one (Qt tries it first), else PySide6's."""
    import importlib.util

    override = os.environ.get("QT_QPA_PLATFORM_PLUGIN_PATH", "")
    if override and Path(override, "libqxcb.so").is_file():
        return Path(override, "libqxcb.so")

    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for sub in ("Qt/plugins/platforms", "plugins/platforms"):
            path = Path(root, sub, "libqxcb.so")
            if path.is_file():
                return path
    return None


def missing_from_ldd_output(text: str) -> list[str]:
    return sorted(set(_NOT_FOUND.findall(text)))


def missing_from_load_error(text: str) -> list[str]:
    return sorted(set(_DLOPEN.findall(text)))


def missing_libraries(library: Path) -> list[str]:
    """Sonames `library` needs that the loader cannot find ([] when it loads)."""
    if shutil.which("ldd"):
        try:
            out = subprocess.run(
                ["ldd", str(library)], capture_output=True, text=True, timeout=20
            ).stdout
            return missing_from_ldd_output(out)
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        ctypes.CDLL(str(library))
    except OSError as exc:
        return missing_from_load_error(str(exc))
    return []


def missing_xcb_libraries() -> list[str]:
    """The sonames the xcb plugin lacks, when Qt would use it ([] elsewhere)."""
    if not uses_xcb():
        return []
    plugin = xcb_plugin()
    return missing_libraries(plugin) if plugin is not None else []


def install_command(missing: list[str]) -> str:
    """The command that installs `missing` (apt on Debian/Ubuntu, dnf on Fedora)."""
    debian = sorted({PACKAGES.get(name, (name, name))[0] for name in missing})
    fedora = sorted({PACKAGES.get(name, (name, name))[1] for name in missing})
    if shutil.which("dnf") and not shutil.which("apt-get"):
        return "sudo dnf install " + " ".join(fedora)
    return "sudo apt install " + " ".join(debian)


def advice(missing: list[str]) -> str:
    return (
        "The window cannot open: Qt's X11 platform plugin needs system libraries this computer "
        f"lacks: {', '.join(missing)}. Install them with:\n    {install_command(missing)}\n"
        "then start GRPO Desktop again. (Training from the command line works without them: "
        "grpo-desktop train …)"
    )
