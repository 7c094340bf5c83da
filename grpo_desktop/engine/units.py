"""Byte sizes as people read them: '512 bytes', '1.5 KB', '6.1 MB', '24.0 GB'; and the bytes a
folder holds on disk (`folder_bytes`: checkpoints, exports, a model to copy).

One formatter for every size the app shows from disk and memory (checkpoints, exports, free
space, RAM and VRAM), so the same number reads the same everywhere. Units are binary (1 KB =
1024 bytes), as file managers and `nvidia-smi` count them; GB is the largest. The estimate's
advice speaks in powers of ten and keeps its own wording (ui/panels/estimate_text.py).

Torch-free. Try it:  python -c "from grpo_desktop.engine.units import size_text; \
print(size_text(6_380_544), size_text(2**29, unit='GB'))"
"""

from __future__ import annotations

import os

UNITS = ("bytes", "KB", "MB", "GB")


def size_text(n: float, unit: str | None = None) -> str:
    """`n` bytes in the largest unit that keeps the number under 1024 (GB at most), or in `unit`
    when given: whole bytes, one decimal for KB and up, thousands separated ('1,536.0 GB')."""
    if unit is None:
        power = 0
        while n >= 1024 and power < len(UNITS) - 1:
            n /= 1024
            power += 1
    elif unit in UNITS:
        power = UNITS.index(unit)
        n /= 1024**power  # exact: a power of two
    else:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    return f"{n:,.0f} bytes" if power == 0 else f"{n:,.1f} {UNITS[power]}"


def folder_bytes(path: str) -> int:
    """Bytes of the files under `path` (0 for a missing folder); a file that vanishes while it is
    counted counts 0."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                continue
    return total
