"""The Linux-only walls around the checker child: namespaces, Landlock and a seccomp filter.

Each function is called by the child on itself, before any user code runs, and returns a short
text saying what it achieved, or raises `Unavailable` with the reason (old kernel, disabled by the
distribution, unknown CPU architecture). None needs privileges: `enter_namespaces` (no network,
the parent's /proc hidden), `restrict_files` (Landlock: only the private folder is writable, only
Python's and the system's files are readable) and `forbid_processes_and_sockets` (seccomp: no new
processes, sockets or signals to others).

Not here: anything portable (rlimits, the environment, the folder: sandbox.py), and no mount
namespace or read-only bind mounts (Landlock does that part where the kernel has it).
Try it:  python -c "from grpo_desktop.engine.checker.sandbox_linux import *; print(landlock_abi())"
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import struct

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# Landlock (same syscall numbers on every architecture)
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_LL_VERSION = 1
_LL_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_ABI1 = (1 << 13) - 1  # execute … make_sym
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2


class Unavailable(Exception):
    """This protection cannot be had here; the message says why."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _call(fn, *args: object) -> int:
    """A variadic libc call (syscall, prctl) with every integer passed as a full C long."""
    return int(fn(*(ctypes.c_long(a) if isinstance(a, int) else a for a in args)))


def _fail(what: str) -> Unavailable:
    err = ctypes.get_errno()
    return Unavailable(f"{what} failed: {os.strerror(err)}")


