"""Reward functions: accuracy of the final answer, the think/answer format, and a user checker.

Each follows TRL's convention (`fn(completions, **columns) -> list[float | None]`, None = could
not score). `RewardSet` combines those with a positive weight, keeps each one's raw column and
sums the weighted values (`weighted_total`): when any of them could not score the total is unknown
(None), so the row gets no advantage and stays out of its group's mean and spread. Accuracy reads
the final answer with engine.rewards.answers and its values with engine.rewards.values; the strict checker (the default) scores a hedge
("17 or 18") 0, the lenient one takes the last value, to show in the Lab how hedging wins
against a sloppy checker. Integers compare exactly, other numbers with a relative tolerance,
everything else (LaTeX, sets) with math-verify, run in a helper process off the main thread.
Not here: stripping a `<think>` the chat template already opened in the prompt (completions are
judged as generated). Imports neither torch nor math-verify at module level.

Try it:
    python -c "from grpo_desktop.engine.rewards.functions import accuracy_verdicts as a; \\
print(a(['<think>2*2</think><answer>4</answer>', 'It is 3 or 4.'], ['4', '4']))"
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

from grpo_desktop.engine.checker.runner import CheckerProcess
from grpo_desktop.engine.config import DataConfig, RewardsConfig
from grpo_desktop.engine.rewards.answers import (
    MODES,
    Reading,
    last_sentence,
    read_answer,
    read_reference,
    region_values,
    set_elements,
)
from grpo_desktop.engine.rewards.values import (
    Value,
    comma_parts,
    normalise_text,
    quick_compare,
    text_answer,
)

CHECKERS = ("strict", "lenient")
MATH_VERIFY_TIMEOUT_S = 10.0  # per comparison, helper process only (math-verify's own limit is 5 s)


# ---------------------------------------------------------------- math-verify


@lru_cache(maxsize=4096)
def _math_verify_equal(predicted: str, reference: str) -> bool:
    """math-verify's verdict on two $…$ strings (reference is the gold side). Main thread only:
    uses signal.alarm."""
    from math_verify import parse, verify

    try:
        gold, target = parse(reference), parse(predicted)
        return bool(gold and target and verify(gold, target))
    except Exception:
        return False


_VERIFIER_SOURCE = """
from grpo_desktop.engine.rewards.functions import _math_verify_equal

def check(predicted, reference, prompt):
    return _math_verify_equal(predicted, reference)
