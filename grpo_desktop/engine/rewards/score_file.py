"""The reward dry-run: score a JSONL file of sample completions with a config's rewards.

Behind `grpo-desktop score` and the Reward panel's "Test on a file…": a silently broken reward is
the most common way to waste a GRPO run, so users try theirs on answers they wrote or collected.
Each line is a JSON object with `completion`, `answer` (read as a dataset's answer column is,
engine.data.gold) and optionally `prompt`. `read_score_file` checks the whole file before
anything is scored, so a half-broken file never yields half an answer; `score_rows` scores with
the config's `RewardSet`, exactly as a run would, and yields one plain dict per row.

Not here: deciding whether custom checker code may run (the caller's trust gate: --trust-checker,
the app's Trust button), printing, files other than JSONL. Imports no torch.

Try it:
    printf '{"completion": "<think>2*9</think><answer>18</answer>", "answer": "#### 18"}\\n' > s.jsonl
    python -c "from grpo_desktop.engine.rewards.score_file import score_file; from grpo_desktop.engine.config.demo import demo_config; print(score_file('s.jsonl', demo_config().rewards))"
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from grpo_desktop.engine.config import DataConfig, RewardsConfig, TrainConfig, validate
from grpo_desktop.engine.data.gold import parse_answer
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.rewards.functions import RewardSet, extract_answer

BATCH_SIZE = 64
MAX_PROBLEMS = 10  # bad lines named in one message
EXAMPLE_LINE = '{"completion": "<think>9 + 9</think><answer>18</answer>", "answer": "18"}'


class ScoreFileError(UserError):
    """A sample file that cannot be scored: the message names the lines and what to fix."""


@dataclass(frozen=True)
class SampleRow:
    line: int  # 1-based line number in the file
    completion: str
    answer: str  # as parsed for scoring (GSM8K "#### 42" -> "42")
    prompt: str = ""


@dataclass
class ScoreReport:
    """Everything one dry-run produced: the rows read, one result dict per row, the summary."""

    rows: list[SampleRow]
    results: list[dict[str, Any]]
    summary: dict[str, Any]
    weights: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------- reading


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    kinds = {dict: "an object", list: "a list", str: "text", type(None): "null"}
    return kinds.get(type(value), "a number" if isinstance(value, (int, float)) else "a value")


def _check_row(row: Any, lineno: int) -> SampleRow | str:
    """The row as a SampleRow, or what is wrong with it."""
    if not isinstance(row, dict):
        return f"{_kind(row)}, not a JSON object"
    keys = ", ".join(map(str, row)) or "none"
    missing = [k for k in ("completion", "answer") if k not in row]
    if missing:
        return f'no "{missing[0]}" field (its fields: {keys})'
    completion, answer, prompt = row["completion"], row["answer"], row.get("prompt")
    if not isinstance(completion, str):
        return f'"completion" is {_kind(completion)}; it must be text'
    if answer is None or isinstance(answer, (bool, list, dict)):
        return f'"answer" is {_kind(answer)}; it must be text or a number'
    if prompt is not None and not isinstance(prompt, str):
        return f'"prompt" is {_kind(prompt)}; it must be text (or left out)'
    reference = parse_answer(answer)
    if not reference:
        shown = json.dumps(answer, ensure_ascii=False)[:60]
        return (
            f'"answer" {shown} is empty once read as a dataset answer (a dataset row like this '
            "is skipped, so it would never be scored)"
        )
    return SampleRow(lineno, completion, reference, prompt or "")


def parse_score_lines(lines: Iterable[str], where: str) -> list[SampleRow]:
    """Check every line of a sample file (`where` names it in messages) and return its rows.

    Each line is a JSON object with `completion` (text), `answer` (text or a number, parsed by
    engine.data.gold.parse_answer: GSM8K's "… #### 1,234" gives "1234", 42.0 gives "42") and
    optionally `prompt` (text, passed to a custom checker); blank lines are skipped. Bad lines
    raise one ScoreFileError naming each (the first ten) and what is wrong with it."""
    rows: list[SampleRow] = []
    problems: list[str] = []
    bad = 0
    lineno = 0
    try:
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                parsed: Any = json.loads(line)
            except json.JSONDecodeError as exc:
                outcome: SampleRow | str = f"not valid JSON ({exc.msg} at column {exc.colno})"
            else:
                outcome = _check_row(parsed, lineno)
            if isinstance(outcome, SampleRow):
                rows.append(outcome)
                continue
            bad += 1
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"line {lineno}: {outcome}")
    except UnicodeDecodeError as exc:
        raise ScoreFileError(
            f"{where} is not UTF-8 text (after line {lineno}: {exc.reason}). Save it as UTF-8 "
            "JSON lines."
        ) from None
    if problems:
        more = f"\n  … and {bad - len(problems)} more bad lines" if bad > len(problems) else ""
        raise ScoreFileError(
            f"{where}: {bad} of {bad + len(rows)} lines cannot be scored; nothing was scored.\n  - "
            + "\n  - ".join(problems)
            + more
            + f"\nEach line must be one JSON object like {EXAMPLE_LINE} (optionally with "
            '"prompt"); fix or delete these lines.'
        )
    if not rows:
        raise ScoreFileError(
            f"{where} has no lines to score. Write one JSON object per line, like {EXAMPLE_LINE}."
        )
    return rows


def read_score_file(path: str) -> list[SampleRow]:
    """Read and check a sample file (JSON lines, UTF-8, a byte-order mark allowed)."""
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return parse_score_lines(fh, path)
    except FileNotFoundError:
        raise ScoreFileError(f"Sample file not found: {path}.") from None
    except IsADirectoryError:
        raise ScoreFileError(f"{path} is a folder; give a .jsonl file of samples.") from None
    except OSError as exc:
        raise ScoreFileError(f"Cannot read {path}: {exc.strerror}.") from None


# ---------------------------------------------------------------- scoring


def reward_problems(rewards: RewardsConfig) -> list[str]:
    """What is wrong with the reward settings alone (the model and data need not exist)."""
    return validate(TrainConfig(rewards=rewards))


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def score_rows(
    rewards: RewardsConfig,
    rows: list[SampleRow],
    batch_size: int = BATCH_SIZE,
    data: DataConfig | None = None,
) -> Iterator[dict[str, Any]]:
    """One result dict per row, in order, scored `batch_size` rows at a time:

        {"rewards": {"accuracy": 1.0, "format": 0.0}, "reward": 1.0, "extracted": "18",
         "reasons": {}, "error": null}

    `rewards` holds the raw (unweighted) score of each part with a positive weight, None where it
    could not score; `reward` is the weighted total as in training (None: a part did not score);
    `error` is the custom checker's error text. `extracted` and `reasons` come from the accuracy
    checker when it reports them; else `extracted` is `extract_answer`'s and `reasons` is {}.

    `data`: the run's data settings; for a reasoning-gym task the accuracy is the task's own
    checker (rewards/task_score.py), which finds each row's problem by its `prompt`.

    Raises CheckerError (a UserError) when a custom checker cannot load; errors of single calls
    are results (`error`), never exceptions."""
    with RewardSet(rewards, data) as reward_set:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            completions = [r.completion for r in chunk]
            batch = reward_set.score(
                [r.prompt for r in chunk], completions, [r.answer for r in chunk]
            )
            n = len(chunk)
            extracted = batch.extracted if len(batch.extracted) == n else None
            reasons = batch.reasons if len(batch.reasons) == n else None
            for i, completion in enumerate(completions):
                if extracted is not None:
                    answer = extracted[i]
                elif "accuracy" in batch.names:
                    answer = extract_answer(
                        completion, rewards.answer_extraction, rewards.answer_tag
                    )
                else:
                    answer = None
                yield {
                    "rewards": {name: _number(batch.values[name][i]) for name in batch.names},
                    "reward": _number(batch.totals[i]),
                    "extracted": answer,
                    "reasons": dict(reasons[i]) if reasons is not None else {},
                    "error": batch.errors[i],
                }


def weights_of(rewards: RewardsConfig) -> dict[str, float]:
    """The parts a RewardSet of these settings uses, with their weights (starts no process)."""
    candidates = {
        "accuracy": rewards.accuracy_weight,
        "format": rewards.format_weight,
        "custom": rewards.custom_weight if rewards.custom_checker.strip() else 0.0,
    }
    return {name: float(w) for name, w in candidates.items() if w > 0}


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean per part and of the total (over the rows that part scored), errors, unscored rows,
    and how often each kind of reason was given (the text before its first colon)."""
    names = list(results[0]["rewards"]) if results else []
    means: dict[str, float | None] = {}
    for name in names:
        scored = [v for r in results if (v := r["rewards"].get(name)) is not None]
        means[name] = math.fsum(scored) / len(scored) if scored else None
    totals = [r["reward"] for r in results if r["reward"] is not None]
    reasons: Counter[str] = Counter()
    for r in results:
        for part, text in r["reasons"].items():
            reasons[f"{part}: {str(text).split(':', 1)[0].strip()}"] += 1
    return {
        "count": len(results),
        "means": means,
        "reward_mean": math.fsum(totals) / len(totals) if totals else None,
        "errors": sum(1 for r in results if r["error"]),
        "unscored": sum(1 for r in results if r["reward"] is None),
        "unscored_parts": {
            name: sum(1 for r in results if r["rewards"].get(name) is None) for name in names
        },
        "reasons": dict(reasons.most_common()),
    }


def _mean(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def summary_line(summary: dict[str, Any]) -> str:
    """The summary in one line: "1,000 samples · accuracy mean 0.600 · … · 0 errors"."""
    parts = [f"{summary['count']:,} samples"]
    parts += [f"{name} mean {_mean(m)}" for name, m in summary["means"].items()]
    parts.append(f"reward mean {_mean(summary['reward_mean'])}")
    errors = summary["errors"]
    parts.append(f"{errors:,} checker error{'' if errors == 1 else 's'}")
    parts.append(f"{summary['unscored']:,} unscored")
    return " · ".join(parts)


def score_file(path: str, rewards: RewardsConfig, data: DataConfig | None = None) -> ScoreReport:
    """Read, check and score a whole sample file (what the app's "Test on a file…" runs)."""
    problems = reward_problems(rewards)
    if problems:
        raise ScoreFileError("The reward settings need fixing:\n  - " + "\n  - ".join(problems))
    rows = read_score_file(path)
    results = list(score_rows(rewards, rows, data=data))
    return ScoreReport(rows, results, summarize(results), weights_of(rewards))
