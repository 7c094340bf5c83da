"""Reward functions: accuracy of the final answer, the think/answer format, and a user checker.

Each function follows TRL's convention (`fn(completions, **columns) -> list[float | None]`, one
value per completion, None = could not score). `RewardSet` combines the functions that have a
positive weight, keeps every function's raw column, and sums the weighted values that exist.

Accuracy reads the final answer from `<answer>` tags, `\\boxed{}` or the last number, compares plain
numbers with a relative tolerance, and everything else (fractions, LaTeX, expressions) with
math-verify. math-verify guards slow comparisons (9^{9^{9^9}}) with signal.alarm, which only works
in the main thread; in any other thread (the GUI's training QThread) its comparisons run in a
helper process (checker.CheckerProcess) whose calls are killed after `MATH_VERIFY_TIMEOUT_S`.

What this does not do: strip a `<think>` the chat template already opened in the prompt. Completions
are judged as generated; with such a template, the format reward asks for the whole structure.
Imports neither torch nor math-verify at module level.

Try it:
    python -c "from grpo_desktop.engine.rewards import accuracy_reward as a; \
print(a(['<think>2*2</think><answer>4</answer>', 'so 5'], ['4', '4']))"
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

from grpo_desktop.engine.checker import CheckerProcess
from grpo_desktop.engine.config import RewardsConfig

MODES = ("auto", "answer_tag", "boxed", "last_number")
MATH_VERIFY_TIMEOUT_S = 10.0  # per comparison, helper process only (math-verify's own limit is 5 s)
_MAX_MATH_LEN = 1000  # longer answers are compared as text only

# A number not glued to a preceding ASCII letter, digit or dot (so "x2" and "3-5" give no "-5").
_NUMBER_IN_TEXT = re.compile(
    r"(?<![A-Za-z0-9_.])-?(?:(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?|\.\d+)"
)
_PLAIN_NUMBER = re.compile(  # exponents stay small: Fraction("1e999999999") would never finish
    r"[+-]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d{1,3})?"
)
_BRACES = re.compile(r"\\boxed\{|\{|\}")
_WORD = re.compile(r"[A-Za-z]+")


# ---------------------------------------------------------------- extraction


def _last_tag_content(text: str, tag: str) -> str | None:
    """Content of the last non-empty <tag>…</tag>; linear time even on degenerate repetitions."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    end = len(text)
    while (close := text.rfind(closing, 0, end)) != -1:
        start = text.rfind(opening, 0, close)
        if start == -1:
            return None
        content = text[start + len(opening) : close].strip()
        if content:
            return content
        end = start
    return None


def _last_boxed(text: str) -> str | None:
    """Content of the last closed, non-empty \\boxed{...} (nested braces allowed), in one pass."""
    found, stack = None, []  # stack: per open brace, where its boxed content starts (or -1)
    for m in _BRACES.finditer(text):
        if m.group() != "}":
            stack.append(m.end() if m.group() != "{" else -1)
        elif stack and (start := stack.pop()) >= 0:
            found = text[start : m.start()].strip() or found
    return found


def _last_number(text: str) -> str | None:
    found = _NUMBER_IN_TEXT.findall(text)
    return found[-1] if found else None


def extract_answer(text: str, mode: str = "auto", answer_tag: str = "answer") -> str | None:
    """The final answer in a completion, or None when nothing is found.

    auto: the last non-empty <answer>…</answer> (a \\boxed{} inside it is unwrapped), else the last
    \\boxed{…}, else the last number (ints, decimals, negatives, 1,234 style).
    """
    if mode not in MODES:
        raise ValueError(f"unknown answer extraction mode {mode!r}; choose one of {MODES}")
    if mode in ("auto", "answer_tag"):
        tagged = _last_tag_content(text, answer_tag)
        if tagged is not None:
            return _last_boxed(tagged) or tagged
        if mode == "answer_tag":
            return None
    if mode in ("auto", "boxed"):
        boxed = _last_boxed(text)
        if boxed is not None or mode == "boxed":
            return boxed
    return _last_number(text)


# ---------------------------------------------------------------- comparison


def _normalise(s: str) -> str:
    """Whitespace removed; $…$, a leading $ (currency) and a trailing . or % dropped."""
    s = s.strip()
    if len(s) >= 2 and s.startswith("$") and s.endswith("$"):
        s = s.strip("$")
    s = s.removeprefix("\\$").removeprefix("$").rstrip(".").removesuffix("\\%").removesuffix("%")
    return re.sub(r"\s+", "", s)


def _as_number(s: str) -> Fraction | None:
    if not _PLAIN_NUMBER.fullmatch(s):
        return None
    try:
        return Fraction(s.replace(",", ""))
    except ValueError:  # more digits than int() accepts (4300)
        return None


def _quick_match(predicted: str | None, reference: str, tolerance: float) -> bool | None:
    """Decide cheaply when possible; None means "ask math-verify"."""
    if predicted is None or not predicted.strip():
        return False
    p, r = _normalise(predicted), _normalise(reference)
    if p == r:
        return True
    a, b = _as_number(p), _as_number(r)
    if a is not None and b is not None:
        tol = Fraction(tolerance)
        return abs(a) <= tol if b == 0 else abs(a - b) <= tol * abs(b)
    if _WORD.fullmatch(p) and _WORD.fullmatch(r):  # math-verify would read "yes" as y*e*s
        return p.lower() == r.lower()
    if len(predicted) > _MAX_MATH_LEN or len(reference) > _MAX_MATH_LEN:
        return False
    return None