def _no_new_privs(libc: ctypes.CDLL) -> None:
    if _call(libc.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")


# ---------------------------------------------------------------- namespaces


def enter_namespaces() -> str:
    """Move this (single-threaded) process into a new user and network namespace.

    The child then sees only its own, unconfigured loopback, so nothing it listens on or connects
    to reaches the outside; being in another user namespace also hides the parent's /proc files
    (environ, memory) from it. Must run while the process has a single thread."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if _call(libc.unshare, CLONE_NEWUSER | CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise Unavailable(f"unprivileged user namespaces are not available ({os.strerror(err)})")
    # Keep our own ids visible inside (files we create still show as ours). Failing to map them
    # leaves the ids shown as "nobody"; the namespaces still hold.
    for path, text in (
        ("/proc/self/setgroups", "deny"),
        ("/proc/self/uid_map", f"{uid} {uid} 1\n"),
        ("/proc/self/gid_map", f"{gid} {gid} 1\n"),
    ):
        try:
            with open(path, "w") as fh:
                fh.write(text)
        except OSError:
            pass
    return "no network and no access to other processes' /proc files (user + network namespace)"


# ---------------------------------------------------------------- Landlock


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; raises Unavailable when there is none."""
    libc = _libc()
    abi = _call(libc.syscall, _LL_CREATE, None, 0, _LL_VERSION)
    if abi < 0:
        err = ctypes.get_errno()
        if err == 38:  # ENOSYS
            raise Unavailable("this kernel has no Landlock (Linux 5.13 or later)")
        raise Unavailable(f"Landlock is disabled in this kernel ({os.strerror(err)})")
    return int(abi)


def restrict_files(workdir: str) -> str:
    """Landlock: only `workdir` writable, only Python's and the system's files readable.

    The private folder (and /dev/null) can be written, created or removed; Python's own install,
    its libraries and the system's (checker/readable.py) and /proc/self can be read; nothing else
    can be opened at all — not the home folder, not /tmp, not /etc. Other processes cannot be
    traced or have their memory opened. From ABI 4 TCP bind/connect are refused too, from ABI 6
    signals and abstract Unix sockets outside the sandbox. (Another process's /proc/PID/environ
    stays readable under Landlock alone; the user namespace hides it.)"""
    from grpo_desktop.engine.checker.readable import readable_paths

    libc = _libc()
    abi = landlock_abi()
    fs = _FS_ABI1
    if abi >= 2:
        fs |= _FS_REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if abi >= 5:
        fs |= _FS_IOCTL_DEV
    net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
    data = struct.pack("=QQQ", fs, net, scoped)
    attr = ctypes.create_string_buffer(data, len(data))
    read = _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE
    rules = [(path, read) for path in readable_paths(workdir)]
    rules += [("/proc/self", read), (workdir, fs), ("/dev/null", _FS_READ_FILE | _FS_WRITE_FILE)]
    ruleset = _call(libc.syscall, _LL_CREATE, attr, len(data), 0)
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        for path, rights in rules:
            _add_rule(libc, ruleset, path, rights, fs)
        _no_new_privs(libc)
        if _call(libc.syscall, _LL_RESTRICT, ruleset, 0) != 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(ruleset)
    extra = ", no TCP" if net else ""
    extra += ", no signals or abstract sockets outside it" if scoped else ""
    return (
        "files outside its folder read-only, and only Python's and the system's files readable "
        f"(not your home folder){extra} (Landlock ABI {abi})"
    )


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int, handled: int) -> None:
    """One path-beneath rule; a file (not a folder) gets only the rights a file can have."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone since it was listed: nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & handled, fd))
        if _call(libc.syscall, _LL_ADD_RULE, ruleset, _LL_RULE_PATH_BENEATH, rule, 0) != 0:
            raise _fail(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


# ---------------------------------------------------------------- seccomp


_ARCHES = {
    # AUDIT_ARCH value, then syscall numbers
    "x86_64": (
        0xC000003E,
        {
            "socket": 41, "clone": 56, "fork": 57, "vfork": 58, "kill": 62, "ptrace": 101,
            "rt_sigqueueinfo": 129, "tkill": 200, "tgkill": 234, "rt_tgsigqueueinfo": 297,
            "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_send_signal": 424,
            "io_uring_setup": 425, "clone3": 435,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198, "clone": 220, "kill": 129, "ptrace": 117, "rt_sigqueueinfo": 138,
            "tkill": 130, "tgkill": 131, "rt_tgsigqueueinfo": 240, "process_vm_readv": 270,
            "process_vm_writev": 271, "pidfd_send_signal": 424, "io_uring_setup": 425,
            "clone3": 435,
        },
    ),
}  # fmt: skip
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 0x00050000 | 1, 0x00050000 | 38
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data


def _seccomp_program(arch: str, pid: int) -> list[tuple[int, int, int, int]]:
    """The BPF program as (code, jt, jf, k). Jumps to the shared returns are resolved here."""
    audit, nr = _ARCHES[arch]
    own = pid & 0xFFFFFFFF
    group = -pid & 0xFFFFFFFF  # kill(-pgid): our own process group (we lead it)
    prog: list[tuple[int, int, int, int | str]] = [(_LD, 0, 0, _ARCH), (_JEQ, 0, "kill", audit)]
    prog.append((_LD, 0, 0, _NR))
    if arch == "x86_64":
        prog.append((_JGE, "eperm", 0, 0x40000000))  # x32 numbers would skip the checks below
    for name in ("socket", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev",
                 "pidfd_send_signal", "io_uring_setup", "tkill", "rt_sigqueueinfo",
                 "rt_tgsigqueueinfo"):  # fmt: skip
        if name in nr:
            prog.append((_JEQ, "eperm", 0, nr[name]))
    prog.append((_JEQ, "enosys", 0, nr["clone3"]))
    prog.append((_JEQ, "clone", 0, nr["clone"]))
    prog.append((_JEQ, "kill_sig", 0, nr["kill"]))
    prog.append((_JEQ, "kill_sig", 0, nr["tgkill"]))  # tgkill(tgid, …): same first argument
    prog.append((_RET, 0, 0, _ALLOW))
    labels = {"clone": len(prog)}
    prog += [(_LD, 0, 0, _ARG0), (_JSET, "allow", "eperm", CLONE_THREAD)]
    labels["kill_sig"] = len(prog)
    prog += [(_LD, 0, 0, _ARG0), (_JEQ, "allow", 0, own), (_JEQ, "allow", 0, 0)]
    prog += [(_JEQ, "allow", "eperm", group)]
    for name, value in (("allow", _ALLOW), ("eperm", _EPERM), ("enosys", _ENOSYS), ("kill", _KILL)):
        labels[name] = len(prog)
        prog.append((_RET, 0, 0, value))
    out = []
    for i, (code, jt, jf, k) in enumerate(prog):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        out.append((code, jt, jf, k))
    return out


def forbid_processes_and_sockets() -> str:
    """Install the seccomp filter on this process (inherited by the threads started after).

    x86-64 and arm64. It refuses new processes (fork, vfork, clone without CLONE_THREAD; clone3
    answers ENOSYS so threads fall back to clone), sockets, io_uring, ptrace, reading or writing
    other processes' memory, and signals to any process but itself."""
    arch = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    if arch not in _ARCHES:
        raise Unavailable(f"no seccomp filter for the {arch} architecture")
    libc = _libc()
    prog = _seccomp_program(arch, os.getpid())
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    filt = ctypes.create_string_buffer(raw)
    fprog = struct.pack("=HxxxxxxQ", len(prog), ctypes.addressof(filt))
    fprog_buf = ctypes.create_string_buffer(fprog)
    _no_new_privs(libc)
    if _call(libc.prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buf, 0, 0) != 0:
        raise _fail("prctl(PR_SET_SECCOMP)")
    return "no new processes, sockets or signals to other processes (seccomp)"
