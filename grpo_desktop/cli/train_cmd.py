"""`grpo-desktop train`: a headless run from a config, the demo, a run folder or a session.

Events, config.json and checkpoints go to the run folder, a status line to stderr. A session
trains into its own run folder: a fresh run when it has none, else only with --resume (continue
from the last checkpoint), never silently over a run. Custom checker code and a model's own code
run only when trusted (--trust-checker, --trust-remote-code remember it). Ctrl-C stops after the
step (checkpoint saved); twice aborts. Exit 0 finished or stopped, 1 internal error, 2 bad input
(--resume on a folder where nothing was saved: the run never started, and how to start it).

    grpo-desktop train --demo --out runs/demo --steps 20
    grpo-desktop train my.json --out runs/a [--steps N]
    grpo-desktop train --resume runs/a [--steps N]
    grpo-desktop train my-run.grpo [--resume] [--trust-checker]
"""

from __future__ import annotations

import os
import signal
import sys

from grpo_desktop.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    Usage,
    add_settings_argument,
    add_trust_checker_argument,
    checker_refusal,
    fail,
    remote_code_gate,
)
from grpo_desktop.cli.progress import Progress


def add_parser(sub) -> None:
    """The `train` subcommand's arguments (called by the dispatcher)."""
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
    t.set_defaults(handler=cmd_train)


def _load_train_config(args):
    from grpo_desktop.engine.config import load_config, validate
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.engine.runs.files import config_path, read_run_config

    if args.resume:
        if _never_started(args.resume):
            raise Usage(
                f"The run at {args.resume} never started (nothing was saved there), so there is "
                "nothing to resume. Start it with: grpo-desktop train CONFIG --out "
                f"{args.resume} (or --demo --out {args.resume} for the demo)."
            )
        ended = None
        if not os.path.isfile(config_path(args.resume)):
            ended = _ended_before_first_step(args.resume)
        if ended is not None:
            raise Usage(
                f"{args.resume} holds only a run that ended before its first step ({ended}), so "
                "there is nothing to resume. Start it again with `grpo-desktop train CONFIG --out "
                f"{args.resume}` (the folder is reused)."
            )
        cfg = read_run_config(args.resume)
    elif args.demo:
        cfg = demo_config()
    elif args.config:
        cfg = load_config(args.config)
    else:
        raise Usage("give a config file, --demo, or --resume DIR.")
    if args.steps is not None:
        cfg = cfg.replace(run={"max_steps": args.steps})
    if getattr(args, "seed", None) is not None and not args.resume:
        cfg = cfg.replace(run={"seed": args.seed})
    problems = validate(cfg)
    if problems:
        raise Usage("the settings need fixing:\n  - " + "\n  - ".join(problems))
    return cfg


def cmd_train(args) -> int:
    from grpo_desktop.engine.errors import UserError
    from grpo_desktop.engine.runs.files import config_path, events_path
    from grpo_desktop.session.document import is_session

    target = args.resume if isinstance(args.resume, str) else None
    if args.config and target:
        return fail("give a config or session, or --resume DIR, not both.")
    if (args.config or target) and is_session(args.config or target):
        return _train_session(args, args.config or target)
    if args.resume is True:
        return fail(
            "--resume without a folder continues a session: `grpo-desktop train SESSION "
            "--resume`. To continue a run folder, name it: --resume DIR."
        )
    try:
        cfg = _load_train_config(args)
    except (UserError, Usage) as exc:
        return fail(str(exc))
    source = config_path(args.resume) if args.resume else args.config
    refusal = checker_refusal(cfg, source, args.trust_checker)
    if refusal:
        return fail(refusal)
    run_dir = args.resume if args.resume else None  # resuming loads one of its checkpoints
    refusal, remote_code = remote_code_gate(cfg, source, run_dir, args.trust_remote_code)
    if refusal:
        return fail(refusal)
    out = args.resume or args.out
    if not out:
        return fail("give a run folder with --out DIR (events and checkpoints are saved there).")
    events = events_path(out)
    if not args.resume and os.path.exists(events):
        ended = _ended_before_first_step(out)
        if ended is None:
            return fail(
                f"{out} already holds a run. Continue it with --resume {out}, or choose a new "
                "--out folder."
            )
        from grpo_desktop.engine.events import truncate_events_after

        print(f"{out} holds a run that ended before its first step ({ended}): starting it again "
              "there.", file=sys.stderr)  # fmt: skip
        try:
            truncate_events_after(events, 0)  # its log, written by the trainer, starts afresh
        except (OSError, UserError) as exc:
            return fail(f"Cannot start again in {out}: {exc}")
    return _train_loop(cfg, out, bool(args.resume), args.quiet, remote_code)


