"""`grpo-desktop --self-test`: check that an installation or a frozen bundle is whole.

One line per check, then a summary; exit code 0 only when every check passed. The checks follow
what a first launch needs: the Qt platform plugin, the ML libraries, the built-in demo model, one
real training step of the demo (including the checker's child process, which in a frozen bundle
needs multiprocessing's freeze support), and the main window opening and closing offscreen.

Run it from a source checkout too: `python -m grpo_desktop --self-test`.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

LIBRARIES = (
    "torch",
    "transformers",
    "peft",
    "bitsandbytes",
    "datasets",
    "math_verify",
    "pyqtgraph",
)


def _check_qt_system_libraries() -> str:
    from grpo_desktop.ui.qt_libs import advice, missing_xcb_libraries, uses_xcb

    if not uses_xcb():
        return "Qt system libraries: the X11 plugin is not used here"
    missing = missing_xcb_libraries()
    if missing and os.environ.get("DISPLAY"):
        raise RuntimeError(advice(missing))
    if missing:  # a headless machine: the checks below run offscreen, the window would not
        return f"Qt system libraries: no display; a window would need: {', '.join(missing)}"
    return "Qt system libraries for X11 (xcb) all found"


def _check_qt() -> str:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    return f"Qt platform plugin '{app.platformName()}'"


def _check_library(name: str) -> Callable[[], str]:
    def check() -> str:
        module = importlib.import_module(name)
        return f"{name} {getattr(module, '__version__', '')}".strip()

    return check


def _check_products() -> str:
    from grpo_desktop.engine.ops import kernels

    return f"float32 CPU products: {kernels.describe()}"


def _check_native() -> str:
    from grpo_desktop.engine.ops import native

    native.decode_ops()
    return native.describe()


def _check_demo_model() -> str:
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.engine.models.loading import load_policy

    policy = load_policy(demo_config())
    total, _ = policy.num_parameters()
    return f"demo model loads ({total / 1e6:.2f}M parameters, {policy.device.type})"


def _check_training_step() -> str:
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.engine.control import TrainControl
    from grpo_desktop.engine.grpo.trainer import train

    checker = "def check(completion, answer, prompt):\n    return float(len(completion) > 0)\n"
    cfg = demo_config().replace(
        data={"eval_size": 0},
        rewards={"custom_checker": checker},
        algorithm={"prompts_per_step": 1, "num_generations": 2},
        run={"max_steps": 1, "eval_every": 0},
    )
    with tempfile.TemporaryDirectory(prefix="grpo-selftest-") as run_dir:
        events = list(train(cfg, TrainControl(), run_dir=run_dir))
    finished = events[-1]
    if finished.status != "completed":
        raise RuntimeError(f"{finished.message}\n{finished.error or ''}")
    rows = [r for e in events if e.type == "rollouts" for r in e.rows]
    errors = [r["error"] for r in rows if r["error"]]
    if errors:
        raise RuntimeError(f"the checker process failed: {errors[0]}")
    return f"one demo training step with a custom checker ({len(rows)} rollouts)"


def _check_window() -> str:
    from PySide6.QtWidgets import QApplication

    from grpo_desktop.ui.app import create_main_window
    from grpo_desktop.ui.compat import drop_platform_noise

    drop_platform_noise()
    app = QApplication.instance()
    window = create_main_window(demo=True)
    window.show()
    app.processEvents()
    size = window.size()
    window.close()
    app.processEvents()
    return f"main window opens and closes ({size.width()}×{size.height()})"


def run_self_test(out=sys.stdout) -> int:
    checks: list[tuple[str, Callable[[], str]]] = [
        ("qt system libraries", _check_qt_system_libraries)
    ]
    checks.append(("qt", _check_qt))
    checks += [(name, _check_library(name)) for name in LIBRARIES]
    checks += [
        ("float32 products", _check_products),
        ("fused decode kernels", _check_native),  # optional: says why when they are not built
        ("demo model", _check_demo_model),
        ("training step", _check_training_step),
        ("main window", _check_window),
    ]
    failed = 0
    for name, check in checks:
        t0 = time.perf_counter()
        try:
            detail = check()
            print(f"ok    {detail} ({time.perf_counter() - t0:.1f} s)", file=out, flush=True)
        except Exception as exc:  # report every failure, keep checking the rest
            failed += 1
            print(f"FAIL  {name}: {type(exc).__name__}: {exc}", file=out, flush=True)
            if name != "qt system libraries":  # its message says everything
                print("      " + traceback.format_exc().replace("\n", "\n      "), file=out)
    verdict = "all checks passed" if not failed else f"{failed} of {len(checks)} checks FAILED"
    print(f"self-test: {verdict}", file=out, flush=True)
    return 0 if not failed else 1
