"""Compare before and after: the same problems through two variants of a run's model.

`compare_run(run_dir, "base", "latest", n=100)` answers `n` problems greedily with side A (the
base model or a checkpoint) and side B (a checkpoint), scores each answer with the run's own
accuracy check and returns a `Comparison`: one `CompareRow` per problem and a summary
(variants/compare_table.py: accuracy with a 95 % interval per side, fixed / broken / both right /
both wrong). Prompts are built and answered exactly as in the held-out evaluation, with one base
model in memory (variants/run_variants.py switches the adapter per side).

Does not write anything (compare_table.write_csv does, when asked). Try it:
    grpo-desktop eval runs/demo --compare base --table /tmp/cmp.csv
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.data.dataset import Example, load_data
from grpo_desktop.engine.data.sources import FILE_EXTENSIONS, open_source
from grpo_desktop.engine.errors import DataError, UserError
from grpo_desktop.engine.grpo.evaluate import EVAL_BATCH, _answer_batches
from grpo_desktop.engine.models.loading import model_import_events
from grpo_desktop.engine.models.remote_code import RemoteCodePermission
from grpo_desktop.engine.rewards.task_score import accuracy_verdicts_for
from grpo_desktop.engine.runs.files import read_run_config
from grpo_desktop.engine.variants.compare_table import CompareRow, CompareSummary, summarize
from grpo_desktop.engine.variants.eval_target import held_out_examples
from grpo_desktop.engine.variants.run_variants import (
    ModelVariants,
    Variant,
    find_variant,
    run_variants,
)
from grpo_desktop.engine.variants.trl_config import trl_run_config
from grpo_desktop.engine.variants.trl_models import is_trl_output

HELD_OUT = "held-out"

Progress = Callable[[int, int], None]


@dataclass
class Comparison:
    """What a comparison found; `cancelled`: stopped early, `rows` are the problems finished."""

    a: Variant
    b: Variant
    rows: list[CompareRow]
    source: str  # "held-out" or the problem file's path
    asked: int  # problems asked for (len(rows) is smaller after a cancel)
    cancelled: bool = False
    seconds: float = 0.0
    summary: CompareSummary = field(init=False)

    def __post_init__(self) -> None:
        self.summary = summarize(self.rows, self.a.label, self.b.label)

    def to_dict(self) -> dict:
        """The JSON line `grpo-desktop eval --compare` prints."""
        out = self.summary.to_dict()
        out["a"]["step"], out["b"]["step"] = self.a.step, self.b.step
        out.update(source=self.source, cancelled=self.cancelled, seconds=round(self.seconds, 1))
        return out


def compare_problems(cfg: TrainConfig, n: int, seed: int = 0, path: str | None = None):
    """The problems to compare on: (examples, source) — the run's held-out set as
    `grpo-desktop eval` picks it, or the first `n` usable rows of the file at `path`."""
    if path is None:
        return held_out_examples(cfg, n, seed), HELD_OUT
    if n < 1:
        raise UserError(f"The number of problems must be at least 1, got {n}.")
    if not path.lower().endswith(FILE_EXTENSIONS):
        raise DataError(
            f"{path}: problems are read from a .jsonl, .json, .csv or .parquet file, with the "
            f"run's columns '{cfg.data.prompt_column}' (problem) and "
            f"'{cfg.data.answer_column}' (answer)."
        )
    d = cfg.data
    file_cfg = dataclasses.replace(d, source="file", path=path, eval_size=0)
    columns = open_source(file_cfg, limit=1)[0].columns  # DataError: missing, unreadable
    missing = [c for c in (d.prompt_column, d.answer_column) if c not in columns]
    if missing:  # the run's mapping cannot be changed here: say what the file must hold
        raise DataError(
            f"{path} has no column {' or '.join(repr(c) for c in missing)}. Its columns are: "
            f"{', '.join(columns) or 'none'}. A problem file is read with the run's columns: "
            f"'{d.prompt_column}' for the problem and '{d.answer_column}' for the gold answer; "
            "rename the file's columns to those."
        )
    return load_data(file_cfg).train[:n], path


def pick_sides(variants: list[Variant], a: str | Variant, b: str | Variant, where: str = ""):
    """(side A, side B) from their names ("base", "latest", "40", "step-40"); UserError for a
    run with no checkpoint, an unknown step (the message lists them) or the same variant twice."""
    if len(variants) < 2:
        raise UserError(
            f"{where or 'This run'} has no checkpoint yet, so there is nothing to compare with "
            "the base model. Train it until a checkpoint is saved (every run.checkpoint_every "
            "steps, and at the end), or choose another run."
        )
    side_a, side_b = find_variant(variants, a), find_variant(variants, b)
    if side_a.key == side_b.key:
        raise UserError(
            f"Both sides are {side_a.label}: choose two different models to compare (the base "
            "model and a checkpoint, or two checkpoints)."
        )
    return side_a, side_b


def run_comparison(
    mv: ModelVariants,
    a: str | Variant,
    b: str | Variant,
    examples: list[Example],
    *,
    source: str = HELD_OUT,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Comparison:
    """Answer `examples` with variants `a` and `b` of the loaded run.

    Each batch of problems is answered by A, then by B, so a cancel (`cancel.set()`) returns the
    problems finished so far, each with both answers (two full-fine-tuning checkpoints: all of A
    first, see _passes). `progress(done, total)` counts answers (2 per problem)."""
    t0 = time.perf_counter()
    side_a, side_b = pick_sides(mv.variants, a, b, mv.run_dir or "")
    cfg, total = mv.cfg, 2 * len(examples)
    texts: dict[str, list[str]] = {side_a.key: [], side_b.key: []}
    done, cancelled = 0, False
    for variant, chunk in _passes(side_a, side_b, examples):
        answered = _answer(mv, variant, chunk, cfg, done, total, progress, cancel)
        if answered is None:
            cancelled = True
            break
        texts[variant.key].extend(answered)
        done += len(chunk)
        if progress is not None:
            progress(done, total)
    both = min(len(texts[side_a.key]), len(texts[side_b.key]))
    rows = list(_rows(examples[:both], texts[side_a.key], texts[side_b.key], cfg))
    seconds = time.perf_counter() - t0
    return Comparison(side_a, side_b, rows, source, len(examples), cancelled, seconds)


def _passes(side_a: Variant, side_b: Variant, examples: list[Example]):
    """(variant, problems) in the order they are answered: each batch by A then B, so a cancel
    keeps whole rows — unless both sides are full-weights checkpoints (a second model each,
    loaded one at a time: alternating would reload them every batch), then all of A first."""
    chunks = [examples[i : i + EVAL_BATCH] for i in range(0, len(examples), EVAL_BATCH)]
    if all(v.weights is not None and not v.is_adapter for v in (side_a, side_b)):
        return [(side_a, c) for c in chunks] + [(side_b, c) for c in chunks]
    return [(v, c) for c in chunks for v in (side_a, side_b)]


class _Active:
    """What evaluate._answer_batches reads: the model to answer with, its tokenizer, device."""

    def __init__(self, model, tokenizer, device):
        self.model, self.tokenizer, self.device = model, tokenizer, device


def _answer(mv, variant, chunk, cfg, done, total, progress, cancel) -> list[str] | None:
    """One variant's greedy completions of `chunk`; None when cancelled during it."""
    if cancel is not None and cancel.is_set():
        return None
    steps = max(cfg.algorithm.max_completion_length, 1)
    shown = [done]

    def on_token(t: int, _tokens) -> bool:
        if cancel is not None and cancel.is_set():
            return False
        now = done + (len(chunk) * (t + 1)) // (steps + 1)  # reaches `done + len` only at the end
        if progress is not None and now > shown[0]:
            shown[0] = now
            progress(now, total)
        return True

    with mv.use(variant) as model:
        policy = _Active(model, mv.tokenizer, mv.device)
        texts: list[str] = []
        for _batch, comps in _answer_batches(policy, chunk, cfg, greedy=True, on_token=on_token):
            texts.extend(comps.texts)
    if cancel is not None and cancel.is_set():
        return None
    return texts