def _never_started(run_dir: str) -> bool:
    """Whether `run_dir` holds nothing of a run: missing, or without its config.json and its
    events.jsonl (a run killed before it wrote either; a file there is no run either)."""
    from grpo_desktop.engine.runs.files import config_path, events_path

    if not os.path.isdir(run_dir):
        return not os.path.exists(run_dir)
    return not (os.path.exists(config_path(run_dir)) or os.path.exists(events_path(run_dir)))


def _ended_before_first_step(run_dir: str) -> str | None:
    """How the run in `run_dir` ended when it never finished a step and saved no checkpoint
    (e.g. it failed during setup: a wrong data path); None when it holds steps, checkpoints or a
    log that is not a run's."""
    from grpo_desktop.engine.events import read_events
    from grpo_desktop.engine.runs.files import events_path
    from grpo_desktop.engine.runs.layout import list_checkpoints

    if list_checkpoints(run_dir):
        return None
    try:
        events = read_events(events_path(run_dir))
    except (OSError, ValueError, RecursionError):  # (a line nested thousands deep)
        return None
    if not events or any(e.type in ("step", "rollouts", "checkpoint") for e in events):
        return None
    finished = [e for e in events if e.type == "run_finished"]
    return finished[-1].message.strip().rstrip(".") if finished else "it was interrupted"


def _train_session(args, path: str) -> int:
    """`train SESSION`: a fresh run into the session's run folder, or with --resume continue it
    from its last checkpoint (from step 0 when it has none). Never over a run silently."""
    from grpo_desktop.engine.config import validate
    from grpo_desktop.session.document import SessionError, load_session, save_session
    from grpo_desktop.session.history import RunHistory
    from grpo_desktop.session.run_state import clear_run, describe, run_state

    resume = bool(args.resume)
    if args.out:
        return fail(f"{path} is a session: it trains into its own run folder, so leave out --out.")
    try:
        doc = load_session(path)
    except SessionError as exc:
        return fail(str(exc))
    try:
        history = RunHistory.from_events_file(doc.events_path) if doc.has_run() else None
    except OSError as exc:
        return fail(f"Cannot read the run's history {doc.events_path}: {exc.strerror}.")
    except (ValueError, KeyError, TypeError) as exc:
        return fail(
            f"The run's history {doc.events_path} is damaged ({exc}), so the run cannot be "
            "continued. Nothing was changed."
        )
    cfg = doc.config
    if args.steps is not None:
        cfg = cfg.replace(run={"max_steps": args.steps})
    if args.seed is not None and not resume:
        cfg = cfg.replace(run={"seed": args.seed})
    problems = validate(cfg)
    if problems:
        return fail("the session's settings need fixing:\n  - " + "\n  - ".join(problems))
    refusal = checker_refusal(cfg, path, args.trust_checker)
    if refusal:
        return fail(refusal)
    run_dir = doc.run_dir if resume else None  # resuming loads one of its checkpoints
    refusal, remote_code = remote_code_gate(cfg, path, run_dir, args.trust_remote_code)
    if refusal:
        return fail(refusal)
    state = run_state(history, doc.run_dir) if history is not None else None
    if state is not None and state.has_steps and not resume:
        return fail(
            f"{path} already holds a run. {describe(state, cfg.run.max_steps)} Continue it with "
            f"`grpo-desktop train {path} --resume` (add --steps N to train longer), or start "
            "over in a copy of the session (Save As in the app)."
        )
    try:
        if not resume:
            clear_run(doc.run_dir)
        os.makedirs(doc.run_dir, exist_ok=True)
        doc.config, doc.trained = cfg, True
        save_session(doc)  # the session names its run and the settings it ran with
    except (OSError, SessionError) as exc:
        return fail(str(exc))
    return _train_loop(cfg, doc.run_dir, resume, args.quiet, remote_code)


def _train_loop(cfg, out: str, resume: bool, quiet: bool, remote_code=None) -> int:
    """Train into the run folder `out` (Ctrl-C stops after the step); returns the exit code.
    `remote_code`: the permission for the model's own code, from `remote_code_gate`."""
    from grpo_desktop.engine.control import TrainControl
    from grpo_desktop.engine.grpo.trainer import train

    control = TrainControl()
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum, frame):
        if control.should_stop():
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        print("\nStopping after this step (Ctrl-C again to abort)...", file=sys.stderr)
        control.stop()

    signal.signal(signal.SIGINT, on_sigint)
    bar = Progress(enabled=not quiet)
    finished = None
    try:
        for event in train(cfg, control, run_dir=out, resume=resume, remote_code=remote_code):
            bar.update(event)
            if event.type == "run_finished":
                finished = event
    finally:
        signal.signal(signal.SIGINT, previous)
        bar.close()
    if finished is None or finished.status == "failed":
        msg = finished.message if finished else "the run ended without finishing."
        if finished is not None and finished.error:
            print(finished.error, file=sys.stderr)
            return fail(msg, EXIT_FAILED)
        return fail(msg, EXIT_BAD_INPUT)
    print(f"{finished.message} Run folder: {out}", file=sys.stderr)
    return EXIT_OK
