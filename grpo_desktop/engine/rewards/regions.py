"""The value(s) in one answer region: a tag's or a box's content, or a final-answer sentence.

`region_values` reads "18 dollars", "$18.00", "320,000 people", "x = 5", "16 - 3 - 4 = 9 eggs,
9 × 2 = $18" as one value each (units and words dropped; a computation counts by its result; an
explanation after the value, "18 (9 × 2)", is not a second value) and returns every alternative
it offers: "17 or 18", "16, 17, 18", "x = 2 or x = -3", boxes inside a tag, "18, maybe 20".
engine.rewards.answers finds the regions; the checkers in engine.rewards.functions decide what
several values mean.

Not here: prose beyond "or/and/maybe" and commas ("She has 18 apples after eating 2" reads as 18
and stops at the words), comparing values (engine.rewards.values). Pure Python.

Try it:
    python -c "from grpo_desktop.engine.rewards.regions import region_values as r; \\
print(r('x = 2 or x = -3'))"
"""

from __future__ import annotations

import re

from grpo_desktop.engine.rewards.values import (
    UNIT_QUANTITY,
    Value,
    clean_region,
    comma_parts,
    parse_value,
    spelled_quantities,
    word_number,
)

MAX_REGION = 5000  # characters of an answer region that are read
_BRACES = re.compile(r"\\(?:boxed|fbox)\s*\{|\{|\}")
MARKER = re.compile(
    r"(?<![<\w/])(?:(?:the|my|our)\s+)?(?:(?:final\s+|correct\s+)?answers?|final\s+result)"
    r"\s*(?:\*\*)?\s*"
    r"(?:is|are|was|would\s+be|will\s+be|should\s+be|=|:)(?:\s*\*\*)?\s*:?|####",
    re.IGNORECASE,
)
_MATH_NAMES = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "lim", "max",
               "min", "gcd", "lcm", "mod", "det", "arcsin", "arccos", "arctan", "sinh", "cosh",
               "tanh"}  # fmt: skip
