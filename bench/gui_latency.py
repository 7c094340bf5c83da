"""GUI latency of GRPO Desktop: how long the event loop stalls while the demo trains in the real
window, and how long redrawing every plot takes with 10,000 steps of history.

Part 1: the real main window (offscreen, the app's settings) trains the demo, made small, with the
real engine; a 10 ms QTimer probe records how late each tick fires, reported per phase (start,
training, stop) and in the second after each step arrives. Target: p99 < 50 ms while training.
Part 2: a fresh window's history gets `--history` synthetic steps from the engine's event
classes, then `--redraws` times one more step arrives and every plot is redrawn ("data":
`PlotsView.redraw()`, "paint": a synchronous repaint), as medians of wall and GUI-thread CPU time.
Target: data + paint < 16 ms. The 1-minute load average is printed beside every figure: on a
shared CPU other jobs inflate them. bench/README.md has the method and the figures.

    python bench/gui_latency.py                      # both parts, under a minute
    python bench/gui_latency.py --skip-training      # the redraw part only (~15 s)
    python bench/gui_latency.py --steps 60 --history 10000 --redraws 20 --json gui.json
    python bench/gui_latency.py --wait-load 2        # first wait for a quieter machine
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
import warnings

# Measure this checkout's code, whatever an editable install elsewhere points to.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from PySide6.QtCore import QEvent, QObject, QSettings, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from grpo_desktop.engine.events import EvalResult, RunStarted, StepMetrics  # noqa: E402
from grpo_desktop.ui.app import GIL_SWITCH_INTERVAL_S, create_main_window  # noqa: E402
from grpo_desktop.ui.compat import drop_platform_noise  # noqa: E402
from grpo_desktop.ui.run.worker import FINAL_STATES  # noqa: E402

PROBE_MS = 10


def load() -> float:
    return os.getloadavg()[0]


class StallProbe:
    """A 10 ms timer that records, per phase, when each tick fired and how late (seconds)."""

    def __init__(self) -> None:
        self.phase = "idle"
        self.late: dict[str, list[float]] = {}
        self.ticks: list[tuple[float, float]] = []  # (when, how late), every phase
        self.timer = QTimer(interval=PROBE_MS)
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(self._on_timer_timeout)
        self._last = 0.0

    def start(self) -> None:
        self._last = time.perf_counter()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def set_phase(self, phase: str) -> None:
        self.phase = phase

    def worst_after(self, moments: list[float], within_s: float, until: float) -> list[float]:
        """For each moment, the worst stall among the ticks in the `within_s` seconds after it
        (and before `until`)."""
        out = []
        for m in moments:
            end = min(m + within_s, until)
            out.append(max((late for t, late in self.ticks if m <= t <= end), default=0.0))
        return out

    def _on_timer_timeout(self) -> None:
        now = time.perf_counter()
        late = max(0.0, now - self._last - PROBE_MS / 1000)
        self.late.setdefault(self.phase, []).append(late)
        self.ticks.append((now, late))
        self._last = now


def summary(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return {
        "n": len(values),
        "worst_ms": 1000 * ordered[-1],
        "p99_ms": 1000 * p99,
        "median_ms": 1000 * statistics.median(ordered),
    }


def make_window(tmp: str):
    """The app's main window on the demo settings, its session, settings and runs under `tmp`,
    with no modal question (offscreen there is nobody to answer it)."""
    os.environ["GRPO_DESKTOP_DATA_DIR"] = os.path.join(tmp, "data")
    os.environ["GRPO_DESKTOP_CONFIG_DIR"] = os.path.join(tmp, "config")
    settings = QSettings(os.path.join(tmp, "settings.ini"), QSettings.Format.IniFormat)
    window = create_main_window(settings=settings, probe_device=False)
    window.ask_stop_on_close = lambda: True
    session = getattr(window, "session", None)
    if session is not None:
        session.ask_save_changes = lambda _name: "discard"
    window.reset_layout()
    window.show()
    return window


# ---------------------------------------------------------------------- part 1: stalls


def bench_training(app: QApplication, steps: int, seconds: float, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        window = make_window(tmp)
        model = window.model
        model.set_config(
            model.config.replace(
                algorithm={
                    "prompts_per_step": 2,
                    "num_generations": 4,
                    "max_completion_length": 32,
                },
                data={"eval_size": 8},
                run={
                    "max_steps": steps + 50,
                    "eval_every": 4,
                    "checkpoint_every": 1000,
                    "checkpoint_minutes": 0.0,
                },
            )
        )
        probe = StallProbe()
        loads: dict[str, float] = {}
        t: dict[str, float] = {}
        arrivals: list[float] = []  # when each step reached the window

        def stop_training() -> None:
            if probe.phase == "training":
                probe.set_phase("stop")
                t["stop"] = time.perf_counter()
                loads["training"] = load()
                model.stop()

        def on_step(_step: int) -> None:
            arrivals.append(time.perf_counter())
            if probe.phase == "start":
                probe.set_phase("training")
                t["first_step"] = time.perf_counter()
                QTimer.singleShot(int(seconds * 1000), stop_training)
            if model.history.num_steps >= steps:
                stop_training()

        def on_state(state: str) -> None:
            if state in FINAL_STATES:
                t["end"] = time.perf_counter()
                loads["stop"] = load()
                QTimer.singleShot(300, app.quit)

        model.step_finished.connect(on_step)
        model.state_changed.connect(on_state)

        def begin() -> None:
            loads["start"] = load()
            probe.set_phase("start")
            t["start"] = time.perf_counter()
            if not window.start_run():
                print("could not start:", window.message_bar.message(), file=sys.stderr)
                app.quit()

        probe.start()
        QTimer.singleShot(500, begin)  # let the window settle first
        QTimer.singleShot(int(timeout_s * 1000), app.quit)
        app.exec()
        probe.stop()
        if model.runner.active:  # timed out: stop and wait so no thread outlives the bench
            model.stop()
            model.runner.wait()
        status = model.history.finished["status"] if model.history.finished else "timed out"
        until = t.get("stop", math.inf)
        per_step = probe.worst_after([a for a in arrivals if a < until], 1.0, until)
        result = {
            "steps": model.history.num_steps,
            "status": status,
            "seconds": {
                "start": t.get("first_step", math.nan) - t.get("start", math.nan),
                "training": t.get("stop", math.nan) - t.get("first_step", math.nan),
                "stop": t.get("end", math.nan) - t.get("stop", math.nan),
            },
            "phases": {p: summary(probe.late.get(p, [])) for p in ("start", "training", "stop")},
            "per_step": {
                "n": len(per_step),
                "median_ms": 1000 * statistics.median(per_step) if per_step else math.nan,
                "worst_ms": 1000 * max(per_step, default=math.nan),
            },
            "load": loads,
        }
        window.close()
        app.processEvents()
        return result


# ---------------------------------------------------------------------- part 2: redraw


class SyntheticRun:
    """Realistic step events: noisy rising reward, three reward parts, a 21-bin histogram."""

    def __init__(self, total: int, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.total = total
        self.start = time.time()

    def step(self, s: int) -> StepMetrics:
        rng, f = self.rng, s / self.total
        acc = min(1.0, max(0.0, 0.2 + 0.6 * f + rng.gauss(0, 0.1)))
        fmt = min(1.0, max(0.0, 0.5 + 0.5 * f + rng.gauss(0, 0.05)))
        chk = min(1.0, max(0.0, 0.3 + rng.gauss(0, 0.15)))
        zero = min(1.0, max(0.0, 0.6 - 0.3 * f + rng.gauss(0, 0.1)))
        mean_len = 80 + 40 * f + rng.gauss(0, 8)
        spread = max(1e-3, abs(rng.gauss(1.2, 0.3)))
        counts = [0] * 21
        for _ in range(32):
            counts[min(20, max(0, int((rng.gauss(0, 0.8) + spread) / (2 * spread) * 21)))] += 1
        metrics = {
            "reward": acc + 0.2 * fmt + 0.5 * chk,
            "reward_std": abs(rng.gauss(0.3, 0.05)),
            "rewards/accuracy/mean": acc,
            "rewards/format/mean": fmt,
            "rewards/checker/mean": chk,
            "frac_reward_zero_std": zero,
            "kl": abs(rng.gauss(0.02 * f, 0.005)),
            "entropy": 1.5 - 0.8 * f + rng.gauss(0, 0.05),
            "loss": rng.gauss(0, 0.01),
            "grad_norm": abs(rng.gauss(0.5, 0.2)) + (5.0 if rng.random() < 0.002 else 0.0),
            "learning_rate": 5e-3 * min(1.0, s / 100) * (1 - 0.5 * f),
            "completions/mean_length": mean_len,
            "completions/min_length": mean_len - 30 - rng.random() * 10,
            "completions/max_length": mean_len + 30 + rng.random() * 40,
            "completions/clipped_ratio": min(1.0, max(0.0, rng.gauss(0.05, 0.03))),
            "step_time": 1.0 + rng.random() * 0.1,
        }
        edges = [spread * (2 * i - 21) / 21 for i in range(22)]
        hist = {"edges": edges, "counts": counts}
        return StepMetrics(s, self.total, metrics, hist, elapsed=1.05 * s)

    def eval(self, s: int) -> EvalResult:
        f = s / self.total
        acc = min(1.0, 0.15 + 0.6 * f + self.rng.gauss(0, 0.03))
        return EvalResult(s, acc, min(1.0, 0.6 + 0.4 * f), 32, 90.0)


class PaintCounter(QObject):
    """Counts the paint events a widget receives (to check that the event loop painted)."""

    def __init__(self, widget) -> None:
        super().__init__(widget)
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt API)
        if event.type() == QEvent.Type.Paint:
            self.count += 1
        return False


def _ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def bench_redraw(app: QApplication, history_steps: int, redraws: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        window = make_window(tmp)
        app.processEvents()
        plots, history = window.plots, window.model.history
        plots.timer.stop()  # the bench drives the redraws itself
        total = history_steps + 2 * redraws
        run = SyntheticRun(total)
        history.append(RunStarted("bench", {}, 0, total, "cpu", "builtin:demo", 10, 1))
        history.append(run.eval(0))
        t0 = time.perf_counter()
        for s in range(1, history_steps + 1):
            history.append(run.step(s))
            if s % 100 == 0:
                history.append(run.eval(s))
        fill_s = time.perf_counter() - t0
        viewport = plots.canvas.viewport()
        painted = PaintCounter(viewport)
        clocks = (time.perf_counter, time.thread_time)  # wall, and CPU time of this thread

        def timed(fn) -> tuple[float, float]:
            w, c = (clock() for clock in clocks)
            fn()
            return time.perf_counter() - w, time.thread_time() - c

        first_load = load()
        first = timed(plots.redraw), timed(viewport.repaint)
        app.processEvents()
        # Pass 1: data, then a forced repaint of the whole canvas (every item painted).
        full: dict[str, list[float]] = {k: [] for k in ("data", "paint", "data_cpu", "paint_cpu")}
        loads = []
        for _ in range(redraws):
            history.append(run.step(history.last_step + 1))
            (d, dc), (p, pc) = timed(plots.redraw), timed(viewport.repaint)
            app.processEvents()  # the update queued by the changes: not timed
            for key, value in zip(full, (d, p, dc, pc)):
                full[key].append(value)
            loads.append(load())
        # Pass 2: data, then what the event loop paints for it (the region that changed).
        loop: dict[str, list[float]] = {"total": [], "total_cpu": []}
        missed = 0
        for _ in range(redraws):
            history.append(run.step(history.last_step + 1))
            before = painted.count
            w, c = timed(lambda: (plots.redraw(), app.processEvents()))
            missed += painted.count == before
            loop["total"].append(w)
            loop["total_cpu"].append(c)
        size = viewport.size()
        totals = [d + p for d, p in zip(full["data"], full["paint"])]
        totals_cpu = [d + p for d, p in zip(full["data_cpu"], full["paint_cpu"])]
        result = {
            "history_steps": history_steps,
            "fill_s": fill_s,
            "canvas_px": [size.width(), size.height()],
            "first": {
                "data_ms": 1000 * first[0][0],
                "paint_ms": 1000 * first[1][0],
                "load": first_load,
            },
            "median": {
                "data_ms": _ms(full["data"]),
                "paint_ms": _ms(full["paint"]),
                "total_ms": _ms(totals),
                "worst_total_ms": 1000 * max(totals),
                "data_cpu_ms": _ms(full["data_cpu"]),
                "paint_cpu_ms": _ms(full["paint_cpu"]),
                "total_cpu_ms": _ms(totals_cpu),
                "n": len(totals),
                "load": statistics.median(loads),
            },
            "event_loop": {
                "total_ms": _ms(loop["total"]),
                "total_cpu_ms": _ms(loop["total_cpu"]),
                "worst_ms": 1000 * max(loop["total"]),
                "without_paint": missed,
                "load": load(),
            },
        }
        window.close()
        app.processEvents()
        return result


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="at most this many steps, part 1")
    parser.add_argument(
        "--seconds", type=float, default=40.0, help="and at most this long after the first step"
    )
    parser.add_argument("--history", type=int, default=10_000, help="steps of history, part 2")
    parser.add_argument("--redraws", type=int, default=20, help="timed redraws in part 2")
    parser.add_argument("--skip-training", action="store_true", help="only the redraw part")
    parser.add_argument("--skip-redraw", action="store_true", help="only the stall part")
    parser.add_argument("--timeout", type=float, default=300.0, help="part 1 time limit (s)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--wait-load", type=float, help="first wait (up to 10 min) for a 1-minute load below this"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads of the training (0: torch's default); 1 keeps the step rate steady "
        "on a shared machine",
    )
    args = parser.parse_args(argv)
    if args.torch_threads > 0:  # read when the training thread imports torch
        os.environ["OMP_NUM_THREADS"] = str(args.torch_threads)
    if args.wait_load is not None:
        deadline = time.monotonic() + 600
        while load() >= args.wait_load and time.monotonic() < deadline:
            time.sleep(5)

    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers, in the run
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)  # as the app does (grpo_desktop.ui.app)
    drop_platform_noise()  # the offscreen platform's propagateSizeHints line, as the app does
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("GRPO Desktop bench")
    print(f"GUI latency bench: {os.cpu_count()} CPUs, load average {load():.2f}", flush=True)
    results: dict = {}
    if not args.skip_redraw:
        r = results["redraw"] = bench_redraw(app, args.history, args.redraws)
        n, (w, h) = r["history_steps"], r["canvas_px"]
        f, m = r["first"], r["median"]
        print(f"redraw, {n:,} steps, canvas {w}×{h} px (history filled in {r['fill_s']:.2f} s)")
        print(
            f"  first full draw: data {f['data_ms']:.1f} ms + paint {f['paint_ms']:.1f} ms "
            f"= {f['data_ms'] + f['paint_ms']:.1f} ms  [load {f['load']:.2f}]"
        )
        print(
            f"  median of {m['n']} (one new step each): data {m['data_ms']:.1f} ms + paint "
            f"{m['paint_ms']:.1f} ms, total {m['total_ms']:.1f} ms (worst {m['worst_total_ms']:.1f}"
            f" ms; target < 16 ms)  [load {m['load']:.2f}]"
        )
        print(
            f"  same, CPU time of the GUI thread: data {m['data_cpu_ms']:.1f} ms + paint "
            f"{m['paint_cpu_ms']:.1f} ms, total {m['total_cpu_ms']:.1f} ms"
        )
        e = r["event_loop"]
        print(
            f"  as the event loop does it (redraw, then paint what changed), median of {m['n']}:"
            f" {e['total_ms']:.1f} ms (CPU {e['total_cpu_ms']:.1f} ms, worst {e['worst_ms']:.1f}"
            f" ms)  [load {e['load']:.2f}]",
            flush=True,
        )
    if not args.skip_training:
        r = results["training"] = bench_training(app, args.steps, args.seconds, args.timeout)
        print(f"stalls, demo in the real window: {r['steps']} steps, run {r['status']}")
        for phase in ("start", "training", "stop"):
            st = r["phases"][phase]
            if not st["n"]:
                print(f"  {phase}: no ticks")
                continue
            target = " (target p99 < 50 ms)" if phase == "training" else ""
            print(
                f"  {phase:8s} ({r['seconds'][phase]:5.1f} s, {st['n']} ticks): worst "
                f"{st['worst_ms']:.1f} ms, p99 {st['p99_ms']:.1f} ms, median {st['median_ms']:.2f}"
                f" ms{target}  [load {r['load'].get(phase, math.nan):.2f}]"
            )
        ps = r["per_step"]
        print(
            f"  worst stall in the second after each of {ps['n']} steps arrived: median "
            f"{ps['median_ms']:.1f} ms, worst {ps['worst_ms']:.1f} ms",
            flush=True,
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
