"""Built-in multiplication problems ("What is 17 × 24?"), the data source that needs no download.

Difficulty sets how many digits the factors have: level 1 is the times tables (7 × 8), level 2
two digits by two (17 × 24), and each level above adds a digit to the first factor, so each adds
one more partial product's worth of work (`arithmetic_problems` has the table). Problems are
drawn without repetition by a seeded `random.Random`, so the same arguments give the same list.

From level 2 up, every problem belongs to one fixed pool (`pool_of`: test, sft or train, by a
hash of its factors, never by a seed), so held-out accuracy is measured on problems that neither
the demo model's supervised training nor any GRPO run has seen (`arithmetic_splits`).

Deliberately pure Python: no torch, no datasets, no numpy.

Try it:  python -m grpo_desktop.engine.data.arithmetic
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache

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


# Pools by hash slot out of POOL_SLOTS; the rest of the slots is "train".
POOL_SLOTS = 20
_POOL_RANGES = {"test": range(0, 2), "sft": range(2, 12), "train": range(12, 20)}
POOLS = tuple(_POOL_RANGES)


def _question(a: int, b: int) -> str:
    return f"What is {a} × {b}?"


def pool_of(a: int, b: int) -> str:
    """The pool ("test", "sft" or "train") of the problem a × b at levels 2 and up.

        pool   share  used for
        test    10 %  held-out problems (the side evaluation during a run, `grpo-desktop eval`)
        sft     50 %  the built-in demo model's supervised training (scripts/build_demo_model.py)
        train   40 %  GRPO training problems

    A fixed integer hash (splitmix64's finaliser), the same on every machine and Python version,
    so the split never depends on a seed or a size. Level 1 (64 problems, too few to set any
    aside) has no pools, and the demo model never trains on it.
    """
    x = (a * 1_000_003 + b + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    slot = (x ^ (x >> 31)) % POOL_SLOTS
    return next(name for name, slots in _POOL_RANGES.items() if slot in slots)


def has_pools(difficulty: int) -> bool:
    """Whether a level is split into pools (all but level 1)."""
    _ranges(difficulty)
    return difficulty >= 2


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
    pool: str | None = None,
) -> list[Problem]:
    """`n` distinct problems of a difficulty level, none of whose question is in `exclude`, all
    from `pool` ("test", "sft", "train") when one is given, else from the whole grid.

        difficulty  first factor   second factor  distinct problems  example
        1           2-9            2-9                           64  7 × 8
        2           10-99          10-99                      8,100  17 × 24
        3           100-999        10-99                     81,000  317 × 24
        4           1000-9999      10-99                    810,000  4317 × 24
        5           10000-99999    10-99                  8,100,000  54317 × 24

    0 and 1 are left out of level 1 because they are not multiplication practice.

    Deterministic: the same arguments give the same list. Raises ValueError when `n` is more than
    the level (or pool) has problems left after the exclusions.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"The number of problems must be a whole number ≥ 0, got {n!r}.")
    a_lo, _a_hi, b_lo, b_hi = _ranges(difficulty)
    if n == 0:
        return []
    if pool is not None and pool not in POOLS:
        raise ValueError(f"Unknown pool {pool!r}; choose one of: {', '.join(POOLS)}.")
    if pool is not None and not has_pools(difficulty):
        raise ValueError(f"Arithmetic difficulty {difficulty} has no pools (too few problems).")
    total = problem_count(difficulty)
    width = b_hi - b_lo + 1
    excluded = exclude if isinstance(exclude, (set, frozenset)) else frozenset(exclude)
    # Drawing n + |exclude| distinct candidates guarantees n survivors whenever n are available;
    # when that is the whole grid, the survivors are exactly the available problems. A pool keeps
    # a share of the candidates: draw enough for it, and the whole grid if that falls short.
    need = n + len(excluded)
    sizes = [min(total, need)] if pool is None else [min(total, 3 * need + 100), total]
    out: list[Problem] = []
    for k in dict.fromkeys(sizes):
        out = []
        for index in random.Random(seed).sample(range(total), k):
            a, b = a_lo + index // width, b_lo + index % width
            question = _question(a, b)
            if question in excluded or (pool is not None and pool_of(a, b) != pool):
                continue
            out.append(Problem(question, str(a * b)))
            if len(out) == n:
                return out
    where = f"the '{pool}' pool of difficulty {difficulty}" if pool else f"difficulty {difficulty}"
    raise ValueError(
        f"Arithmetic {where} has {pool_size(difficulty, pool):,} distinct problems and "
        f"{len(out):,} of them are not excluded, fewer than the {n:,} asked for. Ask for fewer "
        "problems or raise the difficulty."
    )


@lru_cache(maxsize=32)
def pool_size(difficulty: int, pool: str | None = None) -> int:
    """How many problems a pool of a level holds (the whole level when pool is None)."""
    if pool is None:
        return problem_count(difficulty)
    a_lo, a_hi, b_lo, b_hi = _ranges(difficulty)
    return sum(pool_of(a, b) == pool for a in range(a_lo, a_hi + 1) for b in range(b_lo, b_hi + 1))


def arithmetic_splits(
    train_size: int, eval_size: int, difficulty: int, seed: int
) -> tuple[list[Problem], list[Problem]]:
    """Disjoint (train, held-out eval) problem lists.

    Levels 2 and up: held-out problems come from the `test` pool and training problems from the
    `train` pool (see `pool_of`). Level 1: the eval set is drawn first, from `seed`
    alone, and the training problems with the eval questions excluded. Either way the eval set
    does not change with `train_size`.
    """
    if has_pools(difficulty):
        held_out = arithmetic_problems(eval_size, difficulty, seed, pool="test")
        train = arithmetic_problems(train_size, difficulty, seed, pool="train")
        return train, held_out
    held_out = arithmetic_problems(eval_size, difficulty, seed)
    train = arithmetic_problems(
        train_size, difficulty, seed, exclude=frozenset(p.question for p in held_out)
    )
    return train, held_out


if __name__ == "__main__":
    for level in range(MIN_DIFFICULTY, MAX_DIFFICULTY + 1):
        example = arithmetic_problems(1, level, seed=0)[0]
        pools = ""
        if has_pools(level) and level <= 3:
            pools = " (" + ", ".join(f"{p} {pool_size(level, p):,}" for p in POOLS) + ")"
        print(f"difficulty {level}: {problem_count(level):>9,} problems{pools}, e.g. {example}")
