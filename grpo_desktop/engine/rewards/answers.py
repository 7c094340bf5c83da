"""Finding the final answer in a completion, and noticing when it hedges.

`read_answer` returns every candidate value of the final answer region: the <answer> tags, else
the \\boxed{} answers, else the final-answer sentence ("The answer is 18.", "#### 18"), else the
last value in the text. Several different values ("17 or 18", two boxes) are how a hedge shows,
so the strict checker in engine.rewards.functions can score it 0. `read_reference` reads a
dataset's answer the same way (GSM8K's "… #### 72", a MATH solution's last \\boxed{}). A
closing "72 clips in total." followed only by remarks ("That is 24 fewer …") counts as a
final-answer sentence. `last_sentence` is the completion's last sentence, read for a word
reference ("The function is even." for \\text{even}).

Not here: comparing values (engine.rewards.values), understanding prose ("the answer is not
17"), answers spread over several sentences. Pure Python, linear in the length of the text.

Try it:
    python -c "from grpo_desktop.engine.rewards.answers import read_answer as r; print(r('It is 7 or 8'))"
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache

from grpo_desktop.engine.rewards.regions import (
    MARKER,
    MAX_REGION,
    VALUE_HINT,
    boxed_contents,
    is_prose,
    linked,
    region_values,
    set_elements,
)
from grpo_desktop.engine.rewards.values import (
    UNIT_QUANTITY,
    Value,
    clean_region,
    comma_parts,
    normalise_text,
    parse_value,
)

MODES = ("auto", "answer_tag", "boxed", "last_number")

_CORRECTION = re.compile(
    r"\b(?:wait|actually|mistake|error|wrong|incorrect|correct(?:ion|ing|ed)?|re-?check\w*|"
    r"recalculat\w*|redo|oops|sorry|double[- ]check\w*|reconsider\w*|instead|but|however|hmm)\b",
    re.IGNORECASE,
)
_ATOM = (
    r"(?:(?<![\d,])\d+,\d{1,2}(?![\d,]|\.\d)"  # "2,5": see values.DECIMAL_COMMA
    r"|(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?|\.\d+|\\sqrt\{[^{}]*\}|\\sqrt\d+"
    r"|\\pi(?![A-Za-z])|\\infty|\\frac\{[^{}]*\}\{[^{}]*\}|\\frac\d\d)(?:\^\{?-?\d+\}?)?"
)
_PROSE_VALUE = re.compile(
    rf"(?<![A-Za-z0-9_.\\])-?{_ATOM}(?:\s?/\s?{_ATOM}|{_ATOM})*"
    r"(?:\s*(?:\\times|\\cdot)\s*10\^\{?-?\d+\}?)?%?"
)
_NEGATED = re.compile(r"\b(?:not|instead\s+of|rather\s+than)\s*\$?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Reading:
    """Every candidate value of the final answer region, in order, and where it was found."""

    values: tuple[Value, ...]
    where: str = ""  # "answer tag", "boxed", "final-answer sentence", "last value" or ""

    def __bool__(self) -> bool:
        return bool(self.values)

    def distinct(self) -> list[Value]:
        """The values without repeats (by key), in the order first met."""
        seen: dict[str, Value] = {}
        for v in self.values:
            seen.setdefault(v.key, v)
        return list(seen.values())


# ---------------------------------------------------------------- the regions


def _tag_contents(text: str, tag: str) -> list[str]:
    """Non-empty contents of the closed <tag>…</tag> pairs, in order; linear time."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    out, pos = [], 0
    while (start := text.find(opening, pos)) != -1:
        close = text.find(closing, start)
        if close == -1:
            break
        start = text.rfind(opening, start, close)  # the innermost opening before this closing
        if content := text[start + len(opening) : close].strip():
            out.append(content)
        pos = close + len(closing)
    return out


def _sentence_end(text: str, start: int) -> int:
    """Where the sentence starting at `start` ends: a newline, or . ! ? before a space."""
    limit = min(len(text), start + 400)
    i = start
    while i < limit and text[i] in " \t\r\n*":
        i += 1
    for j in range(i, limit):
        c = text[j]
        if c == "\n" or (c in ".!?" and (j + 1 == len(text) or text[j + 1] in " \t\r\n*")):
            return j
    return limit


