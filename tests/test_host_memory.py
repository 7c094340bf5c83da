"""engine/host_memory.py: with glibc's mmap threshold pinned, freed tensor-sized blocks go back
to the system even after a larger block raised glibc's dynamic threshold (the heap growth that
made a CPU run's peak RSS double over three steps). Run in fresh processes: the setting is
per process and must come before the allocations it governs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = r"""
import resource, sys
sys.path.insert(0, sys.argv[2])
from grpo_desktop.engine.host_memory import pin_mmap_threshold

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20

pinned = pin_mmap_threshold() if sys.argv[1] == "pin" else False
big = bytearray(16 << 20)
del big  # freeing a mapped 16 MiB block raises glibc's threshold to 16 MiB
blocks = [bytearray(4 << 20) for _ in range(20)]  # 80 MiB in blocks of 4 MiB
keep_last = blocks[-1]
small_after = bytearray(1 << 10)
del blocks  # all but the last freed
print(pinned, round(rss_mib(), 1))
"""


def _probe(mode: str, **env) -> tuple[bool, float]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, ROOT],
        capture_output=True, text=True, timeout=60, env=environ, check=True,
    ).stdout.split()  # fmt: skip
    return out[0] == "True", float(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_go_back_to_the_system_once_the_threshold_is_pinned():
    pinned, rss_pinned = _probe("pin")
    _, rss_plain = _probe("plain")
    assert pinned
    # Unpinned, the 19 freed 4 MiB blocks (76 MiB) stay resident; pinned, they are unmapped.
    assert rss_plain - rss_pinned > 50, (rss_plain, rss_pinned)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_threshold_the_user_set_is_left_alone():
    pinned, _ = _probe("pin", MALLOC_MMAP_THRESHOLD_="33554432")
    assert not pinned
