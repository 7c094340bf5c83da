"""GUI event-loop stalls during the window's first "Will it fit?" estimate (offscreen).

A 10 ms QTimer ticks in an offscreen MainWindow (probe_device=False, so the estimate is the only
work) from `estimate_view.start()` until the demo's estimate is on screen; a stall is the time
between two ticks minus the 10 ms. Prints one JSON line: the longest stall (ms), how many went
over 100 ms, seconds to the estimate, whether torch got into this (the GUI) process, and the
estimate child's pid and whether it is gone after the window closed (None where the estimate
runs in a thread pool). It also runs from an older checkout, for a before/after comparison.
`--probe`: a window as launched (the device probe runs, then the estimate starts by itself),
timed from the window's show.

    QT_QPA_PLATFORM=offscreen python bench/estimate_stalls.py [--probe]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication

TICK_MS = 10
STALL_MS = 100
TIMEOUT_S = 120


def main() -> int:
    app = QApplication(sys.argv[:1])
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.ui.main_window import MainWindow

    settings = QSettings(os.path.join(tempfile.mkdtemp(), "s.ini"), QSettings.Format.IniFormat)
    probe = "--probe" in sys.argv
    w = MainWindow(demo_config(), settings=settings, probe_device=probe)
    w.session.ask_save_changes = lambda _name: "discard"
    w.show()
    for _ in range(0 if probe else 20):
        app.processEvents()
    view = w.estimate_view
    gaps: list[tuple[float, float]] = []  # (seconds since the start, stall ms)
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append((now - t0, (now - last[0]) * 1000 - TICK_MS))
        last[0] = now

    timer = QTimer(interval=TICK_MS)
    timer.timeout.connect(tick)
    t0 = last[0] = time.perf_counter()
    timer.start()
    if not probe:
        view.start(free_bytes=8 * 10**9)
    while not view.shown_for_current_settings() and time.perf_counter() - t0 < TIMEOUT_S:
        app.processEvents()
        time.sleep(0.001)
    seconds = time.perf_counter() - t0
    timer.stop()
    estimator = getattr(view, "estimator", None)
    proc = getattr(estimator, "_proc", None)
    pid = int(proc.processId()) if proc is not None else None
    torch_loaded = "torch" in sys.modules
    w.close()
    app.processEvents()
    gone = None if pid is None else not os.path.exists(f"/proc/{pid}")
    print(json.dumps({
        "longest_stall_ms": round(max((g for _t, g in gaps), default=0.0), 1),
        "stalls_over_100ms": sum(g > STALL_MS for _t, g in gaps),
        "stalls_at_s": [[round(t, 2), round(g)] for t, g in gaps if g > STALL_MS],
        "seconds_to_estimate": round(seconds, 2),
        "params": (view.result or {}).get("model", {}).get("params"),
        "error": view.error,
        "torch_in_gui": torch_loaded,
        "child_pid": pid,
        "child_gone_after_close": gone,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
