"""`grpo-desktop open PATH`: the window on a session, or on a run folder read-only.

PATH is a session folder (NAME.grpo, or its session.json), or a run folder — a TRL output_dir or a
GRPO Desktop run — followed live while it is written. The top-level --autostart,
--quit-after-steps and --screenshot apply, so a script can drive the window and read the exit code.

    grpo-desktop open my-run.grpo         (also: grpo-desktop my-run.grpo)
    grpo-desktop open TRL_OUTPUT_DIR
"""

from __future__ import annotations


def add_parser(sub) -> None:
    """The `open` subcommand's arguments (called by the dispatcher)."""
    o = sub.add_parser(
        "open",
        help="open the window on a session folder (NAME.grpo), or on a run folder read-only: a "
        "TRL output_dir or a GRPO Desktop run, followed live while it is written",
    )
    o.add_argument("session", help="the session folder (or its session.json), or the run folder")
    o.set_defaults(handler=cmd_open)


def cmd_open(args) -> int:
    from grpo_desktop.ui.app import run_app

    return run_app(
        session_path=args.session,
        autostart=args.autostart,
        quit_after_steps=args.quit_after_steps,
        screenshot=args.screenshot,
    )