def _rows(chunk: list[Example], texts_a: list[str], texts_b: list[str], cfg: TrainConfig):
    gold = [ex.answer for ex in chunk]
    problems = [ex.problem for ex in chunk]
    verdicts_a, verdicts_b = (_verdicts(problems, texts, gold, cfg) for texts in (texts_a, texts_b))
    for ex, text_a, text_b, va, vb in zip(chunk, texts_a, texts_b, verdicts_a, verdicts_b):
        yield CompareRow(
            ex.problem,
            ex.answer,
            va.extracted,
            va.score == 1.0,
            vb.extracted,
            vb.score == 1.0,
            text_a,
            text_b,
        )


def _verdicts(problems: list[str], texts: list[str], gold: list[str], cfg: TrainConfig):
    """The run's accuracy verdicts (a reasoning-gym task run: the task's own checker)."""
    return accuracy_verdicts_for(cfg.data, cfg.rewards, problems, texts, gold)


def compare_run(
    run_dir: str,
    a: str = "base",
    b: str = "latest",
    *,
    n: int = 100,
    seed: int = 0,
    problems: str | None = None,
    remote_code: RemoteCodePermission | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    fallback: TrainConfig | None = None,
    importing: Callable[[str], None] | None = None,
) -> Comparison:
    """Load the run once and compare side `a` with side `b`.

    The problems are the held-out set that `grpo-desktop eval` scores
    (variants/eval_target.py, `held_out_examples`: same `n` and `seed`, same problems, so side
    B's accuracy equals `grpo-desktop eval` on that checkpoint), or the rows of the file
    `problems` (.jsonl, .json, .csv, .parquet) read with the run's prompt and answer columns.
    Answers are scored with the run's answer extraction, checker, tags and tolerance. A TRL
    output_dir is loaded and scored with the config engine/variants/trl_config.py builds for it
    (`fallback`'s data and rewards when no exported settings are beside it; the defaults when
    None). Bad input (no checkpoint, unknown step, unreadable problem file) raises UserError
    before any model is loaded. A GGUF model not yet imported is imported first, each progress
    line told to `importing(text)`; `cancel` stops the import too (ImportStopped)."""
    if is_trl_output(run_dir):
        cfg = trl_run_config(run_dir, fallback or TrainConfig()).config
    else:
        cfg = read_run_config(run_dir)
    variants = run_variants(run_dir)
    pick_sides(variants, a, b, run_dir)
    examples, source = compare_problems(cfg, n, seed, problems)
    stop = cancel.is_set if cancel is not None else None
    for event in model_import_events(cfg, should_stop=stop):
        if importing is not None:
            importing(event.message)
    mv = ModelVariants(cfg, run_dir, remote_code=remote_code, variants=variants)
    try:
        return run_comparison(mv, a, b, examples, source=source, progress=progress, cancel=cancel)
    finally:
        mv.close()
