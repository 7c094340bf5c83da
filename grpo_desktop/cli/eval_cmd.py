"""`grpo-desktop eval`: a model's held-out accuracy, or two of a run's models side by side.

Plain eval answers the held-out problems greedily (and at temperature 1 for the format rate) with
the demo model, a run's latest checkpoint, a checkpoint folder, a TRL output folder (its final
model or newest checkpoint) or one of its checkpoint-N, or a model folder, and prints one JSON
line. With --compare A [--against B], it answers the held-out problems (or --problems FILE)
with both sides (base, a step, latest; B defaults to the checkpoint folder given, else the latest),
prints the summary as one JSON line and writes the per-problem table as CSV (--table, by default
compare-A-vs-B.csv in the current folder, never inside the run). A model's own code runs only
once trusted (--trust-remote-code allows and remembers it). Bad input exits 2 with a message.

    grpo-desktop eval --demo | RUN_DIR | MODEL_DIR [--n 200] [--seed S]
    grpo-desktop eval RUN_DIR --compare base [--against STEP] [--table FILE.csv]
"""

from __future__ import annotations

import json
import os
import sys
import time

from grpo_desktop.cli.common import EXIT_OK, fail, remote_code_gate


def add_parser(sub) -> None:
    """The `eval` subcommand's arguments, --compare's among them (called by the dispatcher)."""
    e = sub.add_parser(
        "eval", help="held-out greedy accuracy and format rate of a model or run, as one JSON line"
    )
    e.add_argument(
        "target",
        nargs="?",
        metavar="MODEL_OR_RUN_DIR",
        help="a run folder (its latest checkpoint), a checkpoint folder, a TRL output folder "
        "(its final model, else its newest checkpoint-N) or a model folder",
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
    e.add_argument(
        "--compare",
        metavar="A",
        help="compare, problem by problem, side A (base, a step such as 40, or latest) with "
        "side B (--against); prints the summary as one JSON line and writes the table",
    )
    e.add_argument(
        "--against",
        metavar="B",
        help="side B of --compare: a step or latest (default: the checkpoint folder given as "
        "the target, else the run's latest checkpoint)",
    )
    e.add_argument(
        "--table",
        metavar="FILE.csv",
        help="where --compare writes the per-problem table (default: compare-A-vs-B.csv in "
        "the current folder, e.g. compare-base-vs-step-100.csv; replaced if it exists)",
    )
    e.add_argument(
        "--problems",
        metavar="FILE",
        help="compare on the problems in this .jsonl/.json/.csv/.parquet file (the run's "
        "prompt and answer columns) instead of the held-out set",
    )
    e.set_defaults(handler=cmd_eval)


def cmd_eval(args) -> int:
    from grpo_desktop.engine.errors import UserError

    if args.compare is not None:
        return cmd_compare(args)
    given = [f"--{n}" for n in ("against", "table", "problems") if getattr(args, n) is not None]
    if given:
        return fail(f"{', '.join(given)} only go with --compare (e.g. --compare base).")
    if args.demo == bool(args.target):
        return fail("give either a model or run folder, or --demo.")
    from grpo_desktop.engine.variants.eval_target import evaluate_target, target_config

    target = None if args.demo else args.target
    try:
        cfg, _adapter, weights, _step = target_config(target, args.trust_remote_code)
        folders = [weights] if weights else []  # a checkpoint's full weights and tokenizer
        refusal, remote_code = remote_code_gate(cfg, target, None, args.trust_remote_code, folders)
        if refusal:
            return fail(refusal)
        result = evaluate_target(
            target,
            n=args.n,
            seed=args.seed,
            sample_t1=not args.no_sample,
            remote_code=remote_code,
            trust_remote_code=args.trust_remote_code,
        )
    except UserError as exc:
        return fail(str(exc))
    print(json.dumps(result))
    return EXIT_OK


def default_table_name(key_a: str, key_b: str) -> str:
    """compare-base-vs-step-100.csv: in the current folder unless --table says otherwise."""
    return f"compare-{key_a}-vs-{key_b}.csv"


class _StderrProgress:
    """'answered 40/200' on stderr, at most every two seconds (and at the end)."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last >= 2.0:
            self.last = now
            print(f"answered {done}/{total}", file=sys.stderr, flush=True)


def _run_and_side(target: str, against: str | None) -> tuple[str, str]:
    """(run folder, side B) for RUN or RUN/checkpoints/step-N (that checkpoint is side B)."""
    from grpo_desktop.engine.runs import checkpoint as ckpt

    path = os.path.abspath(os.path.expanduser(target))
    if os.path.isfile(os.path.join(path, ckpt.STATE_FILE)):
        step = str(ckpt.read_state(path)["step"])
        return os.path.dirname(os.path.dirname(path)), against or step
    return path, against or "latest"


def cmd_compare(args) -> int:
    from grpo_desktop.engine.errors import UserError
    from grpo_desktop.engine.runs.files import read_run_config
    from grpo_desktop.engine.variants.compare import compare_problems, pick_sides, run_comparison
    from grpo_desktop.engine.variants.compare_table import write_csv
    from grpo_desktop.engine.variants.run_variants import ModelVariants, run_variants

    if args.demo or not args.target:
        return fail("--compare needs a run folder (one with checkpoints), not --demo.")
    try:
        run_dir, side_b = _run_and_side(args.target, args.against)
        if not os.path.isdir(run_dir):
            return fail(f"{args.target} does not exist. Give the folder a run was saved to.")
        cfg = read_run_config(run_dir)
        variants = run_variants(run_dir)
        a, b = pick_sides(variants, args.compare, side_b, run_dir)
        examples, source = compare_problems(cfg, args.n, args.seed, args.problems)
        table = os.path.abspath(args.table or default_table_name(a.key, b.key))
        if os.path.isdir(table):
            return fail(f"--table {args.table} is a folder; give a file name such as cmp.csv.")
        if not os.path.isdir(os.path.dirname(table)):
            return fail(f"--table {table}: the folder {os.path.dirname(table)} does not exist.")
        folders = [v.weights for v in (a, b) if v.weights and not v.is_adapter]
        refusal, permission = remote_code_gate(
            cfg, args.target, run_dir, args.trust_remote_code, folders
        )
        if refusal:
            return fail(refusal)
        mv = ModelVariants(cfg, run_dir, remote_code=permission, variants=variants)
        try:
            result = run_comparison(mv, a, b, examples, source=source, progress=_StderrProgress())
        finally:
            mv.close()
        try:
            write_csv(table, result.rows)
        except OSError as exc:
            return fail(f"Cannot write the table to {table}: {exc.strerror or exc}.")
    except UserError as exc:
        return fail(str(exc))
    print(f"wrote the table ({len(result.rows)} problems) to {table}", file=sys.stderr)
    print(json.dumps({**result.to_dict(), "seed": args.seed, "table": table}))
    return EXIT_OK
