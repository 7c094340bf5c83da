"""The estimate before Start against measured peak RSS and seconds per step, on five shapes.

For each shape, this process asks `estimate_run` about the settings as a user would (free RAM as
it is now, prompt length measured from the data), then one worker process (bench/memory.py's
`--worker`, so peak RSS is that run's own) trains two real GRPO steps. Printed: estimated and
measured peak RSS with the error, estimated and measured s/step (the second step, without model
loading), the rows per pass both chose, and the load average beside them (the CPU is shared).
Shapes (engine/models/shapes.py, random weights, cached under ~/.cache/grpo-desktop/bench/):
qwen-lora, qwen-full, qwen-qlora (Qwen2.5-0.5B-shaped, 2 layers), llama-lora (Llama-3-shaped)
and demo. Target: peak RSS within ±25 %. CPU only; bench/gpu.py --all checks it on CUDA.

    nice -n 10 python bench/estimate.py                 # all shapes, a few minutes each
    python bench/estimate.py --shapes qwen-lora,demo --json est.json
    python bench/estimate.py --from est.json            # re-estimate against saved measurements
    python bench/estimate.py --baseline                 # RSS of a process that only imports
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
TIMEOUT_S = 1800
SHAPES = ("qwen-lora", "qwen-full", "qwen-qlora", "llama-lora", "demo")


def _folder(shape: str) -> str:
    cache = os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "grpo-desktop", "bench"
    )
    folder = os.path.join(cache, f"{shape}-2l-seed0")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        from grpo_desktop.engine.models.shapes import build_shaped

        build_shaped(folder, shape, layers=2, seed=0)
    return folder


def spec(name: str, steps: int = 2) -> dict:
    """TrainConfig.replace sections for the named measurement."""
    run = {"max_steps": steps, "eval_every": 0, "checkpoint_every": 1000, "seed": 0}
    if name == "demo":
        from grpo_desktop.engine.config.demo import demo_config

        cfg = demo_config().to_dict()
        cfg.pop("schema_version")
        cfg["run"].update(run)
        cfg["algorithm"]["min_completion_length"] = cfg["algorithm"]["max_completion_length"]
        return cfg
    shape = "llama-3-shaped" if name.startswith("llama") else "qwen2.5-0.5b-shaped"
    if shape == "qwen2.5-0.5b-shaped":
        from bench.memory import model_folder

        folder = model_folder(2)
    else:
        folder = _folder(shape)
    algorithm = {
        "prompts_per_step": 2,
        "num_generations": 8,
        "max_completion_length": 64,
        "min_completion_length": 64,
        "beta": 0.04,
    }
    out = {
        "model": {"name_or_path": folder},
        "data": {"eval_size": 0},
        "algorithm": algorithm,
        "lora": {"enabled": not name.endswith("full")},
        "run": run,
    }
    if name.endswith("qlora"):
        out["quantization"] = {"mode": "4bit"}
    return out


def measure(name: str, sections: dict) -> dict:
    """One real run in its own process (bench/memory.py's worker)."""
    load = os.getloadavg()[0]
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = [sys.executable, os.path.join(HERE, "memory.py"), "--worker", json.dumps(sections)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["load"] = (load, os.getloadavg()[0])
    return out


def estimate(sections: dict) -> dict:
    """The estimate as a user gets it now: free RAM and the CPU's speed measured afresh (the
    machine's load changes between runs)."""
    from grpo_desktop.engine.config import TrainConfig
    from grpo_desktop.engine.estimate import fit as module
    from grpo_desktop.engine.estimate.fit import estimate_run

    module._cpu_speed = None

    return estimate_run(TrainConfig().replace(**sections), device="cpu")


BASELINE = (
    "import resource, sys, torch, transformers, peft\n"
    "from transformers import Qwen2ForCausalLM, LlamaForCausalLM, PreTrainedTokenizerFast\n"
    "import grpo_desktop.engine.grpo.trainer, grpo_desktop.engine.models.loading\n"
    "if sys.argv[1] == 'bnb':\n"
    "    import bitsandbytes as bnb\n"
    "    kw = {'quant_type': 'nf4'}\n"
    "    lin = bnb.nn.Linear4bit(896, 4864, bias=False, compute_dtype=torch.float32, **kw)\n"
    "    lin.weight = bnb.nn.Params4bit(torch.randn(4864, 896), requires_grad=False, **kw)\n"
    "    lin.weight = lin.weight._quantize('cpu')\n"
    "    x = torch.randn(64, 896, requires_grad=True)\n"
    "    lin(x).sum().backward()\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
)


def baseline(kind: str = "plain") -> float:
    """Peak RSS (MiB) of a process that imports what a run imports and loads nothing; with
    kind "bnb" also one bitsandbytes 4-bit layer's forward and backward (a 17 MiB weight)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", BASELINE, kind], env=env, capture_output=True, text=True
    )
    return float(proc.stdout.strip().splitlines()[-1])


def describe(name: str, sections: dict) -> str:
    a = sections["algorithm"]
    mode = "4-bit QLoRA" if "qlora" in name else ("LoRA" if sections["lora"]["enabled"] else "full")
    return (
        f"{mode}, β {a['beta']}, B×G {a['prompts_per_step']}×{a['num_generations']}, "
        f"C {a['max_completion_length']}"
    )


def row(name: str, sections: dict, measured: dict, est: dict) -> dict:
    peak = measured["peak_rss_mb"] * 2**20
    total = est["memory"]["total"]
    return {
        "shape": name,
        "settings": describe(name, sections),
        "est_mib": total / 2**20,
        "measured_mib": measured["peak_rss_mb"],
        "error_pct": 100.0 * (total - peak) / peak,
        "est_s": est["seconds_per_step"],
        "measured_s": measured["step_times"][-1],
        "rows": (est["rows_per_pass"], measured["rows_per_pass"][-1]),
        "load": measured["load"],
        "parts_mib": {
            k: round(v / 2**20)
            for k, v in est["memory"].items()
            if isinstance(v, int) and k not in ("outside_total", "needed")
        },
        "phases_s": measured["phases"][-1],
        "est_detail_s": est["seconds_detail"],
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| shape | settings | est. peak MiB | measured peak RSS MiB | error | est. s/step | "
        "measured s/step | rows/pass est/run | load 1m |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['settings']} | {r['est_mib']:.0f} | {r['measured_mib']:.0f} | "
            f"{r['error_pct']:+.1f} % | {r['est_s']:.1f} | {r['measured_s']:.1f} | "
            f"{r['rows'][0]}/{'-' if r['rows'][1] is None else int(r['rows'][1])} | "
            f"{r['load'][0]:.1f}→{r['load'][1]:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, of " + str(SHAPES))
    p.add_argument("--json", help="write the measurements and estimates to this file")
    p.add_argument("--from", dest="source", help="re-estimate against measurements saved by --json")
    p.add_argument("--baseline", action="store_true", help="RSS of a process that only imports")
    p.add_argument("--verbose", action="store_true", help="also print each estimate's parts")
    args = p.parse_args(argv)
    if args.baseline:
        print(f"baseline peak RSS: {baseline():.0f} MiB imports only, "
              f"{baseline('bnb'):.0f} MiB with a bitsandbytes 4-bit layer")  # fmt: skip
        return 0
    saved = {}
    if args.source:
        with open(args.source, encoding="utf-8") as fh:
            saved = {r["shape"]: r for r in json.load(fh)}
    rows, records = [], []
    for name in [s.strip() for s in args.shapes.split(",") if s.strip()]:
        if name not in SHAPES:
            raise SystemExit(f"unknown shape {name}: choose from {', '.join(SHAPES)}")
        sections = spec(name)
        est = estimate(sections)  # just before the run, at the load it will see
        measured = saved[name]["measured"] if name in saved else measure(name, sections)
        rows.append(row(name, sections, measured, est))
        records.append({"shape": name, "sections": sections, "measured": measured, "estimate": est})
        if args.json:  # after every shape, so a later failure keeps the earlier ones
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(records, fh, indent=1)
        print(table(rows[-1:]).splitlines()[-1], flush=True)
        if args.verbose:
            print("   parts", rows[-1]["parts_mib"], "\n   est s", rows[-1]["est_detail_s"],
                  "measured", rows[-1]["phases_s"], flush=True)  # fmt: skip
    print(table(rows))
    worst = max(abs(r["error_pct"]) for r in rows)
    print(f"worst_memory_error_pct={worst:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
