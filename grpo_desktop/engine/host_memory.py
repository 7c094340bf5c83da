"""Keep a CPU run's heap from growing step after step: glibc's mmap threshold pinned at 1 MiB.

glibc's malloc gives a block above its "mmap threshold" a mapping of its own and unmaps it on
free, so the memory goes back to the system at once. But the threshold is dynamic: each time
such a block is freed, it rises to that block's size (up to 32 MiB on 64-bit). After the first
few tensors of a training step are freed, every later tensor of a few MiB (activations, logits
chunks, the sampler's (N, V) rows, oneDNN's buffers) comes from the heap instead, and the holes
they leave are kept whenever anything newer sits above them. A GRPO step allocates such tensors
by the thousand in ever-changing sizes (completion lengths change every step), so the resident
memory kept rising: on the Qwen2.5-0.5B-shaped model (LoRA, B×G 32, 256 tokens) the peak RSS
was 2.18 GB after one step and 4.39 GB after three. Pinning the threshold (which also stops
its drift) keeps each tensor of 1 MiB or more in its own mapping, returned when it is freed.

Linux with glibc only; elsewhere, or when the user set MALLOC_MMAP_THRESHOLD_ (glibc reads it
at start), nothing is changed. `train()` calls it first, for every run: the CPU is where
the heap holds the tensors; on a GPU the host's few large blocks lose nothing by it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
THRESHOLD_BYTES = 1 << 20

_pinned = False


def pin_mmap_threshold(threshold: int = THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold at `threshold` bytes; True when it is pinned (now or before)."""
    global _pinned
    if _pinned:
        return True
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _pinned = mallopt(M_MMAP_THRESHOLD, int(threshold)) == 1
    return _pinned