"""
_verifier: CheckerProcess | None = None
_verifier_lock = threading.Lock()


def _math_verify_many(pairs: list[tuple[str, str]]) -> list[tuple[bool, str | None]]:
    """(equal, error) per pair; a timeout or crash of the helper process is not equal.

    math-verify guards slow comparisons (9^{9^{9^9}}) with signal.alarm, which works only in the
    main thread; in any other (the GUI's training thread) the comparisons run in a helper
    process (checker.CheckerProcess) whose calls are killed after MATH_VERIFY_TIMEOUT_S."""
    if threading.current_thread() is threading.main_thread():
        return [(_math_verify_equal(p, r), None) for p, r in pairs]
    global _verifier
    with _verifier_lock:  # one helper process for all threads, started on first use
        if _verifier is None:
            _verifier = CheckerProcess(
                _VERIFIER_SOURCE, timeout_s=MATH_VERIFY_TIMEOUT_S, label="The math-verify helper"
            )
        results = _verifier.check_many(
            [p for p, _ in pairs], [r for _, r in pairs], [""] * len(pairs)
        )
    return [(res.value == 1.0, res.error) for res in results]


# ---------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class AccuracyVerdict:
    """One completion's accuracy: its score (None: no reference to compare with), the answer
    it was judged on, and why it scored 0 when that is worth telling (else None)."""

    score: float | None
    extracted: str | None
    reason: str | None = None


@dataclass(frozen=True)
class _Pending:  # a comparison only math-verify can decide
    pair: tuple[str, str]
    extracted: str


def _listing(values: list[Value], limit: int = 5) -> str:
    shown = ", ".join(v.text if len(v.text) <= 40 else v.text[:37] + "..." for v in values[:limit])
    return shown + (f" (and {len(values) - limit} more)" if len(values) > limit else "")


def _match_all(found: list[Value], items: tuple[Value, ...], tolerance: float) -> bool | None:
    """Whether the values are the reference's list (any order), if decidable without math-verify."""
    if len(found) != len(items):
        return False
    left = list(items)
    for v in found:
        for k, item in enumerate(left):
            same = quick_compare(v, item, tolerance)
            if same is None:
                return None
            if same:
                del left[k]
                break
        else:
            return False
    return True


def _decimal(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


def _plan(
    reading: Reading, refs: tuple[Value, ...], tolerance: float, checker: str
) -> AccuracyVerdict | _Pending:
    found = reading.distinct()
    if not refs:
        return AccuracyVerdict(None, None, None)
    if not found:
        return AccuracyVerdict(0.0, None, "no final answer found")
    if any(v.decimal_comma for v in found):
        # "2,5" is 2.5 with a decimal comma when that is the reference's value (a list 2, 5
        # cannot be a single reference); otherwise it is read as the list it may also be.
        if len(refs) == 1 and len(found) == 1 and quick_compare(found[0], refs[0], tolerance):
            return AccuracyVerdict(1.0, found[0].text, None)
        reading = Reading(tuple(comma_parts(reading.values)), reading.where)
        found = reading.distinct()
    if len(refs) > 1:  # the reference is a list or set: the answer must be the same list
        extracted = ", ".join(v.text for v in found)
        if len(found) == 1 and (elements := set_elements(found[0])):
            found = elements  # "\\{3, 2, 1\\}" for the list "1, 2, 3"
        same = _match_all(found, refs, tolerance) if len(found) > 1 else None
        if same is None and len(found) == 1 and found[0].number is not None:
            same = False
        if same is not None:
            return AccuracyVerdict(float(same), extracted, None)
        joined = (", ".join(v.text for v in found), ", ".join(v.text for v in refs))
        return _Pending(("$" + joined[0] + "$", "$" + joined[1] + "$"), extracted)
    if len(found) > 1 and checker == "strict":
        return AccuracyVerdict(0.0, None, f"several answers: {_listing(found)}")
    predicted = reading.values[-1] if len(found) > 1 else found[0]
    words = text_answer(predicted.text, refs[0].text) if predicted.number is None else None
    if words is not None and predicted.form is None:  # "The function is even." for \text{even}
        return AccuracyVerdict(float(words[0]), predicted.text, words[1])
    same = quick_compare(predicted, refs[0], tolerance)
    if same is False and predicted.also and predicted.number is not None:
        readings = " or ".join(_decimal(x) for x in (predicted.number, *predicted.also))
        reason = f"{predicted.text} is {readings} in the units it converts to, not the reference"
        return AccuracyVerdict(0.0, predicted.text, reason)
    if same is not None:
        return AccuracyVerdict(float(same), predicted.text, None)
    return _Pending((predicted.latex, refs[0].latex), predicted.text)


def _decide(plans: list[AccuracyVerdict | _Pending]) -> list[AccuracyVerdict]:
    pending = sorted({p.pair for p in plans if isinstance(p, _Pending)})
    decided = dict(zip(pending, _math_verify_many(pending))) if pending else {}
    out = []
    for p in plans:
        if isinstance(p, _Pending):
            equal, error = decided[p.pair]
            reason = f"could not compare with math-verify ({error})" if error else None
            out.append(AccuracyVerdict(float(equal), p.extracted, reason))
        else:
            out.append(p)
    return out


def _is_words(refs: tuple[Value, ...]) -> bool:
    """Whether the reference is one word answer ("even", "Monday", "\\text{yes}")."""
    return (
        len(refs) == 1
        and refs[0].number is None
        and bool(re.fullmatch(r"[A-Za-z][A-Za-z '\-]*", refs[0].text))
    )


def _check_choice(mode: str, checker: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown answer extraction mode {mode!r}; choose one of {MODES}")
    if checker not in CHECKERS:
        raise ValueError(f"unknown answer checker {checker!r}; choose one of {CHECKERS}")


def accuracy_options(rewards: RewardsConfig) -> dict[str, Any]:
    """The keyword arguments of `accuracy_verdicts` / `accuracy_reward` that a run's reward
    settings choose: how the answer is found, the tags, the tolerance and the checker."""
    return {
        "mode": rewards.answer_extraction,
        "answer_tag": rewards.answer_tag,
        "think_tag": rewards.think_tag,
        "tolerance": rewards.numeric_tolerance,
        "checker": rewards.answer_checker,
    }


def accuracy_verdicts(
    completions: list[str],
    answer: list[str],
    *,
    mode: str = "auto",
    answer_tag: str = "answer",
    think_tag: str = "think",
    tolerance: float = 1e-6,
    checker: str = "strict",
) -> list[AccuracyVerdict]:
    """Score, extracted answer and reason per completion (see AccuracyVerdict).

    strict: several different values in the final answer region score 0 ("several answers: …");
    lenient: the last of them is compared. An empty reference cannot score (None)."""
    if len(completions) != len(answer):
        raise ValueError(f"{len(completions)} completions but {len(answer)} answers")
    _check_choice(mode, checker)
    plans: list[AccuracyVerdict | _Pending] = []
    for completion, reference in zip(completions, answer):
        refs = read_reference("" if reference is None else str(reference))
        reading = read_answer(completion, mode, answer_tag, think_tag) if refs else Reading(())
        if (
            reading.where in ("", "last value")
            and mode in ("auto", "last_number")
            and _is_words(refs)
        ):
            # a stray number cannot be a word answer: the last sentence ("The function is even.")
            reading = last_sentence(completion, think_tag) or reading
        plans.append(_plan(reading, refs, tolerance, checker))
    return _decide(plans)


def accuracy_reward(
    completions: list[str],
    answer: list[str],
    *,
    mode: str = "auto",
    answer_tag: str = "answer",
    think_tag: str = "think",
    tolerance: float = 1e-6,
    checker: str = "strict",
    **kwargs: Any,
) -> list[float | None]:
    """1.0 correct, 0.0 wrong, hedged or no answer found; None when the reference is empty."""
    verdicts = accuracy_verdicts(
        completions,
        answer,
        mode=mode,
        answer_tag=answer_tag,
        think_tag=think_tag,
        tolerance=tolerance,
        checker=checker,
    )
    return [v.score for v in verdicts]


def extract_answer(
    text: str, mode: str = "auto", answer_tag: str = "answer", checker: str = "strict"
) -> str | None:
    """The final answer a checker would judge, as text; None when none is found or (strict)
    when the final answer region holds several different values."""
    _check_choice(mode, checker)
    reading = read_answer(text, mode, answer_tag)
    found = reading.distinct()
    if len(found) == 1:
        return found[0].text
    return reading.values[-1].text if found and checker == "lenient" else None


def answers_match(predicted: str | None, reference: str, tolerance: float = 1e-6) -> bool:
    """Whether an answer ("18 dollars", "\\frac{1}{2}", "x+1") equals the reference.

    Numbers: exactly when the reference is an integer, else within the relative tolerance.
    Otherwise equal text (whitespace ignored, and case for plain words) or math-verify
    ("\\frac{1}{2}" equals "0.5"); when math-verify fails or times out: no match."""
    if predicted is None or not str(predicted).strip():
        return False
    values = tuple(region_values(normalise_text(str(predicted))))
    plan = _plan(Reading(values), read_reference(reference), tolerance, "strict")
    return _decide([plan])[0].score == 1.0


# ---------------------------------------------------------------- reward functions


FORMAT_CREDITS = ("all", "per_tag")


def _tag_quarters(text: str, think_tag: str, answer_tag: str) -> float:
    """per_tag format credit: a quarter for each well-placed tag (see format_reward)."""
    tags = (f"<{think_tag}>", f"</{think_tag}>", f"<{answer_tag}>", f"</{answer_tag}>")
    where = [[m.start() for m in re.finditer(re.escape(tag), text)] for tag in tags]
    once = [w[0] if len(w) == 1 else None for w in where]  # a repeated tag is placed nowhere
    think, think_end, answer, answer_end = once
    score = 0.0
    if think is not None and not text[:think].strip():
        score += 0.25  # <think> opens the completion
    if think_end is not None and all(p < think_end for p in where[0]):
        score += 0.25  # </think> once, no <think> after it
    if (
        answer is not None
        and think_end is not None
        and think_end < answer
        and not text[think_end + len(tags[1]) : answer].strip()
    ):
        score += 0.25  # <answer> once, right after the reasoning
    if (
        answer_end is not None
        and answer is not None
        and answer < answer_end
        and text[answer + len(tags[2]) : answer_end].strip()
        and not text[answer_end + len(tags[3]) :].strip()
    ):
        score += 0.25  # </answer> once, closing a non-empty answer at the end
    return score


def format_reward(
    completions: list[str],
    *,
    think_tag: str = "think",
    answer_tag: str = "answer",
    credit: str = "all",
    **kwargs: Any,
) -> list[float]:
    """The think/answer format's score per completion, in [0, 1]; 1.0 under both credits for
    exactly <think>…</think> then <answer>…</answer> (non-empty answer, whitespace around the
    blocks allowed, no repeated or nested tags).

    credit "all" (all-or-nothing): that format 1.0, anything else 0.0.
    credit "per_tag" (partial credit): a quarter for each tag in its place,
      - <think> once, opening the completion (only whitespace before it);
      - </think> once, with no <think> after it;
      - <answer> once, right after </think> (only whitespace between the blocks);
      - </answer> once, after <answer>, closing a non-empty answer, only whitespace after it.
    A tag written twice earns nothing (nor does a tag whose place is judged against it: <answer>
    after a repeated </think>), and text outside the blocks costs the quarter of the tag it sits
    beside: before <think>, between the blocks, after </answer>. So "<think>…</think> The
    answer is 56" scores 0.5, a nested "<think>… <answer>56</answer></think>" 0.5, the full
    format with a remark after it 0.75.
    Why: a model that never writes all four tags scores 0 under "all" on every answer, so the
    format reward has no spread in any group and teaches nothing; per tag, an answer with more
    tags beats its siblings from the first step."""
    if credit not in FORMAT_CREDITS:
        raise ValueError(f"unknown format credit {credit!r}; choose one of {FORMAT_CREDITS}")
    if credit == "per_tag":
        return [_tag_quarters(c, think_tag, answer_tag) for c in completions]
    t, a = re.escape(think_tag), re.escape(answer_tag)
    no_tag = rf"(?:(?!</?(?:{t}|{a})>).)*"
    pattern = re.compile(rf"\s*<{t}>{no_tag}</{t}>\s*<{a}>({no_tag})</{a}>\s*", re.DOTALL)
    out = []
    for c in completions:
        m = pattern.fullmatch(c)
        out.append(1.0 if m and m.group(1).strip() else 0.0)
    return out


# ---------------------------------------------------------------- combining


def weighted_total(weights: dict[str, float], parts: dict[str, float | None]) -> float | None:
    """The reward of one completion: the sum of weight × part over the weighted parts, or None
    (unknown) when any of them could not score (None or NaN; a missing key counts as None).

    Why not sum the parts that did score: a right, well-formatted answer whose checker failed
    would total 1.2 beside siblings at 2.0 and be pushed down (advantage −0.577) for the
    checker's fault. Unknown, it gets no advantage and stays out of its group's mean and spread.
    Shared by RewardSet (training, Try, score) and the Lab, so both give the same totals.

    Try it: weighted_total({"accuracy": 1.0, "format": 0.2}, {"accuracy": 1.0, "format": 1.0})
    is 1.2; with "custom": None and a custom weight it is None.
    """
    out = []
    for name, weight in weights.items():
        v = parts.get(name)
        if v is None or math.isnan(v):
            return None
        out.append(weight * v)
    return math.fsum(out) if out else None


@dataclass
class RewardBatch:
    names: list[str]  # the functions used, e.g. ["accuracy", "format", "custom"]
    values: dict[str, list[float | None]]  # raw (unweighted) score per function, per completion
    totals: list[float | None]  # weighted sum; None when any function gave None (weighted_total)
    errors: list[str | None]  # checker error text per completion (None if fine)
    # The accuracy checker's extracted final answer per completion (None: none found / not used).
    extracted: list[str | None] = field(default_factory=list)
    # Why a part scored as it did, per completion: {function: reason}, e.g. {"accuracy":
    # "several answers: 17, 18"}; {} when there is nothing to say.
    reasons: list[dict[str, str]] = field(default_factory=list)


class RewardSet:
    """The reward functions of a config that have a positive weight.

    A custom checker is compiled and its process started here, so broken checker code raises
    CheckerError before the run begins. Close it (or use `with`) to stop the process.
    """

    def __init__(self, cfg: RewardsConfig, data: DataConfig | None = None):
        self.cfg = cfg
        # A reasoning-gym task run scores accuracy with the task's own checker, which finds each
        # problem's entry from the data settings (rewards/task_score.py); `score`'s prompts are
        # then the problem texts.
        self._task = None
        if data is not None and data.source == "task":
            from grpo_desktop.engine.rewards.task_score import TaskVerifier

            self._task = TaskVerifier(data)
        self.names: list[str] = []
        self.weights: dict[str, float] = {}
        self._checker: CheckerProcess | None = None
        candidates = [
            ("accuracy", cfg.accuracy_weight, True),
            ("format", cfg.format_weight, True),
            ("custom", cfg.custom_weight, bool(cfg.custom_checker.strip())),
        ]
        for name, weight, available in candidates:
            if available and weight > 0:
                self.names.append(name)
                self.weights[name] = float(weight)
        if "custom" in self.weights:
            self._checker = CheckerProcess(
                cfg.custom_checker,
                timeout_s=cfg.checker_timeout_s,
                memory_mb=cfg.checker_memory_mb,
            )

    def score(self, prompts: list[str], completions: list[str], answers: list[str]) -> RewardBatch:
        if not len(prompts) == len(completions) == len(answers):
            raise ValueError(
                f"score needs equal lengths, got {len(prompts)} prompts, "
                f"{len(completions)} completions and {len(answers)} answers"
            )
        cfg, n = self.cfg, len(completions)
        values: dict[str, list[float | None]] = {}
        errors: list[str | None] = [None] * n
        extracted: list[str | None] = [None] * n
        reasons: list[dict[str, str]] = [{} for _ in range(n)]
        if "accuracy" in self.weights:
            verdicts = (
                self._task.verdicts(prompts, completions, answers, **accuracy_options(cfg))
                if self._task is not None
                else accuracy_verdicts(completions, answers, **accuracy_options(cfg))
            )
            values["accuracy"] = [v.score for v in verdicts]
            extracted = [v.extracted for v in verdicts]
            for why, v in zip(reasons, verdicts):
                if v.reason:
                    why["accuracy"] = v.reason
        if "format" in self.weights:
            values["format"] = format_reward(
                completions,
                think_tag=cfg.think_tag,
                answer_tag=cfg.answer_tag,
                credit=cfg.format_credit,
            )
        if self._checker is not None:
            results = self._checker.check_many(completions, answers, prompts)
            values["custom"] = [r.value for r in results]
            errors = [r.error for r in results]
        totals = self._totals(values, n)
        return RewardBatch(list(self.names), values, totals, errors, extracted, reasons)

    def _totals(self, values: dict[str, list[float | None]], n: int) -> list[float | None]:
        weights = {name: self.weights[name] for name in self.names}
        return [
            weighted_total(weights, {name: values[name][i] for name in self.names})
            for i in range(n)
        ]

    @property
    def checker_protections(self) -> str | None:
        """The log line saying what the custom checker's sandbox holds back here (None: none)."""
        return self._checker.protections if self._checker is not None else None

    def close(self) -> None:
        """Stop the checker process, if any. Idempotent."""
        if self._checker is not None:
            self._checker.close()

    def __enter__(self) -> RewardSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
