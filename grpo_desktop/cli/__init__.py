"""Command line: `grpo-desktop` opens the app; `train`, `config` work headless.

    grpo-desktop                          open the window on the built-in demo
    grpo-desktop --demo --autostart --quit-after-steps 3 --screenshot shot.png   (smoke check)
    grpo-desktop train --demo --out runs/demo --steps 20
    grpo-desktop train my.json --out runs/a [--steps N]
    grpo-desktop train --resume runs/a [--steps N]
    grpo-desktop train my-run.grpo [--resume] [--trust-checker]   (a session saved by the app)
    grpo-desktop open my-run.grpo         open the window on a session (also: grpo-desktop my-run.grpo)
    grpo-desktop open TRL_OUTPUT_DIR      watch a TRL run (or RUN_DIR) read-only, live while it trains
    grpo-desktop config --demo > my.json  (or --preset dapo)
    grpo-desktop eval --demo | RUN_DIR | MODEL_DIR [--n 200] [--seed S]   (one JSON line)
    grpo-desktop eval RUN_DIR --compare base [--against STEP] [--table FILE.csv]   (before/after)
    grpo-desktop score my.json | my-run.grpo | --demo --input samples.jsonl [--output out.jsonl]
    grpo-desktop estimate my.json | my-run.grpo | --demo [--json]   (memory and time before Start)
    grpo-desktop export RUN | my-run.grpo | my.json --format adapter|merged|gguf|trl --out DIR
                          [--checkpoint STEP] [--outtype f16|q8_0] [--force]   (one JSON line)

A session trains into its own run folder: a fresh run when it has none, else only with --resume
(continue from the last checkpoint) — never silently over a run. Custom checker code from a file
runs only when trusted here before (in the app, or with --trust-checker, which remembers it).

Exit codes: 0 finished or stopped, 1 the run failed with an internal error, 2 bad input (a
one-paragraph message, no traceback). Ctrl-C stops gracefully (checkpoint saved); twice aborts.
Heavy modules (torch, Qt) are imported only by the command that needs them.
"""

from __future__ import annotations

import argparse
import sys

