"""`grpo-desktop estimate`: will the run fit in memory, and how long will a step take?

Prints engine/estimate/fit.py's estimate before anything loads (the model's config.json is read
on the meta device), so a user learns before Start whether the settings fit this computer's free
GPU memory or RAM, and what to change when they do not (and, for a small pretrained model, the
starter's settings where they differ: engine/config/starters.py). A table by default, one JSON
line with --json; --device and --free-gb ask about another device or amount of memory. Bad input
(a missing or corrupt config, an unknown or unreachable model) is one message and exit 2.

    grpo-desktop estimate --demo
    grpo-desktop estimate my.json --json --free-gb 8
"""

from __future__ import annotations

import json
import sys

from grpo_desktop.cli.common import EXIT_OK, add_settings_argument, fail

# `grpo-desktop estimate --help` shows this.
DESCRIPTION = (
    "Prints the estimate of engine/estimate/fit.py before anything loads: the parameter count "
    "(from the model's config.json on the meta device), peak memory split into weights, adapters "
    "and optimizer, activations, logits and the sampling cache, seconds per step, against this "
    "computer's free GPU memory or RAM, what to change when it will not fit, and for a "
    "pretrained model under 1.5B parameters the small-model starter's settings where they differ "
    "(the Starter line; engine/config/starters.py). `--json` prints "
    "the whole estimate as one JSON line on stdout (the keys are listed in "
    "engine/estimate/fit.py); the table goes to stdout otherwise. `--device cpu|cuda` and "
    "`--free-gb N` ask about another device or amount of memory."
)


def add_parser(sub) -> None:
    """The `estimate` subcommand's arguments (called by the dispatcher)."""
    e = sub.add_parser(
        "estimate",
        help="estimate a run's peak memory and seconds per step before starting it",
        description=DESCRIPTION,
    )
    add_settings_argument(e)
    e.add_argument("--demo", action="store_true", help="the built-in demo's settings")
    e.add_argument("--json", action="store_true", help="print the estimate as one JSON line")
    e.add_argument("--device", choices=["cpu", "cuda"], help="the device (default: the config's)")
    e.add_argument(
        "--free-gb", type=float, metavar="N", help="compare with N GB free instead of what is free"
    )
    e.add_argument(
        "--prompt-tokens", type=int, metavar="N", help="prompt length to assume (default: measured)"
    )
    e.set_defaults(handler=cmd_estimate)


def _load_config(args):
    from grpo_desktop.engine.config import load_config
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.session.document import is_session, load_session

    if args.demo:
        return demo_config()
    if is_session(args.config):
        return load_session(args.config).config
    return load_config(args.config)


def cmd_estimate(args) -> int:
    from grpo_desktop.engine.errors import UserError

    if args.demo == bool(args.config):
        return fail("give a config file or a session folder, or --demo (one of them).")
    if args.free_gb is not None and args.free_gb < 0:
        return fail("--free-gb must be 0 or more.")
    try:
        cfg = _load_config(args)
        from grpo_desktop.engine.estimate.fit import estimate_run

        free = None if args.free_gb is None else int(args.free_gb * 1e9)
        result = estimate_run(
            cfg, free_bytes=free, device=args.device, prompt_tokens=args.prompt_tokens
        )
    except UserError as exc:
        return fail(str(exc))
    if args.json:
        print(json.dumps(result))
    else:
        print(table(result))
    sys.stdout.flush()
    return EXIT_OK


def table(r: dict) -> str:
    """The estimate as a short readable report."""
    from grpo_desktop.engine.estimate.advice import gb

    m, mem, dev = r["model"], r["memory"], r["device"]
    trainable = f"{m['trainable'] / 1e6:,.2f}M trainable"
    lines = [
        f"Model      {m['name']}: {m['params'] / 1e6:,.1f}M parameters, {trainable} "
        f"({m['layers']} layers, hidden {m['hidden']}, vocabulary {m['vocab']:,})",
        f"Device     {dev['name']} ({dev['kind']}), "
        + (f"{gb(dev['free_bytes'])} free" if dev["free_bytes"] is not None else "free unknown"),
        f"Memory at the peak (the {mem['peak_phase']} phase; the phases' parts are not added):",
    ]
    detail = ", ".join(f"{k} {gb(v)}" for k, v in mem["weights_detail"].items())
    parts = [
        ("weights", f"{gb(mem['weights'])}  ({detail})"),
        ("adapters + optimizer", gb(mem["adapters_optimizer"])),
        ("activations", f"{gb(mem['activations'])}  ({r['rows_per_pass']} rows per pass)"),
        ("logits", gb(mem["logits"])),
        ("sampling KV cache", gb(mem["kv_cache"])),
        ("sampling, other", gb(mem["sampling_other"])),
        ("optimizer step", gb(mem["optimizer_step"])),
        ("overhead", gb(mem["overhead"])),
        ("total", gb(mem["total"])),
    ]
    if mem.get("outside_total"):
        parts.append(("outside total (CUDA)", gb(mem["outside_total"])))
    lines += [f"  {name:<22} {value}" for name, value in parts]
    secs = r["seconds_detail"]
    lines.append(
        f"Step       about {r['seconds_per_step']:.1f} s (sampling {secs['sampling']:.1f} s, "
        f"training {secs['training']:.1f} s)"
    )
    if r["fits"] is None:
        lines.append("Fits?      unknown (free memory unknown)")
    else:
        verdict = "yes" if r["fits"] else "NO"
        room = r["headroom_bytes"]
        left = f"{gb(room)} to spare" if room >= 0 else f"{gb(-room)} short"
        lines.append(f"Fits?      {verdict}: {gb(mem['needed'])} needed, {left}")
    if r["advice"]:
        lines.append("To make it fit:")
        lines += [f"  - {a}" for a in r["advice"]]
    if r.get("starter"):  # a small pretrained model whose settings differ from the starter
        lines.append(f"Starter    {r['starter']['text']}")
    lines += [f"Note: {n}" for n in r["notes"]]
    return "\n".join(lines)
