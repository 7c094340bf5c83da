"""Training prompts: load a dataset, split off a held-out set, build prompts, order batches.

`load_data` reads the configured source (the built-in arithmetic problems, a file, a
save_to_disk folder, a hub dataset: engine.data.sources, or a reasoning-gym task:
engine.data.tasks), sets aside the held-out problems that
tell real progress from reward hacking, skips rows that could not be scored and normalises the
answers. `build_prompt` turns a problem into the text the model sees, after the system prompt
and the worked example's earlier exchange (`prompt_for` takes both from the run's DataConfig:
callers use it so none leaves the example out); `batch_indices` is the
order of training batches, a pure function of seed and step so a resumed run draws the same.
Every problem a user can fix raises `DataError` naming the file or id and what to do.

Not here: reading files and datasets (engine.data.sources), tokenising, truncating prompts to
max_prompt_length (the trainer does that), rewards. `datasets` is never imported at module level.

Try it:  python -c "from grpo_desktop.engine.data.dataset import load_data; from grpo_desktop.engine.config \\
import DataConfig; print(load_data(DataConfig()).source_desc)"
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from grpo_desktop.engine.config import DataConfig
from grpo_desktop.engine.data.arithmetic import (
    arithmetic_problems,
    arithmetic_splits,
    has_pools,
    pool_size,
    problem_count,
)
from grpo_desktop.engine.data.gold import parse_answer
from grpo_desktop.engine.data.sources import EVAL_SPLIT, Table, open_source
from grpo_desktop.engine.errors import DataError, ModelError

# The prompt for tokenizers without a chat template. No trailing space after "Answer:": BPE
# tokenizers attach the space to the next word, so a dangling one makes the first token unusual.
PLAIN_TEMPLATE = "{system}Question: {problem}\nAnswer:"
_LIKELY = {
    "prompt_column": ("question", "problem", "prompt", "input", "query", "instruction"),
    "answer_column": ("answer", "solution", "output", "target", "label", "response"),
}
_LABELS = {"prompt_column": "Prompt column", "answer_column": "Answer column"}


@dataclass(frozen=True)
class Example:
    problem: str
    answer: str


@dataclass
class PromptData:
    train: list[Example]
    eval: list[Example]
    columns: list[str]
    source_desc: str
    skipped: str = ""  # a warning when rows were skipped for empty values, else ''


# ----------------------------------------------------------------------------- answers, prompts


def worked_example(data: DataConfig) -> tuple[str, str] | None:
    """The run's worked example as (problem, answer), or None when it has none (either empty)."""
    problem, answer = data.example_problem.strip(), data.example_answer.strip()
    return (problem, answer) if problem and answer else None


def prompt_for(tokenizer: Any, problem: str, data: DataConfig) -> str:
    """`build_prompt` with the run's system prompt, worked example and answer prefix: what every
    caller that has the run's DataConfig uses, so none can leave one out."""
    return build_prompt(
        tokenizer, problem, data.system_prompt, worked_example(data), data.answer_prefix
    )


def responses(data: DataConfig, completions: list[str]) -> list[str]:
    """Each answer as rewards, evaluation and the rollout inspector see it: the run's answer
    prefix (written for the model at the end of the prompt) followed by what the model wrote.
    With no prefix, the completions themselves."""
    prefix = data.answer_prefix
    return [prefix + text for text in completions] if prefix else list(completions)


def example_messages(example: tuple[str, str] | None) -> list[dict[str, str]]:
    """The worked example as the two earlier chat turns (user, then assistant) before a problem."""
    if example is None:
        return []
    return [
        {"role": "user", "content": example[0]},
        {"role": "assistant", "content": example[1]},
    ]


def plain_prefix(system_prompt: str, example: tuple[str, str] | None = None) -> str:
    """What PLAIN_TEMPLATE puts before the question: the system prompt, then the worked example
    as an earlier "Question: …\nAnswer: …" block."""
    system = system_prompt.strip()
    head = f"{system}\n\n" if system else ""
    if example is None:
        return head
    return head + PLAIN_TEMPLATE.format(system="", problem=example[0]) + f" {example[1]}\n\n"