def _delimited(text: str, opening: str, closing: str, limit: int) -> list[tuple[int, int, str]]:
    """(start, end, inner) of each opening…closing pair at most `limit` long; linear time."""
    out, pos, close = [], 0, -1
    while (start := text.find(opening, pos)) != -1:
        if close < start + len(opening):
            close = text.find(closing, start + len(opening))
            if close == -1:
                break
        if close - start <= limit:
            out.append((start, close + len(closing), text[start + len(opening) : close]))
            pos = close + len(closing)
        else:
            pos = start + len(opening)
    return out


def _math_spans(text: str) -> list[tuple[int, int, str]]:
    """$…$, $$…$$, \\(…\\) and \\[…\\] formulas; a $ that opens no formula is a dollar sign."""
    spans: list[tuple[int, int, str]] = []
    for opening, closing in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)")):
        if opening in text:
            spans.extend(
                span
                for span in _delimited(text, opening, closing, 500)
                if not any(a <= span[0] < b for a, b, _ in spans[-1:])
            )
    spans.sort()
    starts = [a for a, _, _ in spans]

    def inside_a_formula(i: int) -> bool:
        k = bisect.bisect_right(starts, i) - 1
        return k >= 0 and i < spans[k][1]

    dollars = [
        m.start() for m in re.finditer(r"(?<!\\)\$", text) if not inside_a_formula(m.start())
    ]
    k = 0
    while k + 1 < len(dollars):
        a, b = dollars[k], dollars[k + 1]
        inner = text[a + 1 : b] if b - a < 200 else ""
        if inner.strip() and "\n" not in inner and not is_prose(inner):
            spans.append((a, b + 1, inner))
            k += 2
        else:
            k += 1
    return sorted(spans)


def _sentence_values(scope: str) -> list[Value]:
    """Values of the last final-answer sentence; with an earlier one that gave another value
    and no correction ("wait", "actually", …) between them, both (a hedge)."""
    found: list[tuple[int, int, list[Value]]] = []  # (marker start, sentence end, values)
    for m in reversed(list(MARKER.finditer(scope))[-8:]):
        end = _sentence_end(scope, m.end())
        if values := region_values(scope[m.end() : end], equations_per_piece=True):
            found.append((m.start(), end, values))
            if len(found) == 2:
                break
    if not found:
        return []
    start, _, values = found[0]
    if len(found) == 2:
        _, prev_end, prev = found[1]
        if {v.key for v in prev} - {v.key for v in values} and not _CORRECTION.search(
            scope[prev_end:start]
        ):
            return prev + values
    return values


_TOTAL = re.compile(r"\b(?:in\s+total|altogether|in\s+all)\b", re.IGNORECASE)
_REMARK = re.compile(
    r"\s*\**\s*\(?(?:that(?:'s|\s+is|\s+was|\s+means)|this\s+is|which\s+is|check|note|"
    r"for\s+comparison)\b",
    re.IGNORECASE,
)


def _total_values(scope: str) -> list[Value]:
    """Values of a closing "… in total." sentence followed only by remarks about it ("72 clips in
    total. That is 24 fewer than in April."): the total is the answer, not the remark's numbers."""
    sentences = [p for p in re.split(r"(?<=[.!?])\s+|\n+", scope[-2000:]) if p.strip(" *.!?")]
    remarks = 0
    while sentences and _REMARK.match(sentences[-1]):
        sentences.pop()
        remarks += 1
    if not remarks or not sentences or not _TOTAL.search(sentences[-1]):
        return []
    return region_values(sentences[-1]) if VALUE_HINT.search(sentences[-1]) else []


