"""A TRL run's completion logs (`completions/completions_NNNNN.parquet`) as the app's rollout rows.

With `log_completions=True`, TRL 1.16's `GRPOTrainer.log` writes one parquet file per logging
step, one row per completion of the last generation batch, with the columns

    step, prompt, completion, <one column per reward function>, <extra logged columns>, advantage

`read_completions(path, reward_names)` turns one into (step, prompts, rows) in the shape of the
app's `Rollouts` event; `fit_weights` works the reward weights out of the log history. A file
from elsewhere can be huge (2,000,000 rows took 17 s and 2.3 GB read whole), so only its last
`MAX_ROWS` rows are read, row group by row group (`read_last_rows`), and each text is cut at
`MAX_TEXT_CHARS`. Needs pyarrow (imported on first use); no Qt, no torch.

    python -c "from grpo_desktop.session.trl_completions import read_completions as r;
    print(r('OUTPUT_DIR/completions/completions_00001.parquet')[2][0])"
"""

from __future__ import annotations

import math
import os
import re
from collections import deque
from typing import Any

from grpo_desktop.engine.runs.layout import numbered_entries

COMPLETIONS_DIR = "completions"
COMPLETION_FILE = re.compile(r"completions_(\d+)\.parquet")
FIXED_COLUMNS = ("step", "prompt", "completion", "advantage", "image")
EXTRACTED = "extracted"  # logged by the app's exported TRL projects: the answer the checker read
REASONS = "reasons"  # and why each function scored so, "name: why; name: why"
ANSWER_COLUMNS = ("answer", "solution", "ground_truth")
MAX_ROWS = 4096  # the last rows of one file that are read (one logging step's batch is smaller)
MAX_TEXT_CHARS = 100_000  # one prompt, completion or reason as shown