def build_prompt(
    tokenizer: Any,
    problem: str,
    system_prompt: str = "",
    example: tuple[str, str] | None = None,
    prefix: str = "",
) -> str:
    """The text fed to the model: the tokenizer's chat template, or PLAIN_TEMPLATE without one,
    then `prefix`, the start of the answer written for the model (a prefill such as "<think>").

    A worked example (problem, answer) comes first as an earlier exchange: a user turn and the
    assistant's answer before the real problem's turn; in the plain template a
    "Question: …\nAnswer: …" block before the real question. Chat templates that reject a system
    message (Gemma's, for one) get the instructions at the start of the first user message.
    """
    system = system_prompt.strip()
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        plain = PLAIN_TEMPLATE.format(system=plain_prefix(system, example), problem=problem)
        return plain + (f" {prefix}" if prefix else "")  # "Answer: <think>"
    from jinja2 import TemplateError

    turns = [*example_messages(example), {"role": "user", "content": problem}]
    messages = [{"role": "system", "content": system}] if system else []
    try:
        return (
            tokenizer.apply_chat_template(
                messages + turns, tokenize=False, add_generation_prompt=True
            )
            + prefix
        )
    except TemplateError as exc:
        if not system:
            what = "the worked example's turns" if example else "a plain user message"
            raise ModelError(
                f"The model's chat template failed on {what} ({exc}). Fix the chat_template in "
                "its tokenizer_config.json, or remove it to use a plain prompt"
                + (", or clear the worked example." if example else ".")
            ) from None
    first = {"role": "user", "content": f"{system}\n\n{turns[0]['content']}"}
    return (
        tokenizer.apply_chat_template(
            [first, *turns[1:]], tokenize=False, add_generation_prompt=True
        )
        + prefix
    )


# ----------------------------------------------------------------------------- batch order


