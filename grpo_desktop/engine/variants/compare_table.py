"""The before/after comparison's table and numbers: rows, categories, intervals, CSV.

A comparison answers the same problems with two variants of a run's model, A (the base or an
earlier checkpoint) and B (a later checkpoint); each problem is "fixed" (A wrong, B right),
"broken" (A right, B wrong), "both right" or "both wrong". `summarize` gives each side's accuracy
with a 95 % Wilson score interval (it stays inside 0–100 % and is honest for small n and
accuracies near 0 or 1, where the plain p ± 1.96·√(p(1−p)/n) is not), the count of each
category, and McNemar's exact test on the discordant problems (fixed vs broken): how likely a
split at least that uneven would be if A and B were equally good.

Torch-free and Qt-free: the window imports it to show a comparison; variants/compare.py runs the
models. Does not generate or score answers.

Try it:  python -c "from grpo_desktop.engine.variants.compare_table import wilson_interval as w; \\
print(w(31, 100))"
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

FIXED, BROKEN, BOTH_RIGHT, BOTH_WRONG = "fixed", "broken", "both right", "both wrong"
CATEGORIES = (FIXED, BROKEN, BOTH_WRONG, BOTH_RIGHT)
CATEGORY_HELP = {
    FIXED: "A answered wrong, B answers right: what training fixed.",
    BROKEN: "A answered right, B answers wrong: what training broke.",
    BOTH_WRONG: "Neither side is right: what is still to learn.",
    BOTH_RIGHT: "Both sides are right.",
}
Z_95 = 1.959963984540054  # the standard normal's 97.5 % quantile: a two-sided 95 % interval
CSV_COLUMNS = (
    "problem",
    "gold",
    "answer_a",
    "correct_a",
    "answer_b",
    "correct_b",
    "category",
    "completion_a",
    "completion_b",
)


def category(correct_a: bool, correct_b: bool) -> str:
    if correct_a == correct_b:
        return BOTH_RIGHT if correct_a else BOTH_WRONG
    return FIXED if correct_b else BROKEN


@dataclass(frozen=True)
class CompareRow:
    """One problem: its gold answer, and each side's extracted answer (None: none found),
    verdict and full completion."""

    problem: str
    gold: str
    answer_a: str | None
    correct_a: bool
    answer_b: str | None
    correct_b: bool
    completion_a: str = ""
    completion_b: str = ""

    @property
    def category(self) -> str:
        return category(self.correct_a, self.correct_b)


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for `successes` out of `n` (95 % by default); (0, 1) for n 0.

    center = (p + z²/2n) / (1 + z²/n), half width = z/(1 + z²/n) · √(p(1−p)/n + z²/4n²)."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..{n}, got {successes}")
    p, z2 = successes / n, z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # exact at the ends: 0 successes has lower bound 0, all successes upper bound 1
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def mcnemar_exact_p(fixed: int, broken: int) -> float:
    """Two-sided exact McNemar p-value: the chance of a fixed/broken split at least this uneven
    if each discordant problem were a fair coin (binomial, p = ½). 1.0 with no discordant pair."""
    n = fixed + broken
    if n == 0:
        return 1.0
    k = min(fixed, broken)
    tail = math.fsum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


@dataclass
class SideSummary:
    label: str
    correct: int
    n: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.n)

    def to_dict(self) -> dict:
        low, high = self.interval
        return {
            "label": self.label,
            "correct": self.correct,
            "accuracy": round(self.accuracy, 4),
            "interval_95": [round(low, 4), round(high, 4)],
        }


@dataclass
class CompareSummary:
    a: SideSummary
    b: SideSummary
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.a.n

    @property
    def mcnemar_p(self) -> float:
        return mcnemar_exact_p(self.counts.get(FIXED, 0), self.counts.get(BROKEN, 0))

    def to_dict(self) -> dict:
        """The JSON form: each side, n, the four counts (keys with _ for spaces), McNemar's p."""
        out = {"a": self.a.to_dict(), "b": self.b.to_dict(), "n": self.n}
        out.update({name.replace(" ", "_"): self.counts.get(name, 0) for name in CATEGORIES})
        out["mcnemar_p"] = float(f"{self.mcnemar_p:.4g}")  # 4 significant digits: p can be tiny
        return out

    def text(self) -> str:
        """'Base 31 % [25–38 %] → step 100: 52 % [45–59 %], 29 fixed, 7 broken'."""
        fixed, broken = self.counts.get(FIXED, 0), self.counts.get(BROKEN, 0)
        return (
            f"{_side_text(self.a)} → {_side_text(self.b)}, {fixed} fixed, {broken} broken "
            f"(of {self.n})"
        )


def _percent(x: float) -> str:
    return f"{100 * x:.0f}"


def _side_text(side: SideSummary) -> str:
    low, high = side.interval
    label = side.label[:1].upper() + side.label[1:]
    return f"{label}: {_percent(side.accuracy)} % [{_percent(low)}–{_percent(high)} %]"


def summarize(rows: list[CompareRow], label_a: str, label_b: str) -> CompareSummary:
    counts = {name: 0 for name in CATEGORIES}
    for row in rows:
        counts[row.category] += 1
    n = len(rows)
    a = SideSummary(label_a, sum(r.correct_a for r in rows), n)
    b = SideSummary(label_b, sum(r.correct_b for r in rows), n)
    return CompareSummary(a, b, counts)


def write_csv(path: str, rows: Iterable[CompareRow]) -> None:
    """The table as CSV (UTF-8, a header row, verdicts as 1/0, no answer found as empty)."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            values = asdict(row)
            values["category"] = row.category
            for side in ("a", "b"):
                values[f"correct_{side}"] = int(values[f"correct_{side}"])
                if values[f"answer_{side}"] is None:
                    values[f"answer_{side}"] = ""
            writer.writerow([values[c] for c in CSV_COLUMNS])


def read_csv(path: str) -> list[CompareRow]:
    """The rows of a table written by `write_csv` (an empty answer reads back as None)."""
    with open(path, encoding="utf-8", newline="") as fh:
        rows = []
        for record in csv.DictReader(fh):
            rows.append(
                CompareRow(
                    problem=record["problem"],
                    gold=record["gold"],
                    answer_a=record["answer_a"] or None,
                    correct_a=record["correct_a"] == "1",
                    answer_b=record["answer_b"] or None,
                    correct_b=record["correct_b"] == "1",
                    completion_a=record["completion_a"],
                    completion_b=record["completion_b"],
                )
            )
        return rows
