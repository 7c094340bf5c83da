"""Handing the C heap's free pages back to the system during a CPU decode with a large vocabulary,
and how much RAM is available now (`host_available_bytes`: micro-batch auto, the estimate, the
GGUF import's memory check), and `collect_cycles`: the engine's explicit garbage collections.

Each decode step at a 151,936-token vocabulary makes several (N, V) float32 temporaries (19 MiB
at N = 32: the logits, the scaled logits, the softmax). Once glibc has freed one such block it
serves the next ones from the heap, and small blocks that outlive a step can land inside a
freed hole, so the next step's block no longer fits there and the heap grows; whether it happens
depends on thread timing (bench/README.md, `realistic.py`). `DecodeTrim` calls glibc's
`malloc_trim(0)` (every whole free page of every arena, not only the heap's top) every
TRIM_EVERY tokens of a CPU decode whose logits per step reach LARGE_LOGITS_BYTES, and once at
its end: the heap may still fragment, but its free pages do not stay resident. The demo's
small vocabulary never trims: there a trim costs more than it saves. Where malloc_trim does
not exist (macOS, musl) nothing happens. It changes no value computed.

`keep_freed_heap()` (a CPU run calls it once at its start) stops glibc from handing the top of
the heap back after every step: by default glibc gives freed memory at the heap's top back to
the system once it exceeds twice its (adaptive) mmap threshold, and the next step's tensors then
fault their pages in anew, each zeroed by the kernel: 10,000-90,000 page faults and 0.1-0.25 s
of kernel time a step on `bench/vs_trl.py --quick`'s workload, against about ten once the
thresholds are pinned (mmap for blocks from 32 MiB, glibc's own adaptive ceiling; no automatic
trim below KEEP_FREE_TOP_BYTES at the top). Both are set together: pinning one alone turns off
glibc's adaptation of the other (the trim threshold alone leaves every block over 128 KiB to mmap,
faulting in on every use). The step's memory is reused by the next step, so the resident size is
the peak it was anyway; `release_free_heap` still trims on demand.

`collect_cycles()` is gc.collect() unless the app put another collector in its place
(`set_cycle_collector`): the desktop app has every collection run on its GUI thread, because a
cycle can hold a Qt object, which must not be destroyed in the training thread
(ui/common/gui_gc.py).

Try it: tests/engine/ops/test_host_memory.py.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
from collections.abc import Callable

TRIM_EVERY = 16  # decode tokens between trims
LARGE_LOGITS_BYTES = 4 * 2**20  # one step's logits (rows × vocabulary × element size) from here on
MMAP_FROM_BYTES = 32 * 2**20  # blocks from here on are mmapped (glibc's adaptive maximum)
KEEP_FREE_TOP_BYTES = 512 * 2**20  # free memory at the heap's top kept for the next step
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
_libc: dict[str, object] = {}
stats = {"trims": 0, "kept_heap": False}  # malloc_trim calls; keep_freed_heap took effect
_cycle_collector: list[Callable[[], object]] = [gc.collect]


def collect_cycles() -> None:
    """Free the objects that only reference cycles keep (a model's modules hold some), with the
    collector the app chose (gc.collect unless `set_cycle_collector` said otherwise)."""
    _cycle_collector[0]()


def set_cycle_collector(collect: Callable[[], object]) -> Callable[[], object]:
    """Have `collect_cycles` call `collect`; returns the previous collector."""
    previous, _cycle_collector[0] = _cycle_collector[0], collect
    return previous


def _glibc(name: str, argtypes: list):
    """glibc's function `name`, or None where there is none (macOS, musl, Windows)."""
    if name not in _libc:
        fn = None
        if sys.platform.startswith("linux"):
            try:
                fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
                fn.argtypes, fn.restype = argtypes, ctypes.c_int
            except (OSError, AttributeError):
                fn = None
        _libc[name] = fn
    return _libc[name]


def _malloc_trim():
    """glibc's malloc_trim, or None where there is none."""
    return _glibc("malloc_trim", [ctypes.c_size_t])


def keep_freed_heap() -> bool:
    """Pin glibc's mmap and trim thresholds (see the module docstring) for this process; False
    where there is no glibc or it refused. Changes no value computed."""
    mallopt = _glibc("mallopt", [ctypes.c_int, ctypes.c_int])
    if mallopt is None:
        return False
    kept = bool(mallopt(M_MMAP_THRESHOLD, MMAP_FROM_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, KEEP_FREE_TOP_BYTES)
    )
    stats["kept_heap"] = stats["kept_heap"] or kept
    return kept


def release_free_heap() -> bool:
    """Return the C heap's free pages to the system; False where that is not possible."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    stats["trims"] += 1
    return True


class DecodeTrim:
    """For a decode loop: `tick(t)` after token t trims every TRIM_EVERY tokens and `done()` at
    the end, when the loop runs on the CPU with logits of at least LARGE_LOGITS_BYTES a step."""

    def __init__(self, device_type: str, logits_bytes: int) -> None:
        self.on = device_type == "cpu" and logits_bytes >= LARGE_LOGITS_BYTES

    def tick(self, t: int) -> None:
        if self.on and t % TRIM_EVERY == TRIM_EVERY - 1:
            release_free_heap()

    def done(self) -> None:
        if self.on:
            release_free_heap()


def host_available_bytes() -> int | None:
    """RAM available to a new allocation without swapping: Linux's MemAvailable, else psutil's
    figure when installed, else the free pages sysconf reports; None when nothing says."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, AttributeError, OSError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None
