"""How fast the reward-design Lab recomputes a real step (target: under 50 ms for 64 rollouts).

The step is tests/fixtures/lab_step/events.jsonl: one real step of the built-in demo, 8 prompts ×
G = 8 = 64 rollouts, recorded with a custom checker. Measured, each a median over --repeat
settings changes that cycle through weights, checker mode, scaling, std type and length
normalisation: the model (engine.lab.rewards.RewardLab.compute with warm caches), the model cold
(a fresh RewardLab per change, every answer read again), the view (the Lab tab's whole
recompute, offscreen, as RewardLabView.last_ms reports it), and an edited custom checker's first
run (its sandboxed process started, 64 calls) and a recompute once its results are cached.

    python bench/lab_recompute.py              # --repeat 200
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "lab_step", "events.jsonl")
sys.path.insert(0, ROOT)

CHANGES = [
    {"accuracy_weight": 0.5},
    {"format_weight": 1.0},
    {"answer_checker": "lenient"},
    {"scale_rewards": "batch"},
    {"std_type": "sample"},
    {"length_normalise": False},
    {"scale_rewards": "none"},
    {"answer_checker": "strict"},
    {"accuracy_weight": 1.0, "format_weight": 0.2, "scale_rewards": "group"},
]
CHECKER = "def check(completion, answer, prompt):\n    return float('<think>' in completion)\n"


def _load():
    from grpo_desktop.engine.config import TrainConfig
    from grpo_desktop.engine.events import Rollouts

    with open(FIXTURE, encoding="utf-8") as f:
        events = [json.loads(line) for line in f]
    run = next(e for e in events if e["type"] == "run_started")
    ev = next(e for e in events if e["type"] == "rollouts")
    return Rollouts(ev["step"], ev["rows"], ev["prompts"]).full_rows(), run["config"], TrainConfig


def _ms(samples: list[float]) -> dict:
    qs = statistics.quantiles(samples, n=10)
    return {"median_ms": round(statistics.median(samples), 2), "p90_ms": round(qs[-1], 2)}


def bench_model(rows, config, repeat: int) -> dict:
    from dataclasses import replace

    from grpo_desktop.engine.lab.rewards import LabSettings, RewardLab

    base = LabSettings.from_config(config)
    lab = RewardLab.from_rows(rows, run_checker_source=config.rewards.custom_checker)
    for mode in ("strict", "lenient"):
        lab.compute(replace(base, answer_checker=mode))  # imports torch, fills the caches
    warm, cold, s = [], [], base
    for i in range(repeat):
        s = replace(s, **CHANGES[i % len(CHANGES)])
        t0 = time.perf_counter()
        result = lab.compute(s)
        warm.append((time.perf_counter() - t0) * 1000)
        assert len(result.rows) == 64
    for i in range(max(10, repeat // 10)):
        s = replace(s, **CHANGES[i % len(CHANGES)])
        fresh = RewardLab.from_rows(rows, run_checker_source=config.rewards.custom_checker)
        t0 = time.perf_counter()
        fresh.compute(s)
        cold.append((time.perf_counter() - t0) * 1000)
    return {"model": _ms(warm), "model_cold": _ms(cold)}


def bench_view(repeat: int) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    home = tempfile.mkdtemp(prefix="grpo-lab-bench-")
    os.environ["XDG_CONFIG_HOME"], os.environ["XDG_DATA_HOME"] = f"{home}/c", f"{home}/d"
    from PySide6.QtWidgets import QApplication

    from grpo_desktop.engine.config import TrainConfig
    from grpo_desktop.session.document import new_session
    from grpo_desktop.ui.lab.reward_lab import RewardLabView
    from grpo_desktop.ui.session.model import SessionModel

    app = QApplication.instance() or QApplication([])
    with open(FIXTURE, encoding="utf-8") as f:
        config = TrainConfig.from_dict(json.loads(f.readline())["config"])
    doc = new_session(f"{home}/lab.grpo", config)
    os.makedirs(doc.run_dir)
    shutil.copy(FIXTURE, doc.events_path)
    model = SessionModel(doc)
    model.trust_checker()
    view = RewardLabView(model)
    view.resize(1180, 780)
    view.show()
    view.open_step(1)
    app.processEvents()
    edits = [
        lambda: view.accuracy.spin.setValue(0.5),
        lambda: view.format.spin.setValue(1.0),
        lambda: view.checker_mode.setCurrentText("lenient"),
        lambda: view.scale_box.setCurrentText("batch"),
        lambda: view.std_box.setCurrentText("sample"),
        lambda: view.length_norm.setChecked(False),
        lambda: view.accuracy.spin.setValue(1.0),
        lambda: view.format.spin.setValue(0.2),
        lambda: view.checker_mode.setCurrentText("strict"),
        lambda: view.scale_box.setCurrentText("group"),
        lambda: view.std_box.setCurrentText("population"),
        lambda: view.length_norm.setChecked(True),
    ]
    for edit in edits:  # warm: both checker modes cached
        edit()
    samples = []
    for i in range(repeat):
        edits[i % len(edits)]()
        samples.append(view.last_ms)
        app.processEvents()
    # The custom checker: first run (process start + 64 sandboxed calls), then a cached recompute.
    first, cached = [], []
    for k in range(3):
        source = CHECKER + f"# edit {k}\n"
        view.lab.close()
        t0 = time.perf_counter()
        calls = view.lab.run_checker(source, 5.0, 2048)
        first.append((time.perf_counter() - t0) * 1000)
        assert calls == 64
        view.checker_box.editor.setPlainText(source)
        view.checker_box.flush()
        cached.append(view.last_ms)
    view.lab.close()
    return {
        "view": _ms(samples),
        "checker_first_run_ms": [round(x, 1) for x in first],
        "checker_cached_view_ms": [round(x, 2) for x in cached],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    rows, config, config_cls = _load()
    out = {"rollouts": len(rows), "repeat": args.repeat}
    out.update(bench_model(rows, config_cls.from_dict(config), args.repeat))
    out.update(bench_view(args.repeat))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