_SHORT_WORDS = {"or", "is", "of", "in", "an", "at", "to", "it", "so", "be", "by", "on", "we", "he",
                "if", "as", "am", "pm", "my", "no", "do", "me", "us", "vs", "cm", "mm", "km", "kg",
                "mg", "ml", "ft", "yd", "lb", "oz", "mi", "hr"}  # fmt: skip
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]+(?:'[A-Za-z]+)?(?:/[A-Za-z]+)*(?:\^\{?\d+\}?)?")
_ARTICLE = re.compile(r"(?<![\\\w^_{])[aAI](?![\w^_}(])")
_HEDGES = {"or", "either", "maybe", "perhaps", "possibly", "alternatively"}
_CONNECTORS = _HEDGES | {"and", "nor"}
_STOPPERS = {"not", "rather", "instead"}
_EXPLANATION = re.compile(r"(\d%?(?:\s*[A-Za-z]+)?)\s+\(([^()]*)\)")
_HEDGE_WORD = re.compile(r"\b(?:or|either|maybe|perhaps|possibly|alternatively)\b", re.IGNORECASE)
_OPERATOR = re.compile(r"[A-Za-z]{3,}|[-+*/=]|\\times|\\cdot|\\div")
_VAR_LHS = re.compile(r"(?:^|(?<=[\s,;(]))[A-Za-z](?:_\{?[A-Za-z0-9]+\}?|')?\s*$")
_APPROX = re.compile(r"\\approx|\\sim(?![a-z])")
VALUE_HINT = re.compile(r"\d|\\(?:pi|infty|sqrt|frac)")
_NEXT_NUMBER = re.compile(r"\s*[-+]?\.?\d")
_UNIT_HINT = re.compile(r"cent|¢|\d\s*(?:h|hours?|hrs?)\b", re.IGNORECASE)
_LINK_GAP = re.compile(r"[\sA-Za-z',;$]*")


def boxed_contents(text: str) -> list[str]:
    """Contents of the closed, non-empty, outermost \\boxed{…} in order (nested braces allowed)."""
    if "box" not in text:
        return []
    found: list[tuple[int, str]] = []
    stack: list[int] = []  # per open brace: where its boxed content starts, or -1
    depth_of_box = -1  # stack depth of the outermost open box, -1 if none
    for m in _BRACES.finditer(text):
        if m.group() != "}":
            is_box = m.group() != "{" and depth_of_box == -1
            if is_box:
                depth_of_box = len(stack)
            stack.append(m.end() if is_box else -1)
        elif stack:
            start = stack.pop()
            if start >= 0:
                depth_of_box = -1
                if content := text[start : m.start()].strip():
                    found.append((start, content))
    return [content for _, content in sorted(found)]


# ---------------------------------------------------------------- values in a region


def is_prose(s: str) -> bool:
    s = re.sub(r"\\text\w*\s*\{[^{}]*\}", " ", s) if "\\text" in s else s
    for m in _WORD.finditer(s):
        word = m.group().split("'")[0].split("/")[0].split("^")[0].lower()
        if (len(word) >= 3 and word not in _MATH_NAMES) or word in _SHORT_WORDS:
            return True
    return False


def _top_level(s: str, chars: str) -> list[int]:
    """Positions of `chars` outside (), [] and {}."""
    out, depth = [], 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and c in chars:
            out.append(i)
    return out


def _equals(s: str) -> list[int]:
    """Top-level '=' that are equations (not <=, >=, != or ==)."""
    return [
        i for i in _top_level(s, "=")
        if s[i - 1 : i] not in ("<", ">", "!", "=") and s[i + 1 : i + 2] != "="
    ]  # fmt: skip


def _after_equals(s: str) -> str:
    """A computation's result: "16 - 3 - 4 = 9" -> "9"; "\\frac{22}{7} \\approx 3.14" -> the left."""
    if eqs := _equals(s):
        s = s[eqs[-1] + 1 :]
    if "\\approx" in s or "\\sim" in s:
        parts = _APPROX.split(s, maxsplit=1)
        s = parts[0] if VALUE_HINT.search(parts[0]) else parts[-1]
    return s


def _assignments(s: str) -> list[str] | None:
    """Right-hand sides of a list of assignments ("x = 2 or x = -3", "x=1, y=2"), else None."""
    eqs = _equals(s)
    if len(eqs) < 2:
        return None
    lhs_starts = []
    for i in eqs:
        m = _VAR_LHS.search(s, max(0, i - 16), i)  # a short window: linear time
        if m is None:
            return None
        lhs_starts.append(m.start())
    ends = lhs_starts[1:] + [len(s)]
    return [s[i + 1 : end] for i, end in zip(eqs, ends)]


def _decimal_comma_at(s: str, i: int) -> bool:
    """Whether the comma at i is inside a lone "2,5" (not "1,2,3", "1.5,2" or "1,500")."""
    start = i
    while start > 0 and s[start - 1].isdigit():
        start -= 1
    if start == i or s[start - 1 : start] in (",", ".") or s[start - 1 : start].isalpha():
        return False
    return re.match(r"\d{1,2}(?![\d,A-Za-z]|\.\d)", s[i + 1 : i + 5]) is not None


def split_list(s: str) -> list[str]:
    """Top-level pieces of a list: separated by , or ; (not 1,800) or by spaces between numbers."""
    cuts = []
    for i in _top_level(s, ",; \t\r\n"):
        c = s[i]
        if c == ",":
            thousands = s[i - 1 : i].isdigit() and re.match(r"\d{3}(?![\d.])", s[i + 1 : i + 5])
            if not thousands and not _decimal_comma_at(s, i):
                cuts.append(i)
        elif (
            c == ";" or (s[i - 1 : i].isdigit() or s[i - 1 : i] == "%") and _NEXT_NUMBER.match(s, i)
        ):
            cuts.append(i)
    pieces, prev = [], 0
    for i in cuts:
        pieces.append(s[prev:i])
        prev = i + 1
    pieces.append(s[prev:])
    return pieces


def _balanced(piece: str) -> str:
    """Without the brackets that words cut off: "18 (" -> "18", "20)" -> "20"."""
    opens, closes = piece.count("(") + piece.count("["), piece.count(")") + piece.count("]")
    if opens != closes:
        piece = piece.strip(" ([" if opens > closes else " )]")
    return piece.strip()


def linked(gap: str, allow_and: bool = True) -> bool:
    """Whether text between two values joins them as alternatives ("or", ",", "apples or")."""
    if not _LINK_GAP.fullmatch(gap.replace("*", "")):
        return False
    words = [w.lower() for w in re.findall(r"[A-Za-z']+", gap)]
    if any(w in _STOPPERS for w in words):
        return False
    others = [w for w in words if w not in _CONNECTORS]
    if len(others) > 1:
        return False
    if any(w in _HEDGES for w in words) or "," in gap or ";" in gap or not words:
        return True
    return allow_and and words == ["and"]


def _values_in(s: str, equations_per_piece: bool = False) -> list[Value]:
    """The answer's value(s) in a cleaned piece of text: the first value and its alternatives."""
    s = spelled_quantities(s)
    s = _EXPLANATION.sub(
        lambda m: m.group() if _HEDGE_WORD.search(m.group(2)) or not _OPERATOR.search(m.group(2))
        else m.group(1),
        s,
    )  # fmt: skip
    prose = is_prose(s)
    items: list[Value | str] = []  # values and the gaps between them
    if prose:
        s = _ARTICLE.sub(" ", s)
    parts, prev = [], 0  # text, and quantities whose unit converts ("2 hours 30 minutes")
    for m in UNIT_QUANTITY.finditer(s) if _UNIT_HINT.search(s) else ():
        parts += [(False, s[prev : m.start()]), (True, m.group())]
        prev = m.end()
    parts.append((False, s[prev:]))
    chunks: list[tuple[str, str]] = []  # (words before, math); ("\0", a unit quantity)
    for is_quantity, text in parts:
        pos = 0
        if is_quantity:
            chunks.append(("\0", text))
            continue
        if prose:
            for m in _WORD.finditer(text):
                chunks.append(("", text[pos : m.start()]))
                chunks.append((m.group(), ""))
                pos = m.end()
        chunks.append(("", text[pos:]))
    for words, math in chunks:
        if words == "\0":
            items.append(parse_value(math))
            continue
        if words:
            items.append(" " + words + " ")
            continue
        pieces = split_list(math)
        for k, piece in enumerate(pieces):
            if k:
                items.append(",")
            piece = _balanced(piece.strip().strip("+*/=:").strip())
            if equations_per_piece:
                piece = _after_equals(piece).strip()
            if piece and (VALUE_HINT.search(piece) or not prose):
                items.append(parse_value(piece))
            elif piece:
                items.append(" " + piece + " ")
    values = [v for v in items if isinstance(v, Value)]
    if not values:
        if (number := word_number(s)) is not None:  # "eighteen dollars"
            return [Value(s.strip(" .,;:"), number)]
        return [parse_value(s)] if s.strip(" .,;:") else []
    chain: list[Value] = []
    gaps: list[str] = []
    gap, broken = "", False
    for item in items:
        if isinstance(item, str):
            gap += item
            continue
        if chain:
            gaps.append(gap)
            broken = broken or not linked(gap)
            if not broken:
                chain.append(item)
        else:
            chain.append(item)
        gap = ""
    return values if any(_HEDGE_WORD.search(g) for g in gaps) else chain


def region_values(region: str, equations_per_piece: bool = False, depth: int = 0) -> list[Value]:
    """Candidate values of an answer region (a tag's or box's content, a final sentence)."""
    region = region[-MAX_REGION:]  # a degenerate answer is read from its end
    boxes = boxed_contents(region) if depth < 4 else []  # \\boxed{\\boxed{…}}: a few levels
    if boxes:
        return [v for box in boxes for v in region_values(box, depth=depth + 1)]
    markers = list(MARKER.finditer(region))
    if markers and markers[-1].end() < len(region):
        region, equations_per_piece = region[markers[-1].end() :], True
    s = clean_region(region)
    if not s:
        return []
    if not equations_per_piece and (rhs := _assignments(s)) is not None:
        return [v for piece in rhs for v in _values_in(piece, True)]
    if not equations_per_piece:
        s = _after_equals(s)
    return _values_in(s, equations_per_piece)


def set_elements(value: Value) -> list[Value] | None:
    """The elements of a set literal ("\\{1, 2, 3\\}" -> 1, 2, 3), None if it is not one."""
    m = re.fullmatch(r"\\\{(.*)\\\}", value.text.strip())
    if m is None:
        return None
    return comma_parts([parse_value(p) for p in split_list(m.group(1)) if p.strip()])
