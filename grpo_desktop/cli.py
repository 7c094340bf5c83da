"""Command line: `grpo-desktop` opens the app; `train`, `config` work headless.

    grpo-desktop                          open the window on the built-in demo
    grpo-desktop --demo --autostart --quit-after-steps 3 --screenshot shot.png   (smoke check)
    grpo-desktop train --demo --out runs/demo --steps 20
    grpo-desktop train my.json --out runs/a [--steps N]
    grpo-desktop train --resume runs/a [--steps N]
    grpo-desktop config --demo > my.json  (or --preset dapo)
    grpo-desktop eval --demo | RUN_DIR | MODEL_DIR [--n 200] [--seed S]   (one JSON line)

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
    t.add_argument("config", nargs="?", help="config JSON (see `grpo-desktop config --demo`)")
    t.add_argument("--demo", action="store_true", help="train the built-in demo")
    t.add_argument("--out", help="run folder for events.jsonl, config.json and checkpoints")
    t.add_argument("--steps", type=int, help="total number of steps (overrides the config)")
    t.add_argument(
        "--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint"
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

    c = sub.add_parser("config", help="print a config as JSON for editing")
    c.add_argument("--demo", action="store_true", help="the built-in demo's config (default)")
    c.add_argument("--preset", choices=["grpo", "dr_grpo", "dapo", "gspo"], help="a named variant")
    return p


def main(argv: list[str] | None = None) -> int:
    import multiprocessing

    multiprocessing.freeze_support()  # checker child processes in a frozen (installer) build
    args = _parser().parse_args(argv)
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

    return run_app(
        config_path=None if args.demo else args.config,
        autostart=args.autostart,
        quit_after_steps=args.quit_after_steps,
        screenshot=args.screenshot,
    )


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

    try:
        cfg = _load_train_config(args)
    except (UserError, _Usage) as exc:
        return _fail(str(exc))
    out = args.resume or args.out
    if not out:
        return _fail("give a run folder with --out DIR (events and checkpoints are saved there).")
    if not args.resume and os.path.exists(os.path.join(out, "events.jsonl")):
        return _fail(
            f"{out} already holds a run. Continue it with --resume {out}, or choose a new --out folder."
        )
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
    bar = _Progress(enabled=not args.quiet)
    finished = None
    try:
        for event in train(cfg, control, run_dir=out, resume=bool(args.resume)):
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
