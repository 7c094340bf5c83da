"""Built-in multiplication problems ("What is 17 × 24?"), the data source that needs no download.

Difficulty sets how many digits the factors have:

    difficulty  first factor   second factor  distinct problems  example
    1           2-9            2-9                           64  7 × 8
    2           10-99          10-99                      8,100  17 × 24
    3           100-999        10-99                     81,000  317 × 24
    4           1000-9999      10-99                    810,000  4317 × 24
    5           10000-99999    10-99                  8,100,000  54317 × 24

The first factor grows one digit per level while the second stays at two digits (one at level 1,
the times tables), so every level adds one more partial product's worth of work. 0 and 1 are left
out of level 1 because they are not multiplication practice.

Problems are drawn without repetition from that grid by a seeded `random.Random`, so the same
arguments always give the same list, and `exclude` keeps given questions out (the demo model's
SFT data, the held-out eval set and the training set can be made disjoint).

Deliberately pure Python: no torch, no datasets, no numpy.

Try it:  python -m grpo_desktop.engine.arithmetic
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass

# difficulty -> (first factor low, high, second factor low, high), bounds inclusive.
_RANGES: dict[int, tuple[int, int, int, int]] = {
    1: (2, 9, 2, 9),
    2: (10, 99, 10, 99),
    3: (100, 999, 10, 99),
    4: (1000, 9999, 10, 99),
    5: (10000, 99999, 10, 99),
}
MIN_DIFFICULTY = min(_RANGES)
MAX_DIFFICULTY = max(_RANGES)


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str


def _question(a: int, b: int) -> str:
    return f"What is {a} × {b}?"


def _ranges(difficulty: int) -> tuple[int, int, int, int]:
    if isinstance(difficulty, bool) or difficulty not in _RANGES:
        raise ValueError(
            f"Arithmetic difficulty must be a whole number from {MIN_DIFFICULTY} to "
            f"{MAX_DIFFICULTY}, got {difficulty!r}."
        )
    return _RANGES[difficulty]


def problem_count(difficulty: int) -> int:
    """How many distinct problems a difficulty level has (64 for level 1, 8,100 for level 2, ...)."""
    a_lo, a_hi, b_lo, b_hi = _ranges(difficulty)
    return (a_hi - a_lo + 1) * (b_hi - b_lo + 1)


def arithmetic_problems(
    n: int,
    difficulty: int = 2,
    seed: int = 0,
    exclude: Collection[str] = frozenset(),
) -> list[Problem]:
    """`n` distinct problems of a difficulty level, none of whose question is in `exclude`.

    Deterministic: the same arguments give the same list. Raises ValueError when `n` is more than
    the level has problems left after the exclusions.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"The number of problems must be a whole number ≥ 0, got {n!r}.")
    a_lo, _a_hi, b_lo, b_hi = _ranges(difficulty)
    if n == 0:
        return []
    total = problem_count(difficulty)
    width = b_hi - b_lo + 1
    excluded = exclude if isinstance(exclude, (set, frozenset)) else frozenset(exclude)
    # Drawing n + |exclude| distinct candidates guarantees n survivors whenever n are available;
    # when that is the whole grid, the survivors are exactly the available problems.
    k = min(total, n + len(excluded))
    out: list[Problem] = []
    for index in random.Random(seed).sample(range(total), k):
        a, b = a_lo + index // width, b_lo + index % width
        question = _question(a, b)
        if question in excluded:
            continue
        out.append(Problem(question, str(a * b)))
        if len(out) == n:
            return out
    raise ValueError(
        f"Arithmetic difficulty {difficulty} has {total:,} distinct problems and {len(out):,} of "
        f"them are not excluded, fewer than the {n:,} asked for. Ask for fewer problems or raise "
        "the difficulty."
    )


def arithmetic_splits(
    train_size: int, eval_size: int, difficulty: int, seed: int
) -> tuple[list[Problem], list[Problem]]:
    """Disjoint (train, held-out eval) problem lists.

    The eval set is drawn first, from `seed` alone, so it does not change with `train_size`; the
    training problems are then drawn with the eval questions excluded.
    """
    held_out = arithmetic_problems(eval_size, difficulty, seed)
    train = arithmetic_problems(
        train_size, difficulty, seed, exclude=frozenset(p.question for p in held_out)
    )
    return train, held_out


if __name__ == "__main__":
    for level in range(MIN_DIFFICULTY, MAX_DIFFICULTY + 1):
        example = arithmetic_problems(1, level, seed=0)[0]
        print(f"difficulty {level}: {problem_count(level):>9,} problems, e.g. {example}")
