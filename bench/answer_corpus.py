"""Answer checkers against the hand-graded answer corpus: agreement per category, and speed.

Scores tests/fixtures/answer_corpus.jsonl (GSM8K- and MATH-style completions, each with a human
grader's verdict) with the engine's accuracy reward at commit 13bdcbf ("old", read from git),
the default strict checker, the lenient one (last value wins; rewards hedges on purpose) and
TRL's `trl.rewards.accuracy_reward` when TRL is installed (None counts as not rewarded). Prints
each one's share of agreeing verdicts per category and overall, the hedges each rewards, and the
strict checker's time per 1,000 completions, math-verify's cache cold, then warm. Each checker
gets the reference as the data loader passes it (`data.parse_answer`: "… #### 72" -> "72").
Not a test (tests/engine/rewards/test_answer_corpus.py is); without git, "old" is skipped.

    python bench/answer_corpus.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fixtures", "answer_corpus.jsonl")
OLD_COMMIT = "13bdcbf"

Scorer = Callable[[list[str], list[str]], list[float | None]]


def load_corpus(path: str = CORPUS) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def old_checker() -> Scorer | None:
    """accuracy_reward of rewards.py at OLD_COMMIT, or None when git cannot show it."""
    try:
        source = subprocess.run(
            ["git", "show", f"{OLD_COMMIT}:grpo_desktop/engine/rewards/functions.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("_rewards_13bdcbf", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    os.unlink(f.name)
    return lambda completions, answers: module.accuracy_reward(completions, answers)


def trl_checker() -> Scorer | None:
    try:
        from trl.rewards import accuracy_reward
    except Exception:  # not installed, or its imports fail
        return None

    def score(completions: list[str], answers: list[str]) -> list[float | None]:
        messages = [[{"role": "assistant", "content": c}] for c in completions]
        return accuracy_reward(messages, answers)

    return score


def engine_checker(checker: str) -> Scorer:
    from grpo_desktop.engine.rewards.functions import accuracy_reward

    return lambda completions, answers: accuracy_reward(completions, answers, checker=checker)


def agreement(rows: list[dict], scores: list[float | None]) -> dict[str, tuple[int, int]]:
    """(agreeing, total) per category and under "overall"; None counts as 0."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row, score in zip(rows, scores):
        agree = int((score or 0.0) == row["expected"])
        for key in (row["category"], "overall"):
            out[key][0] += agree
            out[key][1] += 1
    return {k: (a, n) for k, (a, n) in out.items()}


def hedges_rewarded(rows: list[dict], scores: list[float | None]) -> tuple[int, int]:
    hedges = [(r, s) for r, s in zip(rows, scores) if r["category"].startswith("hedge_")]
    return sum(1 for r, s in hedges if (s or 0.0) > 0 and r["expected"] == 0), len(hedges)


def time_per_1000(rows: list[dict], repeat: int) -> tuple[float, float, float]:
    """Seconds per 1,000 completions for the strict checker: cold math-verify cache, warm, and
    the share of completions that needed math-verify."""
    from grpo_desktop.engine.rewards import functions as rewards

    completions = [r["completion"] for r in rows]
    answers = [r["answer"] for r in rows]
    import math_verify  # noqa: F401  (imported before timing: a one-off ~1 s)

    rewards._math_verify_equal.cache_clear()
    start = time.perf_counter()
    rewards.accuracy_reward(completions, answers)
    cold = (time.perf_counter() - start) / len(rows) * 1000
    needed = rewards._math_verify_equal.cache_info().misses
    start = time.perf_counter()
    for _ in range(repeat):
        rewards.accuracy_reward(completions, answers)
    warm = (time.perf_counter() - start) / (repeat * len(rows)) * 1000
    return cold, warm, needed / len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="warm passes over the corpus")
    parser.add_argument("--corpus", default=CORPUS)
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from grpo_desktop.engine.data.gold import parse_answer

    rows = load_corpus(args.corpus)
    completions = [r["completion"] for r in rows]
    answers = [parse_answer(r["answer"]) for r in rows]
    checkers: dict[str, Scorer | None] = {
        f"old ({OLD_COMMIT})": old_checker(),
        "strict": engine_checker("strict"),
        "lenient": engine_checker("lenient"),
        "trl": trl_checker(),
    }
    results = {}
    for name, scorer in checkers.items():
        if scorer is None:
            print(f"{name}: not available, skipped", file=sys.stderr)
            continue
        scores = scorer(completions, answers)
        results[name] = (agreement(rows, scores), hedges_rewarded(rows, scores))
    names = list(results)
    categories = sorted({r["category"] for r in rows}) + ["overall"]
    print(f"{'category':<22}{'n':>4}" + "".join(f"{n:>16}" for n in names))
    for cat in categories:
        n = results[names[0]][0][cat][1]
        cells = "".join(f"{100 * results[k][0][cat][0] / n:>15.1f}%" for k in names)
        print(f"{cat:<22}{n:>4}{cells}")
    cells = "".join(f"{'{} of {}'.format(*results[k][1]):>16}" for k in names)
    print(f"{'hedges rewarded':<26}{cells}")
    cold, warm, share = time_per_1000(rows, args.repeat)
    print(
        f"\nstrict checker, main thread: {cold:.2f} s per 1,000 completions with math-verify's "
        f"cache empty ({100 * share:.0f}% of completions needed math-verify), {warm:.3f} s warm"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