def _last_values(scope: str) -> list[Value]:
    """The last value in prose (a number, 3/4, √2, 2π or a $…$ formula) and the values joined to
    it as alternatives ("16, 17 or 18")."""
    if len(scope) > MAX_REGION and (tail := _last_values(scope[-MAX_REGION:])):
        return tail  # the end of a long text holds its last value
    tokens: list[tuple[int, int, str, bool]] = []  # start, end, text, is a formula
    pos = 0
    for a, b, inner in [*_math_spans(scope), (len(scope), len(scope), "")]:
        if a < pos:
            continue
        tokens.extend(
            (m.start(), m.end(), m.group(), False) for m in _PROSE_VALUE.finditer(scope, pos, a)
        )
        if inner and VALUE_HINT.search(inner):
            tokens.append((a, b, inner, True))
        pos = b

    def values_of(token: tuple[int, int, str, bool]) -> list[Value]:
        return region_values(token[2]) if token[3] else [parse_value(clean_region(token[2]))]

    if tokens and "\\" not in scope[tokens[-1][0] :]:
        # "2 hours 30 minutes" at the end is one quantity, not 2 and then 30
        for m in UNIT_QUANTITY.finditer(scope, max(0, tokens[-1][0] - 40)):
            if m.start() <= tokens[-1][0] < m.end():
                while tokens and tokens[-1][0] >= m.start():
                    tokens.pop()
                tokens.append((m.start(), m.end(), m.group(), False))
                break
    while len(tokens) > 1 and _NEGATED.search(scope[max(0, tokens[-1][0] - 20) : tokens[-1][0]]):
        tokens.pop()  # "It is 18, not 17."
    if not tokens:
        return []
    k = len(tokens) - 1
    out = values_of(tokens[k])
    while k > 0 and len(out) < 20:
        gap = scope[tokens[k - 1][1] : tokens[k][0]]
        if len(gap) > 40 or not linked(gap, allow_and=False):
            break
        k -= 1
        out = values_of(tokens[k]) + out
    return out


def read_answer(
    text: str, mode: str = "auto", answer_tag: str = "answer", think_tag: str = "think"
) -> Reading:
    """Every candidate value of the completion's final answer region, in order.

    mode: auto (tags, boxes, final-answer sentence, last value), answer_tag, boxed or
    last_number (that region only). Text after the last </think> is searched first, then the
    whole completion; a \\boxed{} inside a tag is what counts. Within a region a computation
    counts by its result ("9 × 2 = 18"), units and words are dropped ("18 dollars"), and an
    explanation after the answer is not a second answer ("18, since …", "18 (9 × 2)"); but
    alternatives are: "17 or 18", "16, 17, 18", two tags or boxes with different values."""
    if mode not in MODES:
        raise ValueError(f"unknown answer extraction mode {mode!r}; choose one of {MODES}")
    text = normalise_text(text)
    cut = text.rfind(f"</{think_tag}>")
    scopes = [text[cut + len(think_tag) + 3 :], text] if cut != -1 else [text]
    if mode in ("auto", "answer_tag"):
        for scope in scopes:
            tagged = [v for c in _tag_contents(scope, answer_tag) for v in region_values(c)]
            if tagged:
                return Reading(tuple(tagged), "answer tag")
    if mode in ("auto", "boxed"):
        for scope in scopes:
            boxed = [v for c in boxed_contents(scope) for v in region_values(c)]
            if boxed:
                return Reading(tuple(boxed), "boxed")
    if mode in ("auto", "last_number"):
        for scope in scopes:
            if mode == "auto" and (values := _sentence_values(scope)):
                return Reading(tuple(values), "final-answer sentence")
            if mode == "auto" and (values := _total_values(scope)):
                return Reading(tuple(values), "final-answer sentence")
            if values := _last_values(scope):
                return Reading(tuple(values), "last value")
    return Reading(())


def last_sentence(text: str, think_tag: str = "think") -> Reading:
    """The completion's last sentence as one text value, for a word reference when no value was
    found ("The function is even."); empty when there is none or it is long."""
    text = normalise_text(text)
    cut = text.rfind(f"</{think_tag}>")
    scope = (text[cut + len(think_tag) + 3 :] if cut != -1 else text).strip()[-400:]
    sentences = [p for p in re.split(r"(?<=[.!?])\s+|\n+", scope) if p.strip(" .!?*")]
    if not sentences or len(sentences[-1]) > 200:
        return Reading(())
    return Reading((Value(clean_region(sentences[-1])),), "last sentence")


@lru_cache(maxsize=4096)  # a step scores each reference G times
def read_reference(text: str) -> tuple[Value, ...]:
    """A dataset's answer as values: "… #### 1,234" -> (1234,), a MATH solution -> its last
    \\boxed{}, "2, -3" or "\\{2, -3\\}" -> (2, -3): a list, matched as a whole. () if empty."""
    s = normalise_text(str(text)).strip()
    if "####" in s:
        s = s.rsplit("####", 1)[1].strip()
    if boxes := boxed_contents(s):
        s = boxes[-1]
    values = comma_parts(region_values(s)) if s else []  # "1,2" in a dataset is a list
    if len(values) == 1 and (items := set_elements(values[0])) and len(items) > 1:
        return tuple(items)
    return tuple(values)
