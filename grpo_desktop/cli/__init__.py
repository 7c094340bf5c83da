"""The `grpo-desktop` command: opens the window, or runs one subcommand headless.

Each subcommand lives in `cli/<subcommand>_cmd.py` (train, eval, score, estimate, export, open,
config; the suffix keeps `eval` and `open` from shadowing Python's builtins) and exposes
`add_parser(subparsers)`, which builds its parser and sets `handler`; this module only builds the
top-level parser, adds the subcommands and calls the handler. Without a subcommand, the window
opens (`grpo-desktop my-run.grpo` means `open my-run.grpo`, for file managers).

Every subcommand: JSON on stdout for scripts, human text on stderr, exit codes 0 ok, 1 internal
error, 2 bad input (a one-paragraph message, no traceback). Subcommand modules import only light
modules at the top, so `grpo-desktop --help` loads neither torch nor Qt. The window and
--self-test first ask whether a display can be reached (ui/x_display.py): a DISPLAY with no X
server behind it is a message and exit 2, not Qt's abort.

    grpo-desktop --help                   the subcommands; `grpo-desktop train --help` for one
    grpo-desktop --demo --autostart --quit-after-steps 3 --screenshot shot.png   (smoke check)
"""

from __future__ import annotations

import argparse
import sys

from grpo_desktop import __version__
from grpo_desktop.cli import (
    config_cmd,
    estimate_cmd,
    eval_cmd,
    export_cmd,
    open_cmd,
    score_cmd,
    train_cmd,
)
from grpo_desktop.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "main"]
# In the order `grpo-desktop --help` lists them.
_MODULES = (train_cmd, eval_cmd, score_cmd, estimate_cmd, export_cmd, open_cmd, config_cmd)
SUBCOMMANDS = ("train", "eval", "score", "estimate", "export", "open", "config")


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
    for module in _MODULES:
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    import multiprocessing

    multiprocessing.freeze_support()  # libraries that spawn workers (math-verify on Windows)
    args = _parser().parse_args(_open_shortcut(sys.argv[1:] if argv is None else list(argv)))
    if args.self_test:
        from grpo_desktop.selftest import run_self_test
        from grpo_desktop.ui.x_display import display_problem

        problem = display_problem(unset_is_a_problem=False)  # no DISPLAY: it runs offscreen
        if problem:
            print(f"grpo-desktop: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return run_self_test()
    handler = getattr(args, "handler", None)
    if handler is not None:
        from grpo_desktop.cli.progress import print_imports

        print_imports()
        return handler(args)
    from grpo_desktop.ui.app import run_app

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