@lru_cache(maxsize=4)
def _permutation(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    perm = np.random.default_rng([seed, epoch]).permutation(num_examples)
    perm.flags.writeable = False
    return perm


def batch_indices(num_examples: int, step: int, batch_size: int, seed: int) -> list[int]:
    """Prompt indices for 0-based training `step`: a pure function, so resuming draws the same.

    Position p = step * batch_size + i of the endless stream is entry p % N of epoch p // N's
    permutation (seeded by (seed, epoch)); a batch that crosses an epoch end takes the rest of
    one epoch and the start of the next.
    """
    for name, value, low in (("num_examples", num_examples, 1), ("batch_size", batch_size, 1)):
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}.")
    if step < 0 or seed < 0:
        raise ValueError(f"step and seed must be ≥ 0, got step={step}, seed={seed}.")
    start = step * batch_size
    return [
        int(_permutation(num_examples, seed, p // num_examples)[p % num_examples])
        for p in range(start, start + batch_size)
    ]


# ----------------------------------------------------------------------------- load_data


def _empty_error(where: str) -> DataError:
    return DataError(f"{where} has no rows. Choose a file or split that contains problems.")


def _text(value: Any, table: Table, column: str, row: int) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value != value:  # NaN: a missing value in Parquet/pandas data
        return ""
    if isinstance(value, (str, int, float)):
        return str(value)
    raise DataError(
        f"{table.where}: column '{column}' holds {type(value).__name__} values (row {row + 1}), "
        "not text. Choose a column with the problem text."
    )


def _examples(table: Table, cfg: DataConfig) -> tuple[list[Example], str]:
    """The usable rows as Examples, and a note on skipped rows."""
    if table.num_rows == 0:
        raise _empty_error(table.where)
    for field in ("prompt_column", "answer_column"):
        column = getattr(cfg, field)
        if column not in table.columns:
            guess = next((c for c in table.columns if c.lower() == column.lower()), None)
            guess = guess or next((c for c in _LIKELY[field] if c in table.columns), None)
            raise DataError(
                f"{table.where} has no column '{column}'. Its columns are: "
                f"{', '.join(table.columns)}. Set '{_LABELS[field]}' (data.{field}) to one of "
                "them" + (f" (perhaps '{guess}')." if guess else ".")
            )
    out: list[Example] = []
    no_prompt = no_answer = 0
    answers = table.column(cfg.answer_column)
    for i, (prompt, answer) in enumerate(zip(table.column(cfg.prompt_column), answers)):
        problem = _text(prompt, table, cfg.prompt_column, i).strip()
        reference = parse_answer(answer)
        if not problem:
            no_prompt += 1
        elif not reference:
            no_answer += 1
        else:
            out.append(Example(problem, reference))
    if not out:
        raise DataError(
            f"None of the {table.num_rows} rows of {table.where} has both a prompt in "
            f"'{cfg.prompt_column}' and an answer in '{cfg.answer_column}'. Check the column names."
        )
    notes = [
        f"{n:,} with an empty {what}"
        for n, what in ((no_prompt, "prompt"), (no_answer, "answer"))
        if n
    ]
    return out, ("; skipped " + " and ".join(notes) if notes else "")


def _hold_out(
    pool: list[Example],
    test: list[Example] | None,
    eval_size: int,
    seed: int,
    where: tuple[str, str],
    skipped: tuple[str, str] = ("", ""),
) -> tuple[list[Example], list[Example], str]:
    """(train, eval, description of the held-out set); `where` names the source and test split,
    `skipped` says how many rows of each were left out for empty values (for the messages)."""
    if eval_size == 0:
        return pool, [], "no held-out set"
    rng = random.Random(seed)
    if test is not None:
        if eval_size > len(test):
            raise DataError(
                f"{where[1]} has {len(test):,} usable rows{skipped[1]}, fewer than the "
                f"{eval_size:,} held-out problems asked for. Lower 'Held-out problems' "
                f"(data.eval_size) to at most {len(test):,}."
            )
        held = [test[i] for i in sorted(rng.sample(range(len(test)), eval_size))]
        train, desc = pool, f"{eval_size:,} held out (random rows of the '{EVAL_SPLIT}' split)"
    else:
        if eval_size >= len(pool):
            usable = f"{len(pool):,} usable row" + ("s" if len(pool) != 1 else "")
            n, setting = len(pool), "'Held-out problems' (data.eval_size)"
            fix = f"Set {setting} to 0 (no held-out set)"
            if n >= 10:
                fix = f"Lower {setting}, e.g. to {n // 10:,}, or set it to 0"
            elif n > 1:
                fix = f"Lower {setting} to at most {n - 1}, or set it to 0"
            raise DataError(
                f"{where[0]} has {usable}{skipped[0]}, so holding out {eval_size:,} leaves none for "
                f"training. {fix}, or add rows to the data."
            )
        picked = set(rng.sample(range(len(pool)), eval_size))
        held = [pool[i] for i in sorted(picked)]
        train = [ex for i, ex in enumerate(pool) if i not in picked]
        desc = f"{eval_size:,} held out (random rows, seed {seed})"
    held_problems = {ex.problem for ex in held}
    kept = [ex for ex in train if ex.problem not in held_problems]
    if not kept:
        raise DataError(
            f"Every training problem of {where[0]} is also in the held-out set (the data repeats "
            "the same problems), so none is left for training. Set 'Held-out problems' "
            "(data.eval_size) to 0, or add different problems."
        )
    if len(kept) < len(train):
        desc += f"; dropped {len(train) - len(kept):,} training rows repeating a held-out problem"
    return kept, held, desc


def _load_arithmetic(cfg: DataConfig, seed: int) -> PromptData:
    level = cfg.arithmetic_difficulty
    try:
        total = problem_count(level)
    except ValueError as exc:
        raise DataError(
            f"{exc} Set 'Arithmetic difficulty' (data.arithmetic_difficulty)."
        ) from None
    eval_n, train_n, note = cfg.eval_size, cfg.arithmetic_size, ""
    if not has_pools(level) and eval_n + train_n > total:
        eval_n = min(eval_n, total // 5)
        train_n = min(train_n, total - eval_n)
        note = f" (difficulty {level} has only {total:,} distinct problems)"
    try:
        try:
            train, held = arithmetic_splits(train_n, eval_n, level, seed)
        except ValueError:
            if not has_pools(level):
                raise
            # More than a pool holds: take what it has (pool sizes are counted only when needed).
            eval_cap, train_cap = pool_size(level, "test"), pool_size(level, "train")
            eval_n, train_n = min(eval_n, eval_cap), min(train_n, train_cap)
            note = (
                f" (difficulty {level} sets aside {eval_cap:,} problems for held-out use and "
                f"{train_cap:,} for training)"
            )
            train, held = arithmetic_splits(train_n, eval_n, level, seed)
    except ValueError as exc:
        raise DataError(f"{exc} Set 'Arithmetic problems' (data.arithmetic_size).") from None
    desc = (
        f"built-in arithmetic, difficulty {level}: {len(train):,} training problems, "
        f"{len(held):,} held out{note}"
    )
    train_examples = [Example(p.question, p.answer) for p in train]
    held_examples = [Example(p.question, p.answer) for p in held]
    return PromptData(train_examples, held_examples, ["question", "answer"], desc)


def _load_task(cfg: DataConfig) -> PromptData:
    """A reasoning-gym task's problems (engine.data.tasks): training and held-out from different
    seeds, never overlapping; the run seed does not change them (data.task_seed does)."""
    from grpo_desktop.engine.data.tasks import task_problems

    problems = task_problems(cfg)

    def examples(entries: tuple[dict, ...]) -> list[Example]:
        return [Example(str(e["question"]).strip(), str(e.get("answer") or "")) for e in entries]

    return PromptData(
        examples(problems.train), examples(problems.eval), ["question", "answer"], problems.desc
    )


def _skipped_rows(count: int, note: str) -> str:
    """' (2 more rows were skipped: 1 with an empty prompt …)' for messages; '' for none."""
    if not count:
        return ""
    were = "s were" if count != 1 else " was"
    return f" ({count:,} more row{were} skipped: {note.removeprefix('; skipped ')})"


def load_data(cfg: DataConfig, seed: int = 0) -> PromptData:
    """Training and held-out examples from the configured source.

    - Held-out set: if the source has a 'test' split and you train on another split, the eval
      set is `eval_size` random rows of 'test' and the whole chosen split trains. Otherwise
      `eval_size` random rows (seeded) are taken out of the data. Either way, training rows whose
      problem text equals a held-out problem are dropped, so duplicates cannot leak. eval_size 0
      means no eval set. Arithmetic from level 2 up uses the level's `test` and `train` pools
      (engine.data.arithmetic); when a level or pool has fewer problems than asked for, the
      sizes shrink to fit (level 1: at most a fifth held out) and `source_desc` says so.
    - Rows with an empty prompt or answer are skipped and counted in `source_desc` (and in
      `skipped`, a warning the trainer logs): they could not be scored, so training on them
      would only add noise. If no row is left, DataError; messages about the held-out split say
      how many rows were skipped.
    - Answers are normalised by `parse_answer` (GSM8K '#### 42' -> '42')."""
    if cfg.eval_size < 0:
        raise DataError(
            f"'Held-out problems' (data.eval_size) must be 0 or more, not {cfg.eval_size}."
        )
    if cfg.source == "arithmetic":
        return _load_arithmetic(cfg, seed)
    if cfg.source == "task":
        return _load_task(cfg)
    main, test_table = open_source(cfg)
    pool, skipped = _examples(main, cfg)
    test, why = None, ["", ""]
    why[0] = _skipped_rows(main.num_rows - len(pool), skipped)
    if test_table is not None and test_table.num_rows and cfg.eval_size:
        test, test_skipped = _examples(test_table, cfg)
        why[1] = _skipped_rows(test_table.num_rows - len(test), test_skipped)
    where = (main.where, test_table.where if test_table is not None else "")
    train, held, held_desc = _hold_out(pool, test, cfg.eval_size, seed, where, tuple(why))
    desc = (
        f"{main.where}: {main.num_rows:,} rows{skipped}; {len(train):,} for training, {held_desc}"
    )
    warn = ""
    if skipped:
        warn = (
            f"{main.where}: {main.num_rows - len(pool):,} of its {main.num_rows:,} rows were "
            f"skipped ({skipped.removeprefix('; skipped ')}). If that is more than you expect, "
            f"check the prompt and answer columns (data.prompt_column '{cfg.prompt_column}', "
            f"data.answer_column '{cfg.answer_column}')."
        )
    return PromptData(train, held, list(main.columns), desc, warn)


def preview_rows(cfg: DataConfig, n: int = 20) -> tuple[list[str], list[dict]]:
    """Columns and the first `n` raw rows, for the dataset preview. Columns are not checked here
    (the preview is where the user picks them); unreadable or empty sources raise DataError."""
    if cfg.source == "arithmetic":
        try:
            count = min(n, problem_count(cfg.arithmetic_difficulty))
            problems = arithmetic_problems(count, cfg.arithmetic_difficulty, seed=0)
        except ValueError as exc:
            raise DataError(str(exc)) from None
        return ["question", "answer"], [
            {"question": p.question, "answer": p.answer} for p in problems
        ]
    if cfg.source == "task":
        from grpo_desktop.engine.data.tasks import task_problems

        small = dataclasses.replace(cfg, task_size=max(10, n), eval_size=0)
        entries = task_problems(small).train[:n]
        return ["question", "answer"], [
            {"question": e["question"], "answer": str(e.get("answer") or "")} for e in entries
        ]
    table, _ = open_source(cfg, limit=n)
    if table.num_rows == 0:
        raise _empty_error(table.where)
    return list(table.columns), table.head(n)