from grpo_desktop import __version__
from grpo_desktop.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    add_settings_argument,
    add_trust_checker_argument,
)
from grpo_desktop.cli.compare_cmd import add_compare_arguments
from grpo_desktop.cli.estimate import add_parser as estimate_parser
from grpo_desktop.cli.export_cmd import add_parser as export_parser
from grpo_desktop.cli.score import add_parser as score_parser

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "main"]
SUBCOMMANDS = ("train", "eval", "open", "config", "score", "estimate", "export")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="grpo-desktop",
        description="Fine-tune a language model with GRPO and watch it learn.",
    )
    p.add_argument("--version", action="version", version=f"grpo-desktop {__version__}")
    p.add_argument("--demo", action="store_true", help="open the window on the built-in demo")
    p.add_argument("--config", metavar="FILE", help="open the window on saved settings (JSON)")
    p.add_argument(
        "--autostart", action="store_true", help="start training as soon as the window opens"
    )
    p.add_argument(
        "--quit-after-steps",
        type=int,
        metavar="N",
        help="stop the run gracefully after N steps, then quit (0 finished or stopped, "
        "1 the run failed, 2 it could not start)",
    )
    p.add_argument(
        "--screenshot", metavar="FILE.png", help="save a screenshot of the window before quitting"
    )
    p.add_argument(
        "--self-test",
        action="store_true",
        help="check that this installation is whole (Qt, ML libraries, demo model, one training "
        "step, the window) and exit non-zero on any failure",
    )
    sub = p.add_subparsers(dest="command")

    t = sub.add_parser("train", help="train headless, writing events and checkpoints to a folder")
    add_settings_argument(t)
    t.add_argument("--demo", action="store_true", help="train the built-in demo")
    t.add_argument("--out", help="run folder for events.jsonl, config.json and checkpoints")
    t.add_argument("--steps", type=int, help="total number of steps (overrides the config)")
    t.add_argument(
        "--resume",
        nargs="?",
        const=True,
        metavar="DIR",
        help="continue the run in DIR (a run or session folder) from its last checkpoint; "
        "after a session folder, no DIR is needed",
    )
    add_trust_checker_argument(t)
    t.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow the model's own Python code (the .py files beside its config or a "
        "checkpoint's, run when model.trust_remote_code is set) and remember it as trusted",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--seed", type=int, help="seed for data order and sampling (sets run.seed)")

    e = sub.add_parser(
        "eval", help="held-out greedy accuracy and format rate of a model or run, as one JSON line"
    )
    e.add_argument(
        "target",
        nargs="?",
        metavar="MODEL_OR_RUN_DIR",
        help="a run folder (its latest checkpoint), a checkpoint folder or a model folder",
    )
    e.add_argument("--demo", action="store_true", help="evaluate the built-in demo model")
    e.add_argument("--n", type=int, default=200, help="held-out problems (default 200)")
    e.add_argument("--seed", type=int, default=0, help="which held-out problems, and sampling")
    e.add_argument(
        "--no-sample", action="store_true", help="skip the temperature-1 format rate (faster)"
    )
    e.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow the model's own Python code (a model folder's .py files, or a run's when "
        "its config sets model.trust_remote_code) and remember it as trusted",
    )
    add_compare_arguments(e)

    score_parser(sub)
    estimate_parser(sub)
    export_parser(sub)

    o = sub.add_parser(
        "open",
        help="open the window on a session folder (NAME.grpo), or on a run folder read-only: a "
        "TRL output_dir or a GRPO Desktop run, followed live while it is written",
    )
    o.add_argument("session", help="the session folder (or its session.json), or the run folder")

    c = sub.add_parser("config", help="print a config as JSON for editing")
    c.add_argument("--demo", action="store_true", help="the built-in demo's config (default)")
    c.add_argument("--preset", choices=["grpo", "dr_grpo", "dapo", "gspo"], help="a named variant")
    return p


def main(argv: list[str] | None = None) -> int:
    import multiprocessing

    multiprocessing.freeze_support()  # libraries that spawn workers (math-verify on Windows)
    args = _parser().parse_args(_open_shortcut(sys.argv[1:] if argv is None else list(argv)))
    if args.self_test:
        from grpo_desktop.selftest import run_self_test

        return run_self_test()
    if args.command == "train":
        from grpo_desktop.cli.train import cmd_train

        return cmd_train(args)
    if args.command == "config":
        from grpo_desktop.cli.config_cmd import cmd_config

        return cmd_config(args)
    if args.command == "eval":
        from grpo_desktop.cli.eval_cmd import cmd_eval

        return cmd_eval(args)
    if args.command == "score":
        from grpo_desktop.cli.score import cmd_score

        return cmd_score(args)
    if args.command == "estimate":
        from grpo_desktop.cli.estimate import cmd_estimate

        return cmd_estimate(args)
    if args.command == "export":
        from grpo_desktop.cli.export_cmd import cmd_export

        return cmd_export(args)
    from grpo_desktop.ui.app import run_app

    if args.command == "open":
        return run_app(
            session_path=args.session,
            autostart=args.autostart,
            quit_after_steps=args.quit_after_steps,
            screenshot=args.screenshot,
        )

    return run_app(
        config_path=None if args.demo else args.config,
        autostart=args.autostart,
        quit_after_steps=args.quit_after_steps,
        screenshot=args.screenshot,
    )


def _open_shortcut(argv: list[str]) -> list[str]:
    """`grpo-desktop [options] my-run.grpo` (e.g. from a file manager) means `open my-run.grpo`."""
    if any(a in SUBCOMMANDS for a in argv):
        return argv
    for i, arg in enumerate(argv):
        if arg.rstrip("/\\").endswith(".grpo") and (i == 0 or argv[i - 1] != "--config"):
            return [*argv[:i], "open", *argv[i:]]
    return argv