def completion_files(folder: str) -> list[tuple[int, str]]:
    """(step, path) of every completions parquet file of a TRL output_dir, oldest first."""
    return numbered_entries(os.path.join(folder, COMPLETIONS_DIR), COMPLETION_FILE, folders=False)


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text`, cut at `limit` characters with a note of how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters not shown]"


def message_text(value: Any) -> str:
    """A prompt or completion as text: a string as is, a message list as `role: content` lines
    (a completion's single assistant message: its content only)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        messages = [m for m in value if isinstance(m, dict)]
        if len(messages) == 1 and messages[0].get("role") == "assistant":
            return str(messages[0].get("content") or "")
        return "\n".join(f"{m.get('role', '?')}: {m.get('content') or ''}" for m in messages)
    return str(value)


def prompt_text(value: Any) -> str:
    """A prompt as the app shows one: the question first. A message list reads as its last user
    message, then the messages before it (system prompt, earlier turns) as `role: content`
    lines after a blank line; a string as is."""
    if not isinstance(value, list):
        return message_text(value)
    messages = [m for m in value if isinstance(m, dict)]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        return message_text(messages)
    last = users[-1]
    rest = messages[:last] + messages[last + 1 :]
    question = str(messages[last].get("content") or "")
    return f"{question}\n\n{message_text(rest)}" if rest else question


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def reward_columns(
    columns: list[str], types: dict[str, str], reward_names: set[str] | None
) -> list[str]:
    """The reward function columns: those the log history names (rewards/NAME/mean), else
    (no history yet) every floating-point column that is not one of TRL's fixed ones."""
    rest = [c for c in columns if c not in FIXED_COLUMNS and c != EXTRACTED]
    if reward_names:
        return [c for c in rest if c in reward_names]
    return [c for c in rest if types.get(c, "").startswith(("double", "float"))]


def row_count(path: str) -> int:
    """How many rows a completions file holds (from its footer: nothing else is read)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def read_last_rows(path: str, max_rows: int = MAX_ROWS):
    """(table of the file's last `max_rows` rows, the file's row count). Only the row groups
    that hold those rows are read, batch by batch, so memory stays bounded however many rows
    the file has. Raises OSError or ValueError (pyarrow's errors) for a file that cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    max_rows = max(1, max_rows)
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    groups: list[int] = []
    count = 0
    for group in reversed(range(meta.num_row_groups)):
        groups.insert(0, group)
        count += meta.row_group(group).num_rows
        if count >= max_rows:
            break
    batches: deque = deque()
    kept = 0
    for batch in pf.iter_batches(batch_size=max_rows, row_groups=groups):
        batches.append(batch)
        kept += batch.num_rows
        while batches and kept - batches[0].num_rows >= max_rows:
            kept -= batches.popleft().num_rows
    table = pa.Table.from_batches(list(batches), schema=pf.schema_arrow)
    return table.slice(max(0, kept - max_rows)), meta.num_rows


def read_completions(
    path: str,
    reward_names: set[str] | None = None,
    weights: dict[str, float] | None = None,
    max_rows: int = MAX_ROWS,
) -> tuple[int, list[str], list[dict]]:
    """(step, each group's prompt, rows) of one completions file; raises OSError or ValueError
    (pyarrow's errors are ValueErrors) for a file that cannot be read, e.g. one being written.
    Only its last `max_rows` rows are read (a logging step writes one batch: a few hundred),
    and a text longer than MAX_TEXT_CHARS is cut there with a note saying how much is left out.

    Groups are runs of the same prompt (TRL writes each prompt's G completions together). A
    prompt or completion is a string, or a message list ({role, content}) for a conversational
    dataset (shown question first, then the system prompt: `prompt_text`). Rows hold group,
    completion, rewards ({name: value | None}; NaN, a function that could not score, is None),
    reward and advantage. `reward` is the sum of the parts that scored, each times its weight in
    `weights` (1 when not known, TRL's default; None when no part scored). What TRL does not
    write stays out: token length, cut-off, reward weights, and the reference answer unless a
    column named answer, solution or ground_truth was logged. A column named extracted (as the
    app's exported TRL projects log) is the answer the checker read; one named reasons ("name:
    why; …") and any other extra column become the row's `reasons`, shown by the inspector."""
    table, _total = read_last_rows(path, max_rows)
    columns = list(table.column_names)
    if "completion" not in columns:
        raise ValueError("it has no completion column (not a TRL completions log)")
    types = {f.name: str(f.type) for f in table.schema}
    rewards = reward_columns(columns, types, reward_names)
    extra = [c for c in columns if c not in FIXED_COLUMNS and c not in rewards]
    answer = next((c for c in ANSWER_COLUMNS if c in extra), None)
    records = table.to_pylist()
    match = COMPLETION_FILE.fullmatch(os.path.basename(path))
    step = int(match.group(1)) if match else 0
    if records and isinstance(records[0].get("step"), int):
        step = int(records[0]["step"])
    prompts: list[str] = []
    rows: list[dict] = []
    last_prompt: str | None = None
    for record in records:
        prompt = clip(prompt_text(record.get("prompt")))
        if prompt != last_prompt or not prompts:
            prompts.append(prompt)
            last_prompt = prompt
        parts = {name: _score(record.get(name)) for name in rewards}
        weight = weights or {}
        scored = [v * weight.get(k, 1.0) for k, v in parts.items() if v is not None]
        row = {
            "group": len(prompts) - 1,
            "completion": clip(message_text(record.get("completion"))),
            "rewards": parts,
            "reward": sum(scored) if scored else None,
            "advantage": _score(record.get("advantage")),
            "error": None,
        }
        if answer is not None:
            row["answer"] = "" if record.get(answer) is None else clip(str(record.get(answer)))
        if EXTRACTED in extra:
            value = record.get(EXTRACTED)
            row["extracted"] = None if value is None else clip(str(value))
        named = (answer, EXTRACTED, REASONS)
        reasons = _reasons(record.get(REASONS)) if REASONS in extra else {}
        reasons.update(
            (c, clip(str(record.get(c))))
            for c in extra
            if c not in named and record.get(c) is not None
        )
        if reasons:
            row["reasons"] = reasons
        rows.append(row)
    return step, prompts, rows


def _reasons(value: Any) -> dict[str, str]:
    """The exported projects' "name: why; name: why" as {name: why} (text that does not split
    so stays whole under "reasons"); {} for an empty value."""
    if not value:
        return {}
    out = {}
    for part in str(value).split("; "):
        name, sep, why = part.partition(": ")
        if not sep:
            return {REASONS: str(value)}
        out[name] = why
    return out


def fit_weights(steps: dict[int, dict], names: list[str]) -> dict[str, float] | None:
    """The reward weights w that make each step's logged reward Σ w·rewards/NAME/mean (TRL's
    weighted sum, GRPOConfig.reward_weights), by least squares over the steps; None when the
    steps cannot tell them apart and check them (no more steps than functions, a part that
    never varies against another) or the fit is not exact (a part that could not score some
    answers)."""
    import numpy as np

    rows, totals = [], []
    for metrics in steps.values():
        means = [metrics.get(f"rewards/{n}/mean") for n in names]
        if metrics.get("reward") is not None and all(m is not None for m in means):
            rows.append(means)
            totals.append(metrics["reward"])
    if not names or len(rows) <= len(names):  # as many steps as unknowns always "fit"
        return None
    a, b = np.array(rows, dtype=float), np.array(totals, dtype=float)
    w, _, rank, _ = np.linalg.lstsq(a, b, rcond=None)
    if rank < len(names) or np.abs(a @ w - b).max() > 1e-5 * max(1.0, np.abs(b).max()):
        return None
    return {n: float(np.round(x, 6)) for n, x in zip(names, w, strict=True)}


def advantage_histogram(values: list[float | None], bins: int = 21) -> dict:
    """The engine's histogram of advantages (engine/loss.advantage_histogram, without torch):
    ±max(|A|, 1e-6) in `bins` bins, values that are None left out."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    limit = max((abs(v) for v in finite), default=0.0)
    limit = max(limit, 1e-6)
    edges = [limit * (2 * i - bins) / bins for i in range(bins + 1)]
    counts = [0] * bins
    for v in finite:
        counts[min(bins - 1, max(0, math.floor((v + limit) / (2 * limit) * bins)))] += 1
    return {"edges": edges, "counts": counts}