def _latex(s: str) -> str:
    s = s.strip()
    return s if "$" in s or "\\boxed" in s else f"${s}$"


@lru_cache(maxsize=4096)
def _math_verify_equal(predicted: str, reference: str) -> bool:
    """math-verify's verdict (reference is the gold side). Main thread only: uses signal.alarm."""
    from math_verify import parse, verify

    try:
        gold, target = parse(_latex(reference)), parse(_latex(predicted))
        return bool(gold and target and verify(gold, target))
    except Exception:
        return False


_VERIFIER_SOURCE = """
from grpo_desktop.engine.rewards import _math_verify_equal

def check(predicted, reference, prompt):
    return _math_verify_equal(predicted, reference)
"""
_verifier: CheckerProcess | None = None
_verifier_lock = threading.Lock()


def _math_verify_many(pairs: list[tuple[str, str]]) -> list[bool]:
    if threading.current_thread() is threading.main_thread():
        return [_math_verify_equal(p, r) for p, r in pairs]
    global _verifier
    with _verifier_lock:  # one helper process for all threads, started on first use
        if _verifier is None:
            _verifier = CheckerProcess(
                _VERIFIER_SOURCE, timeout_s=MATH_VERIFY_TIMEOUT_S, label="The math-verify helper"
            )
        results = _verifier.check_many(
            [p for p, _ in pairs], [r for _, r in pairs], [""] * len(pairs)
        )
    return [res.value == 1.0 for res in results]  # a timeout or crash counts as no match


def _match_many(pairs: list[tuple[str | None, str]], tolerance: float) -> list[bool]:
    out = [_quick_match(p, r, tolerance) for p, r in pairs]
    pending = sorted({(p, r) for (p, r), o in zip(pairs, out) if o is None})
    verdicts = dict(zip(pending, _math_verify_many(pending))) if pending else {}
    return [o if o is not None else verdicts[pair] for pair, o in zip(pairs, out)]


def answers_match(predicted: str | None, reference: str, tolerance: float = 1e-6) -> bool:
    """Whether a predicted answer equals the reference.

    Plain numbers (commas, a leading $ and a trailing % or . ignored): relative tolerance, absolute
    when the reference is 0. Otherwise equal text (whitespace ignored, and case for plain words) or
    math-verify ("\\frac{1}{2}" equals "0.5"); when math-verify fails or times out: no match.
    """
    return _match_many([(predicted, reference)], tolerance)[0]


# ---------------------------------------------------------------- reward functions


def accuracy_reward(
    completions: list[str],
    answer: list[str],
    *,
    mode: str = "auto",
    answer_tag: str = "answer",
    tolerance: float = 1e-6,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 correct, 0.0 wrong or no answer found; None when the reference answer is empty."""
    if len(completions) != len(answer):
        raise ValueError(f"{len(completions)} completions but {len(answer)} answers")
    refs = ["" if a is None else str(a).strip() for a in answer]
    pairs = [(extract_answer(c, mode, answer_tag), r) for c, r in zip(completions, refs) if r]
    verdicts = iter(_match_many(pairs, tolerance))
    return [float(next(verdicts)) if r else None for r in refs]


def format_reward(
    completions: list[str], *, think_tag: str = "think", answer_tag: str = "answer", **kwargs: Any
) -> list[float]:
    """1.0 for exactly <think>…</think> then <answer>…</answer> (non-empty answer, whitespace
    around the blocks allowed, no repeated or nested tags); 0.0 otherwise."""
    t, a = re.escape(think_tag), re.escape(answer_tag)
    no_tag = rf"(?:(?!</?(?:{t}|{a})>).)*"
    pattern = re.compile(rf"\s*<{t}>{no_tag}</{t}>\s*<{a}>({no_tag})</{a}>\s*", re.DOTALL)
    out = []
    for c in completions:
        m = pattern.fullmatch(c)
        out.append(1.0 if m and m.group(1).strip() else 0.0)
    return out


# ---------------------------------------------------------------- combining


@dataclass
class RewardBatch:
    names: list[str]  # the functions used, e.g. ["accuracy", "format", "custom"]
    values: dict[str, list[float | None]]  # raw (unweighted) score per function, per completion
    totals: list[float | None]  # weighted sum skipping None; None if every function gave None
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

    def __init__(self, cfg: RewardsConfig):
        self.cfg = cfg
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
        if "accuracy" in self.weights:
            values["accuracy"] = accuracy_reward(
                completions,
                answers,
                mode=cfg.answer_extraction,
                answer_tag=cfg.answer_tag,
                tolerance=cfg.numeric_tolerance,
            )
        if "format" in self.weights:
            values["format"] = format_reward(
                completions, think_tag=cfg.think_tag, answer_tag=cfg.answer_tag
            )
        if self._checker is not None:
            results = self._checker.check_many(completions, answers, prompts)
            values["custom"] = [r.value for r in results]
            errors = [r.error for r in results]
        return RewardBatch(list(self.names), values, self._totals(values, n), errors)

    def _totals(self, values: dict[str, list[float | None]], n: int) -> list[float | None]:
        totals: list[float | None] = []
        for i in range(n):
            parts = [
                self.weights[name] * v
                for name in self.names
                if (v := values[name][i]) is not None and not math.isnan(v)
            ]
            totals.append(math.fsum(parts) if parts else None)
        return totals

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
