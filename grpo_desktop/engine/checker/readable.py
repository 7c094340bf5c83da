"""Which files a Landlocked checker child may still read: Python and system libraries, not yours.

`readable_paths()` is the allow-list sandbox_linux.restrict_files turns into Landlock read rules:
Python's own install (sys.prefix and friends), every existing sys.path entry and the folder of
every package already imported (an editable install maps one from elsewhere), the system's
libraries and what the dynamic loader, locale and time zone code read, a few harmless /dev and
/proc files, and /proc/self. Nothing else — the home folder, /tmp, other users, /etc — can be
opened, so a checker cannot read `~/.ssh/id_rsa` and carry it out in its error text.

The home folder is never allowed as a whole: a candidate that is the home folder or contains it
(a sys.path entry of "~" because the app was started there, a prefix of "/") is dropped; one
inside it (a pyenv or conda Python, a venv, a source checkout under ~) is allowed on its own.
"Home" is the account's home folder and the parent's $HOME, which the parent passes in HOME_ENV
because the child's own HOME is its private folder.

Not here: applying the rules (sandbox_linux.py). Standard library only.
Try it:  python -c "from grpo_desktop.engine.checker.readable import *; print(readable_paths('/x'))"
"""

from __future__ import annotations

import os
import sys

HOME_ENV = "GRPO_DESKTOP_CHECKER_HOME"  # the parent's home folder, read (and removed) by the child

# Read-only system places Python, the dynamic loader, locale and time zone code need. Missing
# ones are skipped.
SYSTEM = (
    "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/local/lib", "/lib", "/lib64", "/lib32",
    "/usr/share/zoneinfo", "/usr/share/locale", "/usr/share/i18n", "/usr/lib/locale",
    "/etc/ld.so.cache", "/etc/ld.so.preload", "/etc/localtime", "/etc/timezone",
    "/dev/urandom", "/dev/random", "/dev/zero",
    "/proc/cpuinfo", "/proc/meminfo", "/sys/devices/system/cpu",
)  # fmt: skip


def homes() -> list[str]:
    """The folders never readable as a whole: the account's home and the parent's $HOME."""
    found = []
    try:
        import pwd

        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError):
        pass
    if os.environ.get(HOME_ENV):
        found.append(os.environ[HOME_ENV])
    return sorted({os.path.realpath(h) for h in found if h and os.path.isabs(h)})


def _covers(path: str, inner: str) -> bool:
    """Whether `path` is `inner` or a folder above it."""
    return inner == path or inner.startswith(path.rstrip(os.sep) + os.sep)


def _package_folders() -> list[str]:
    """The folders of the top-level packages imported so far (editable installs live elsewhere)."""
    out = []
    for name, module in list(sys.modules.items()):
        if "." in name:
            continue
        out += [p for p in getattr(module, "__path__", None) or () if isinstance(p, str)]
    return out


def readable_paths(workdir: str) -> list[str]:
    """Every existing path the child may read, real (symlinks resolved), none inside another.

    `workdir` (the child's private folder) is not in it: it gets full rights of its own."""
    private = homes()
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    candidates += [os.path.abspath(p) for p in sys.path if p]
    candidates += _package_folders()
    candidates += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    frozen = getattr(sys, "_MEIPASS", None)  # a PyInstaller bundle's own files
    if frozen:
        candidates.append(frozen)
    candidates += SYSTEM
    workdir = os.path.realpath(workdir)
    out: list[str] = []
    for path in candidates:
        if not os.path.isabs(path) or not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        if real == os.sep or _covers(real, workdir) or any(_covers(real, h) for h in private):
            continue  # never a home folder as a whole, the root, or the temp folder above ours
        if real not in out:
            out.append(real)
    return [p for p in out if not any(o != p and _covers(o, p) for o in out)]  # fewest rules
