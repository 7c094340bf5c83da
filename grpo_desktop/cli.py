"""Command line: `grpo-desktop` opens the app; `train`, `config` work headless.

    grpo-desktop                          open the window on the built-in demo
    grpo-desktop --demo --autostart --quit-after-steps 3 --screenshot shot.png   (smoke check)
    grpo-desktop train --demo --out runs/demo --steps 20
    grpo-desktop train my.json --out runs/a [--steps N]
    grpo-desktop train --resume runs/a [--steps N]
    grpo-desktop train my-run.grpo [--resume] [--trust-checker]   (a session saved by the app)
    grpo-desktop open my-run.grpo         open the window on a session (also: grpo-desktop my-run.grpo)
    grpo-desktop config --demo > my.json  (or --preset dapo)
    grpo-desktop eval --demo | RUN_DIR | MODEL_DIR [--n 200] [--seed S]   (one JSON line)

A session trains into its own run folder: a fresh run when it has none, else only with --resume
(continue from the last checkpoint) — never silently over a run. Custom checker code from a file
runs only when trusted here before (in the app, or with --trust-checker, which remembers it).

Exit codes: 0 finished or stopped, 1 the run failed with an internal error, 2 bad input (a
one-paragraph message, no traceback). Ctrl-C stops gracefully (checkpoint saved); twice aborts.
Heavy modules (torch, Qt) are imported only by the command that needs them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from grpo_desktop import __version__

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


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
    t.add_argument(
        "config",
        nargs="?",
        help="config JSON (see `grpo-desktop config --demo`) or a session folder (NAME.grpo)",
    )
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
    t.add_argument(
        "--trust-checker",
        action="store_true",
        help="allow the custom checker code in the session or config (Python that runs with "
        "your permissions) and remember it as trusted",
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

    o = sub.add_parser("open", help="open the window on a session folder (NAME.grpo)")
    o.add_argument("session", help="the session folder (or its session.json)")

    c = sub.add_parser("config", help="print a config as JSON for editing")
    c.add_argument("--demo", action="store_true", help="the built-in demo's config (default)")
    c.add_argument("--preset", choices=["grpo", "dr_grpo", "dapo", "gspo"], help="a named variant")
    return p


def main(argv: list[str] | None = None) -> int:
    import multiprocessing

    multiprocessing.freeze_support()  # checker child processes in a frozen (installer) build
    args = _parser().parse_args(_open_shortcut(sys.argv[1:] if argv is None else list(argv)))
    if args.self_test:
        from grpo_desktop.selftest import run_self_test

        return run_self_test()
    if args.command == "train":
        return _cmd_train(args)
    if args.command == "config":
        return _cmd_config(args)
    if args.command == "eval":
        return _cmd_eval(args)
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
    if any(a in ("train", "eval", "open", "config") for a in argv):
        return argv
    for i, arg in enumerate(argv):
        if arg.rstrip("/\\").endswith(".grpo") and (i == 0 or argv[i - 1] != "--config"):
            return [*argv[:i], "open", *argv[i:]]
    return argv


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    print(f"grpo-desktop: {message}", file=sys.stderr)
    return code


def _cmd_config(args) -> int:
    from grpo_desktop.engine.config import preset
    from grpo_desktop.engine.demo import demo_config

    cfg = demo_config()
    if args.preset:
        cfg = preset(args.preset, cfg)
    print(cfg.to_json())
    return EXIT_OK


def _cmd_eval(args) -> int:
    import json

    from grpo_desktop.engine.errors import UserError

    if args.demo == bool(args.target):
        return _fail("give either a model or run folder, or --demo.")
    from grpo_desktop.engine.eval_target import evaluate_target

    try:
        result = evaluate_target(
            None if args.demo else args.target,
            n=args.n,
            seed=args.seed,
            sample_t1=not args.no_sample,
        )
    except UserError as exc:
        return _fail(str(exc))
    print(json.dumps(result))
    return EXIT_OK


def _load_train_config(args):
    from grpo_desktop.engine.config import load_config, validate
    from grpo_desktop.engine.demo import demo_config
    from grpo_desktop.engine.trainer import read_run_config

    if args.resume:
        cfg = read_run_config(args.resume)
    elif args.demo:
        cfg = demo_config()
    elif args.config:
        cfg = load_config(args.config)
    else:
        raise _Usage("give a config file, --demo, or --resume DIR.")
    if args.steps is not None:
        cfg = cfg.replace(run={"max_steps": args.steps})
    if getattr(args, "seed", None) is not None and not args.resume:
        cfg = cfg.replace(run={"seed": args.seed})
    problems = validate(cfg)
    if problems:
        raise _Usage("the settings need fixing:\n  - " + "\n  - ".join(problems))
    return cfg


class _Usage(Exception):
    pass


def _cmd_train(args) -> int:
    from grpo_desktop.engine.errors import UserError
    from grpo_desktop.session.document import is_session

    target = args.resume if isinstance(args.resume, str) else None
    if args.config and target:
        return _fail("give a config or session, or --resume DIR, not both.")
    if (args.config or target) and is_session(args.config or target):
        return _cmd_train_session(args, args.config or target)
    if args.resume is True:
        return _fail(
            "--resume without a folder continues a session: `grpo-desktop train SESSION "
            "--resume`. To continue a run folder, name it: --resume DIR."
        )
    try:
        cfg = _load_train_config(args)
    except (UserError, _Usage) as exc:
        return _fail(str(exc))
    source = os.path.join(args.resume, "config.json") if args.resume else args.config
    refusal = _checker_refusal(cfg, source, args.trust_checker)
    if refusal:
        return _fail(refusal)
    out = args.resume or args.out
    if not out:
        return _fail("give a run folder with --out DIR (events and checkpoints are saved there).")
    if not args.resume and os.path.exists(os.path.join(out, "events.jsonl")):
        return _fail(
            f"{out} already holds a run. Continue it with --resume {out}, or choose a new --out folder."
        )
    return _train_loop(cfg, out, bool(args.resume), args.quiet)


def _checker_refusal(cfg, source: str | None, allow: bool) -> str:
    """Why the custom checker in `cfg` (read from `source`) may not run; '' when it may.
    With `allow` (--trust-checker) it may, and is remembered as trusted."""
    from grpo_desktop.session.trust import TrustStore

    code = cfg.rewards.custom_checker
    store = TrustStore()
    if store.is_trusted(code):
        return ""
    if allow:
        store.trust(code)
        return ""
    return (
        f"{source} includes custom checker code (Python that would run on this computer with "
        "your permissions) that you have not trusted here. Read it first (config → rewards → "
        "custom_checker, or open it in the app, which shows it); to run it, add --trust-checker "
        "(remembered for this exact code)."
    )


def _cmd_train_session(args, path: str) -> int:
    """`train SESSION`: a fresh run into the session's run folder, or with --resume continue it
    from its last checkpoint (from step 0 when it has none). Never over a run silently."""
    from grpo_desktop.engine.config import validate
    from grpo_desktop.session.document import SessionError, load_session, save_session
    from grpo_desktop.session.history import RunHistory
    from grpo_desktop.session.run_state import clear_run, describe, run_state

    resume = bool(args.resume)
    if args.out:
        return _fail(f"{path} is a session: it trains into its own run folder, so leave out --out.")
    try:
        doc = load_session(path)
        history = RunHistory.from_events_file(doc.events_path) if doc.has_run() else None
    except SessionError as exc:
        return _fail(str(exc))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _fail(f"The run's history {doc.events_path} cannot be read ({exc}).")
    cfg = doc.config
    if args.steps is not None:
        cfg = cfg.replace(run={"max_steps": args.steps})
    if args.seed is not None and not resume:
        cfg = cfg.replace(run={"seed": args.seed})
    problems = validate(cfg)
    if problems:
        return _fail("the session's settings need fixing:\n  - " + "\n  - ".join(problems))
    refusal = _checker_refusal(cfg, path, args.trust_checker)
    if refusal:
        return _fail(refusal)
    state = run_state(history, doc.run_dir) if history is not None else None
    if state is not None and state.has_steps and not resume:
        return _fail(
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
        return _fail(str(exc))
    return _train_loop(cfg, doc.run_dir, resume, args.quiet)


def _train_loop(cfg, out: str, resume: bool, quiet: bool) -> int:
    """Train into the run folder `out` (Ctrl-C stops after the step); returns the exit code."""
    from grpo_desktop.engine.control import TrainControl
    from grpo_desktop.engine.trainer import train

    control = TrainControl()
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum, frame):
        if control.should_stop():
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        print("\nStopping after this step (Ctrl-C again to abort)...", file=sys.stderr)
        control.stop()

    signal.signal(signal.SIGINT, on_sigint)
    bar = _Progress(enabled=not quiet)
    finished = None
    try:
        for event in train(cfg, control, run_dir=out, resume=resume):
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
            return _fail(msg, EXIT_FAILED)
        return _fail(msg, EXIT_BAD_INPUT)
    print(f"{finished.message} Run folder: {out}", file=sys.stderr)
    return EXIT_OK


class _Progress:
    """One status line on stderr: step, bar, reward, held-out accuracy, speed and ETA."""

    def __init__(self, enabled: bool = True, width: int = 24):
        self.enabled, self.width = enabled, width
        self.tty = sys.stderr.isatty()
        self.step_times: list[float] = []
        self.accuracy = None

    def update(self, event) -> None:
        if not self.enabled:
            return
        kind = event.type
        if kind == "run_started":
            self._print(
                f"Training {event.model} on {event.device}, steps {event.start_step}..{event.total_steps}"
            )
        elif kind == "eval":
            self.accuracy = event.accuracy
            self._print(
                f"held-out accuracy at step {event.step}: {event.accuracy:.1%} "
                f"(format {event.format_rate:.1%}, n={event.n})"
            )
        elif kind == "log" and event.level == "warning":
            self._print(f"warning: {event.message}")
        elif kind == "step":
            self._line(event)

    def _line(self, event) -> None:
        self.step_times.append(event.metrics.get("step_time") or 0.0)
        recent = self.step_times[-20:]
        per_step = sum(recent) / len(recent)
        eta = per_step * (event.total_steps - event.step)
        frac = event.step / max(event.total_steps, 1)
        fill = int(frac * self.width)
        reward = event.metrics.get("reward")
        acc = "" if self.accuracy is None else f" acc {self.accuracy:.0%}"
        text = (
            f"step {event.step}/{event.total_steps} [{'#' * fill}{'.' * (self.width - fill)}] "
            f"reward {reward if reward is None else f'{reward:.3f}'}{acc} "
            f"{per_step:.1f}s/step ETA {int(eta // 60)}:{int(eta % 60):02d}"
        )
        if self.tty:
            sys.stderr.write("\r" + text.ljust(100))
            sys.stderr.flush()
        else:
            print(text, file=sys.stderr)

    def _print(self, text: str) -> None:
        if self.tty:
            sys.stderr.write("\r" + " " * 100 + "\r")
        print(text, file=sys.stderr)

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")


if __name__ == "__main__":
    sys.exit(main())
