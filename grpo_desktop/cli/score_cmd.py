"""`grpo-desktop score`: the reward dry-run, a config's rewards on a file of sample completions.

A silently broken reward wastes a whole run, so this scores hand-written or collected completions
before training. A thin layer over `engine.rewards.score_file` (which documents the input and
output lines): one JSON line per input line on stdout or in --output, the summary (mean per part,
errors, unscored) on stderr. The whole file is checked first: bad lines are named and nothing is
written (exit 2). --output is written to a temporary file and renamed, so it is whole or absent.
Custom checker code passes the same trust gate as `train`.

    grpo-desktop score --demo --input samples.jsonl > scored.jsonl
    grpo-desktop score my.json --input samples.jsonl --output scored.jsonl
    grpo-desktop score my-run.grpo --input samples.jsonl --trust-checker
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback

from grpo_desktop.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_settings_argument,
    add_trust_checker_argument,
    checker_refusal,
    fail,
)

HELP = (
    "Score sample completions with a config's rewards before training (a silently broken reward "
    "is the most common way to waste a GRPO run). Each line of --input is one JSON object: "
    '{"completion": "...", "answer": "18"} plus an optional "prompt"; the answer is read like a '
    "dataset's answer column (GSM8K's \"... #### 18\" works). Each output line, in the same order: "
    '{"rewards": {"accuracy": 1.0, "format": 1.0}, "reward": 1.2, "extracted": "18", '
    '"reasons": {}, "error": null}. Blank lines are skipped. A file with any bad line (not JSON, '
    "no completion or answer, wrong types) is refused as a whole, naming the lines, with exit 2. "
    "Exit codes: 0 scored, 1 internal error, 2 bad input."
)


def add_parser(sub) -> None:
    """The `score` subcommand's arguments (called by the dispatcher)."""
    s = sub.add_parser(
        "score",
        help="score a JSONL file of sample completions with a config's rewards",
        description=HELP,
    )
    add_settings_argument(s)
    s.add_argument("--demo", action="store_true", help="the built-in demo's rewards")
    s.add_argument(
        "--input", required=True, metavar="FILE.jsonl", help="the samples, one JSON object a line"
    )
    s.add_argument(
        "--output", metavar="OUT.jsonl", help="write the scores here (default: standard output)"
    )
    add_trust_checker_argument(s)
    s.set_defaults(handler=cmd_score)


def _load_config(args):
    from grpo_desktop.engine.config import load_config
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.session.document import is_session, load_session

    if args.demo:
        return demo_config(), "the demo"
    if is_session(args.config):
        return load_session(args.config).config, args.config
    return load_config(args.config), args.config


def cmd_score(args) -> int:
    from grpo_desktop.engine.errors import UserError
    from grpo_desktop.engine.rewards.score_file import read_score_file, reward_problems

    if args.demo == bool(args.config):
        return fail("give a config file or a session folder, or --demo (one of them).")
    if args.output and os.path.abspath(args.output) == os.path.abspath(args.input):
        return fail(f"--output {args.output} is the input file; choose another file.")
    try:
        cfg, source = _load_config(args)
        problems = reward_problems(cfg.rewards)
        if problems:
            return fail("the reward settings need fixing:\n  - " + "\n  - ".join(problems))
        refusal = checker_refusal(cfg, source, args.trust_checker)
        if refusal:
            return fail(refusal)
        rows = read_score_file(args.input)
        results = _write(cfg.rewards, rows, args.output, cfg.data)
    except UserError as exc:
        return fail(str(exc))
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return EXIT_OK
    except Exception:  # a bug: say so, with the traceback to report
        traceback.print_exc()
        return fail("scoring failed with an internal error (above); please report it.", EXIT_FAILED)
    _print_summary(results, source, cfg.rewards)
    return EXIT_OK


def _write(rewards, rows, output: str | None, data=None) -> list[dict]:
    """Score the rows and write one JSON line each; returns the results."""
    from grpo_desktop.engine.rewards.score_file import ScoreFileError, score_rows

    results: list[dict] = []
    if output is None:
        for result in score_rows(rewards, rows, data=data):
            results.append(result)
            sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return results
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ScoreFileError(f"The folder for --output does not exist: {folder}.")
    fd, tmp = tempfile.mkstemp(prefix=".score-", suffix=".jsonl", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for result in score_rows(rewards, rows, data=data):
                results.append(result)
                fh.write(json.dumps(result, ensure_ascii=False) + "\n")
        os.replace(tmp, output)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return results


def _print_summary(results: list[dict], source: str, rewards) -> None:
    from grpo_desktop.engine.rewards.score_file import summarize, weights_of

    summary, weights = summarize(results), weights_of(rewards)

    def show(value) -> str:
        return "–" if value is None else f"{value:.3f}"

    count = summary["count"]
    lines = [f"Scored {count:,} sample{'' if count == 1 else 's'} with the rewards of {source}:"]
    for name, mean in summary["means"].items():
        missing = summary["unscored_parts"][name]
        extra = f"  ({missing:,} unscored)" if missing else ""
        lines.append(f"  {name:<9} mean {show(mean)}  (weight {weights.get(name, 0):g}){extra}")
    lines.append(f"  {'reward':<9} mean {show(summary['reward_mean'])}  (weighted total)")
    lines.append(
        f"  checker errors: {summary['errors']:,} · samples with no score: {summary['unscored']:,}"
    )
    for reason, count in list(summary["reasons"].items())[:5]:
        lines.append(f"  {count:,} × {reason}")
    print("\n".join(lines), file=sys.stderr)
