"""What the Reward panel's *Test checker* runs the checker on, and where those samples came from.

After a run: the latest step's answers, as the model wrote them. Before any run (issue 27): the
first problems of the session's own dataset that have a gold answer, each with a few answers
written here the way models answer (right in the tags, wrong in the tags, a plain sentence,
and one empty answer), so the checker is tested on the problems it will score; before, five
fixed "17 × 24" answers stood in whatever the dataset. When the dataset cannot be read, those
fixed answers are used and the note says why.

Qt-free (runs in the panel's background task: reading a file or generating a task's problems).
Try it: tests/ui/panels/test_checker_samples.py.
"""

from __future__ import annotations

import os
from typing import Any

from grpo_desktop.engine.config import DataConfig

Sample = tuple[str, str, str]  # completion, gold answer, prompt
FROM_PROBLEMS = 3  # problems of the dataset a test uses
ROWS_READ = 20  # rows read to find them (some may lack an answer)

# Used when the dataset cannot be read: (completion, answer, prompt).
FIXED_SAMPLES: list[Sample] = [
    ("<think>17 × 24 = 340 + 68 = 408</think><answer>408</answer>", "408", "What is 17 × 24?"),
    (
        "<think>17 × 20 = 340, plus 4 × 17 = 58</think><answer>398</answer>",
        "408",
        "What is 17 × 24?",
    ),
    ("The answer is 408", "408", "What is 17 × 24?"),
    ("<answer>398 or 408</answer>", "408", "What is 17 × 24?"),
    ("", "408", "What is 17 × 24?"),
]


def source_words(data: DataConfig) -> str:
    """The dataset as the Dataset panel names it."""
    if data.source == "arithmetic":
        return f"the built-in arithmetic problems (level {data.arithmetic_difficulty})"
    if data.source == "task":
        return f"the reasoning-gym task {data.task or '(none chosen)'}"
    name = os.path.basename(data.path.rstrip("/\\")) or data.path
    return f"your dataset {name}" if name else "your dataset"


def wrong_answer(gold: str) -> str:
    """A plausible wrong answer: a number off by one, else another word."""
    try:
        value = float(gold)
    except ValueError:
        return "not " + gold if len(gold) < 30 else "something else"
    return str(int(value) + 1) if value.is_integer() else f"{value + 1:g}"


def written_answers(problem: str, gold: str, think: str, answer: str) -> list[Sample]:
    """A right and a wrong answer in the tags and a plain sentence, for one problem."""
    return [
        (
            f"<{think}>Working it out step by step.</{think}><{answer}>{gold}</{answer}>",
            gold,
            problem,
        ),
        (
            f"<{think}>A slip in the working.</{think}><{answer}>{wrong_answer(gold)}</{answer}>",
            gold,
            problem,
        ),
        (f"The answer is {gold}", gold, problem),
    ]


def dataset_samples(data: DataConfig, think: str, answer: str) -> tuple[list[Sample], str]:
    """Samples written for the dataset's first problems with a gold answer, and where they came
    from; the fixed 17 × 24 samples and why when the data has none or cannot be read."""
    from grpo_desktop.engine.data.dataset import preview_rows
    from grpo_desktop.engine.data.gold import parse_answer
    from grpo_desktop.engine.errors import UserError

    where = source_words(data)
    try:
        _columns, rows = preview_rows(data, ROWS_READ)
    except UserError as exc:
        return list(FIXED_SAMPLES), (
            f"built-in examples (17 × 24): {where} could not be read ({exc})"
        )
    generated = data.source in ("arithmetic", "task")
    prompt_column = "question" if generated else data.prompt_column
    answer_column = "answer" if generated else data.answer_column
    pairs: list[tuple[str, str]] = []
    for row in rows:
        problem = _text(row.get(prompt_column))
        gold = parse_answer(row.get(answer_column))
        if problem and gold:
            pairs.append((problem, gold))
        if len(pairs) == FROM_PROBLEMS:
            break
    if not pairs:
        return list(FIXED_SAMPLES), (
            f"built-in examples (17 × 24): the first {len(rows)} rows of {where} have no problem "
            f"with a gold answer in columns '{prompt_column}' and '{answer_column}'"
        )
    samples = [s for problem, gold in pairs for s in written_answers(problem, gold, think, answer)]
    samples.append(("", pairs[0][1], pairs[0][0]))  # the empty answer a model sometimes gives
    n = len(pairs)
    return samples, (
        f"answers written for the first {n} problem{'s' if n > 1 else ''} of {where}, with "
        "their gold answers (right, wrong, a plain sentence; one empty)"
    )


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()
