"""Answer text and values: what "18 dollars", "1 800", "−5", "\\frac{3}{4}" and "25%" mean.

The normalisation half of the accuracy reward, used by engine.rewards.answers (which finds the
final answer) and engine.rewards.functions (which compares it with the reference):
`normalise_text` turns Unicode digits, minus signs, spaces, superscripts, √, π and × into ASCII
or LaTeX and drops thousands separators; `clean_region` drops LaTeX wrappers, bold, currency
and degrees; `parse_value` reads one candidate as a `Value`, exact (a Fraction) for plain
numbers, fractions, percentages and scientific notation, else text for math-verify ("2,5" is
2.5 marked decimal_comma: the checker also reads it as the list 2, 5, `comma_parts`);
"2 hours 30 minutes" and "75 cents" carry their other unit's value too (`Value.also`);
`quick_compare` decides equality without math-verify when that is safe (None: ask it).

Not here: finding the final answer (engine.rewards.answers), running math-verify
(engine.rewards.functions), mixed numbers in digits ("1 3/4"); spelled quantities are read
("two and a half", "three quarters": `spelled_quantities`). Pure Python.

Try it:
    python -c "from grpo_desktop.engine.rewards.values import *; print(normalise_text('−1 800'))"
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

from grpo_desktop.engine.rewards.exact import Form, exact_form

MAX_MATH_LEN = 1000  # longer answers are compared as text only

_SPECIAL = {
    **dict.fromkeys("\u2212\u2012\u2013\ufe63\uff0d\u2796\u02d7", "-"),
    **dict.fromkeys("\u2028\u2029\x85", "\n"),
    **dict.fromkeys("€£¥₹", " "),
    "π": "\\pi ",
    "∞": "\\infty ",
    "×": "\\times ",
    "✕": "\\times ",
    "·": "\\cdot ",
    "⋅": "\\cdot ",
    "÷": "\\div ",
    "±": "\\pm ",
    "⁄": "/",
    "∕": "/",
    "°": "^\\circ ",
    "≤": "\\le ",
    "≥": "\\ge ",
    "≠": "\\ne ",
    "≈": "\\approx ",
    "∪": "\\cup ",
    "∩": "\\cap ",
    "∈": "\\in ",
    "。": ". ",
    "、": ", ",
}
_CHAR_CACHE: dict[str, str] = {}
_SUPERSCRIPT_RUN = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_UNICODE_GROUP_SEP = re.compile(r"(?<=\d)[\u00a0\u2007\u2008\u2009\u200a\u202f](?=\d{3}(?!\d))")
_ROOT = re.compile(r"√\s*(?:\{([^{}]*)\}|\(([^()]*)\)|(\d+(?:\.\d+)?|[A-Za-z]|\\pi ?))")
_LATEX_GROUP_SEP = re.compile(
    r"(?<=\d)(?:\\,|\{,\}|\\ |\\;|\\:|\\!|~|\\thinspace ?)(?=\d{3}(?!\d))"
)
_SPACE_GROUPS = re.compile(r"(?<![\w.,])\d{1,3}(?: \d{3})+(?![\w,]|\.\d)")
_ASCII_ROOT = re.compile(r"(?<![\\A-Za-z])sqrt\s*[({]([^(){}]*)[)}]")
_ASCII_PI = re.compile(r"(?<![\\A-Za-z])pi(?![A-Za-z])")


def _char(c: str) -> str:
    """What one non-ASCII character becomes (cached)."""
    out = _CHAR_CACHE.get(c)
    if out is None:
        category = unicodedata.category(c)
        if c in _SPECIAL:
            out = _SPECIAL[c]
        elif category == "Nd":
            out = str(unicodedata.decimal(c))
        elif category == "Zs":
            out = " "
        elif category == "Cf":  # zero-width spaces and joiners, soft hyphen, bidi marks
            out = ""
        elif 0xFF01 <= ord(c) <= 0xFF5E:  # fullwidth ASCII
            out = chr(ord(c) - 0xFEE0)
        elif unicodedata.name(c, "").startswith("VULGAR FRACTION"):
            out = unicodedata.normalize("NFKC", c).replace("⁄", "/")
        else:
            out = c
        _CHAR_CACHE[c] = out
    return out


def normalise_text(text: str) -> str:
    """ASCII digits, signs and spaces; LaTeX for √ π × ≤; no thousands separators.

    Unicode digits (fullwidth, Arabic-Indic, …), minus signs, zero-width characters and
    superscripts become ASCII; "1 800", "1\\,800", "1{,}800" and a narrow no-break space as a
    thousands separator all read 1800."""
    if not text.isascii():
        text = _UNICODE_GROUP_SEP.sub("", text)
        text = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + m.group().translate(_SUPERSCRIPTS) + "}", text)
        text = text.translate({ord(c): _char(c) for c in set(text) if ord(c) > 127})
        if "√" in text:
            text = _ROOT.sub(lambda m: "\\sqrt{" + "".join(g or "" for g in m.groups()) + "}", text)
            text = text.replace("√", "\\sqrt")
    if "sqrt" in text:
        text = _ASCII_ROOT.sub(r"\\sqrt{\1}", text)
    if "pi" in text:
        text = _ASCII_PI.sub(r"\\pi ", text)
    text = _LATEX_GROUP_SEP.sub("", text)
    return _SPACE_GROUPS.sub(lambda m: m.group().replace(" ", ""), text)


# ---------------------------------------------------------------- cleaning a region

_UNWRAP = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox|emph|operatorname)"
    r"\s*\{([^{}]*)\}"
)
_DROP = re.compile(
    r"\\left(?![a-z])|\\right(?![a-z])|\\displaystyle|\\[!,;: ]|\*\*|\\\$|\$|\\[()\[\]]|~"
    r"|(?:\^\s*\{?\\circ\s*\}?|\\circ|\\degree)(?:\s*[CF](?![A-Za-z]))?|\\mathdollar"
)
_LIST_COMMANDS = re.compile(r"\\q?quad|\\\\|&")
_LEADING_PUNCTUATION = re.compile(r"^(?:[\s,;:!?]|\.(?!\d))+")
_UNIT_LETTER = re.compile(
    r"(?<=\d)\s+[mgsLh](?:\^\{?[23]\}?)?(?=\s|$|[.,;)/])(?!\s*\d{1,2}\s*min)"  # not "2 h 30 min"
)


def clean_region(s: str) -> str:
    """The answer text without LaTeX dressing: "$\\$18.00$" -> "18.00", "\\text{5 cm}" -> "5 cm"."""
    while "\\" in s and (unwrapped := _UNWRAP.sub(r" \1 ", s)) != s:
        s = unwrapped
    s = s.replace("\\%", "%").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _DROP.sub(" ", s)
    s = _LIST_COMMANDS.sub(", ", s)
    s = _UNIT_LETTER.sub(" ", s)
    s = s.strip().rstrip(" .,;:!?")
    return _LEADING_PUNCTUATION.sub("", s).strip()  # ".75" keeps its point


# ---------------------------------------------------------------- values

_NUM = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?"
_PLAIN = re.compile(_NUM)
_SCIENTIFIC = re.compile(
    rf"({_NUM})\s*(?:[eE]|(?:\\times|\\cdot|\*|x)\s*10\s*\^)\s*\{{?([+-]?\d{{1,3}})\}}?"
)
_POWER_OF_TEN = re.compile(r"10\s*\^\s*\{?([+-]?\d{1,3})\}?")
_LATEX_FRACTION = re.compile(rf"([+-])?\\frac\s*(?:\{{({_NUM})\}}\{{({_NUM})\}}|(\d)(\d))")
_SLASH_FRACTION = re.compile(rf"({_NUM})\s*/\s*({_NUM})")
# One comma between digits with one or two digits after it: a decimal comma ("2,5", "0,75") or a
# list written without a space ("2,5" for 2 and 5); "1,500" is always one thousand five hundred.
DECIMAL_COMMA = re.compile(r"[+-]?\d+,\d{1,2}")
# Quantities whose unit converts, so either reading is the answer: a duration in hours and
# minutes (the reference in hours or in minutes) and cents (in cents or in dollars).
UNIT_QUANTITY = re.compile(
    r"(?<![\d.])(\d+)\s*(?:hours?|hrs?|h)\s*,?\s*(?:and\s+)?(\d{1,2})\s*(?:minutes?|mins?|m)(?![A-Za-z])"
    r"|(?<![\d.,])(\d+)\s*(?:cents?|¢)(?![A-Za-z])",
    re.IGNORECASE,
)
_WORDS_ONLY = re.compile(r"[A-Za-z][A-Za-z '\-]*")


@dataclass(frozen=True)
class Value:
    """One candidate answer: its text as read and, when it is a plain number, its exact value."""

    text: str
    number: Fraction | None = None
    percent: bool = False
    form: Form | None = None  # c·√r·π^k for a closed form that is not rational ("2\\pi")
    decimal_comma: bool = False  # "2,5": 2.5 here; `comma_parts` gives the list reading 2, 5
    also: tuple[Fraction, ...] = ()  # in another unit: "2 hours 30 minutes" is 2.5 (h) or 150

    @property
    def key(self) -> str:
        """Equal keys mean the same answer ("18" and "18.00"; "0.5" and "\\frac{1}{2}")."""
        if self.number is not None:
            return f"{self.number}{'%' if self.percent else ''}"
        if self.form is not None:
            return "{}*sqrt({})*pi^{}".format(*self.form)
        return re.sub(r"\s+", "", self.text)

    @property
    def latex(self) -> str:
        """The text as math-verify reads it."""
        return "$" + self.text.replace("%", "\\%") + "$"


def comma_parts(values: list[Value] | tuple[Value, ...]) -> list[Value]:
    """The values with each decimal-comma one read as the list it may also be: "2,5" -> 2, 5."""
    out: list[Value] = []
    for v in values:
        if v.decimal_comma:
            head, tail = v.text.split(",")
            out += [parse_value(head), parse_value(tail)]
        else:
            out.append(v)
    return out


def _fraction(s: str) -> Fraction | None:
    if not s or s in "+-" or not any(ch.isdigit() for ch in s):
        return None
    try:
        return Fraction(s.replace(",", ""))
    except (ValueError, ZeroDivisionError):  # more digits than int() accepts (4300)
        return None


def _number(s: str) -> Fraction | None:
    """The exact value of a plain number, fraction or power of ten; None for anything else."""
    s = s.strip()
    while s.startswith("(") and s.endswith(")") and s.count("(") == 1:  # "(-5)"
        s = s[1:-1].strip()
    if _PLAIN.fullmatch(s):
        return _fraction(s)
    if m := _LATEX_FRACTION.fullmatch(s):
        num, den = (m.group(2), m.group(3)) if m.group(2) is not None else (m.group(4), m.group(5))
        a, b = _fraction(num), _fraction(den)
        if a is None or not b:
            return None
        return -a / b if m.group(1) == "-" else a / b
    if m := _SLASH_FRACTION.fullmatch(s):
        a, b = _fraction(m.group(1)), _fraction(m.group(2))
        return a / b if a is not None and b else None
    if m := _SCIENTIFIC.fullmatch(s):
        mantissa = _fraction(m.group(1))
        return None if mantissa is None else mantissa * Fraction(10) ** int(m.group(2))
    if m := _POWER_OF_TEN.fullmatch(s):
        return Fraction(10) ** int(m.group(1))
    return None


def parse_value(text: str) -> Value:
    """A Value from cleaned answer text: "18.00" -> 18, "25%" -> 25 (percent), "x+1" -> text;
    "2,5" -> 2.5 marked decimal_comma (see `comma_parts`)."""
    shown = text.strip().rstrip(" .,;:").lstrip(" ,;:").strip()
    s = shown.removesuffix("%").strip()
    if m := UNIT_QUANTITY.fullmatch(s):
        if m.group(1) is not None:  # hours and minutes: in hours, or in minutes
            hours, minutes = int(m.group(1)), int(m.group(2))
            return Value(
                shown, hours + Fraction(minutes, 60), also=(Fraction(hours * 60 + minutes),)
            )
        cents = Fraction(m.group(3))  # in cents as written, or in dollars
        return Value(shown, cents, also=(cents / 100,))
    if DECIMAL_COMMA.fullmatch(s):
        return Value(shown, Fraction(s.replace(",", ".")), shown.endswith("%"), None, True)
    number = _number(s) if len(s) <= 80 else None
    form = exact_form(s) if number is None and ("\\" in s or "^" in s) else None
    if form is not None and form[1:] == (1, 0):  # rational after all: "2^{10}"
        number, form = form[0], None
    return Value(shown, number, number is not None and shown.endswith("%"), form)


_SMALL = [
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
    *("eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen"),
    *("eighteen", "nineteen"),
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_NUMBER_WORDS = re.compile(
    rf"\b(?:({'|'.join(_TENS)})(?:[\s-]+({'|'.join(_SMALL[1:10])}))?|({'|'.join(_SMALL)}))\b",
    re.IGNORECASE,
)


def word_number(s: str) -> Fraction | None:
    """The value of the one number word in s ("eighteen dollars" -> 18, "twenty-five" -> 25),
    None if there is none or more than one."""
    found = list(_NUMBER_WORDS.finditer(s))
    if len(found) != 1:
        return None
    tens, unit, small = found[0].groups()
    if small:
        return Fraction(_SMALL.index(small.lower()))
    return Fraction(
        20 + 10 * _TENS.index(tens.lower()) + (_SMALL.index(unit.lower()) if unit else 0)
    )


_DENOMINATORS = {"half": 2, "halves": 2, "third": 3, "quarter": 4, "fourth": 4, "fifth": 5,
                 "sixth": 6, "eighth": 8, "tenth": 10}  # fmt: skip
_COUNT = (
    rf"\d+|a|an|(?:{'|'.join(_TENS)})(?:[\s-]+(?:{'|'.join(_SMALL[1:10])}))?|{'|'.join(_SMALL)}"
)
_PART = rf"({'|'.join(sorted(_DENOMINATORS, key=len, reverse=True))})s?"
_MIXED = re.compile(rf"\b({_COUNT})\s+and\s+(?:a|an|one)\s+{_PART}\b", re.IGNORECASE)
# "3 quarters" may be coins: only a spelled count makes a fraction ("three quarters")
_SPELLED_FRACTION = re.compile(rf"\b((?!\d){_COUNT})[\s-]+{_PART}\b", re.IGNORECASE)
_HEDGE = re.compile(r"\b(?:or|either|maybe|perhaps|possibly|alternatively)\b", re.IGNORECASE)


def _count(word: str) -> int | None:
    if word.isdigit():
        return int(word)
    if word.lower() in ("a", "an"):
        return 1
    n = word_number(word)
    return None if n is None else int(n)


def spelled_quantities(s: str) -> str:
    """An answer's spelled quantities as numbers: "two and a half" -> "5/2", "three quarters" ->
    "3/4", "2 and a half hours" -> "5/2 hours"; with one of those, or a hedge word ("or", "maybe")
    beside a number word, its number words too ("5/2 or three" -> "5/2 or 3": a hedge shows)."""
    if not re.search(r"[A-Za-z]", s):
        return s

    def mixed(m: re.Match) -> str:
        whole, den = _count(m.group(1)), _DENOMINATORS[m.group(2).lower()]
        return m.group() if whole is None else f"{whole * den + 1}/{den}"

    def fraction(m: re.Match) -> str:
        num, den = _count(m.group(1)), _DENOMINATORS[m.group(2).lower()]
        return m.group() if num is None else f"{num}/{den}"

    out = _SPELLED_FRACTION.sub(fraction, _MIXED.sub(mixed, s))
    if out != s or any(
        _HEDGE.search(out, max(0, m.start() - 12), m.end() + 12)
        for m in _NUMBER_WORDS.finditer(out)
    ):
        out = _NUMBER_WORDS.sub(lambda m: str(word_number(m.group())), out)
    return out


_NEGATIONS = {"not", "no", "neither", "nor", "never", "isn't", "aren't", "wasn't", "cannot",
              "can't", "doesn't", "both"}  # fmt: skip
_TEXT_HEDGES = {"or", "either", "maybe", "perhaps", "possibly", "alternatively", "unless"}


def text_answer(predicted: str, reference: str) -> tuple[bool, str | None] | None:
    """A sentence judged against a word reference ("The function is even." for \\text{even}):
    (equal, reason); None when the reference is not words or the answer is not a sentence.

    The reference's words must appear whole (case ignored: "even", not "uneven"); a sentence that
    also negates or hedges ("not even", "even or odd", "both") scores 0, saying why."""
    ref = _plain_words(reference)
    if ref is None or _plain_words(predicted) == ref:
        return None
    ref_words = re.findall(r"[a-z]+(?:'[a-z]+)?", reference.lower())
    words = re.findall(r"[a-z]+(?:'[a-z]+)?", predicted.lower())
    if len(words) <= len(ref_words):
        return None
    n = len(ref_words)
    if not any(words[i : i + n] == ref_words for i in range(len(words) - n + 1)):
        return False, None
    doubts = sorted({w for w in words if w in _NEGATIONS | _TEXT_HEDGES} - set(ref_words))
    if doubts:
        return False, f"the answer says {reference!r} with {', '.join(map(repr, doubts))}"
    return True, None


def _readings(v: Value) -> tuple[Fraction, ...]:
    assert v.number is not None
    return (v.number, v.number / 100) if v.percent else (v.number, *v.also)


def _close(a: Fraction, b: Fraction, tolerance: float) -> bool:
    if b.denominator == 1:  # integers compare exactly
        return a == b
    return abs(a - b) <= Fraction(tolerance) * abs(b)


def _plain_words(s: str) -> str | None:
    """Lower-case letters of a word answer ("Monday", "(C)"), or None if it is not one."""
    s = s.strip()
    if len(s) == 3 and s[0] == "(" and s[2] == ")":
        s = s[1]
    if not _WORDS_ONLY.fullmatch(s):
        return None
    return re.sub(r"[\s'\-]+", "", s).lower()


_BRACKETED = re.compile(r"([\[(])(.*)([\])])")
_INFINITY = {"\\infty": "+", "+\\infty": "+", "-\\infty": "-"}


def _components(text: str) -> tuple[str, list[str]] | None:
    """Brackets and parts of an interval or tuple: "[-2, 7)" -> ("[)", ["-2", "7"])."""
    m = _BRACKETED.fullmatch(text.replace(" ", ""))
    if m is None:
        return None
    parts, depth, start, inner = [], 0, 0, m.group(2)
    for i, c in enumerate(inner):
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return None  # "(1, 2) \\cup (3, 4)": not one bracketed sequence
        if c == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    return (m.group(1) + m.group(3), parts) if len(parts) > 1 and depth == 0 else None


def _sequence_compare(predicted: Value, reference: Value, tolerance: float) -> bool | None:
    """Intervals and tuples part by part, when every part is a number, a closed form or ±∞."""
    p, r = _components(predicted.text), _components(reference.text)
    if p is None or r is None:
        return None
    if p[0] != r[0] or len(p[1]) != len(r[1]):
        return False  # [1, 2) is not (1, 2)
    verdicts = []
    for a, b in zip(p[1], r[1]):
        if a in _INFINITY or b in _INFINITY:
            verdicts.append(_INFINITY.get(a) == _INFINITY.get(b))
        else:
            verdicts.append(quick_compare(parse_value(a), parse_value(b), tolerance))
    return False if False in verdicts else None if None in verdicts else True


def _form_of(v: Value) -> Form | None:
    if v.form is not None:
        return v.form
    return (v.number, 1, 0) if v.number is not None and not v.percent else None


def quick_compare(predicted: Value, reference: Value, tolerance: float) -> bool | None:
    """Whether two values are equal, when that is decidable here; None means ask math-verify.

    Numbers: equal when exactly equal if the reference is an integer, else within the relative
    tolerance; "25%" also reads as 0.25. Word answers: case and spaces ignored."""
    if predicted.number is not None and reference.number is not None:
        return any(
            _close(a, b, tolerance) for a in _readings(predicted) for b in _readings(reference)
        )
    if predicted.key == reference.key:
        return True
    if (
        "," in predicted.text
        and (same := _sequence_compare(predicted, reference, tolerance)) is not None
    ):
        return same
    if predicted.form is not None or reference.form is not None:  # 2π, √2/2, …
        p_form, r_form = _form_of(predicted), _form_of(reference)
        if p_form is not None and r_form is not None:
            if predicted.form is not None and reference.form is not None:
                return p_form == r_form
            if (predicted.number or reference.number or Fraction(1, 2)).denominator == 1:
                return False  # an integer is never irrational; 1.414 vs √2 goes to math-verify
    p, r = _plain_words(predicted.text), _plain_words(reference.text)
    if p is not None and r is not None:  # math-verify would read "yes" as y*e*s
        return p == r
    if (p is not None and reference.number is not None) or (
        r is not None and predicted.number is not None
    ):
        return False
    if len(predicted.text) > MAX_MATH_LEN or len(reference.text) > MAX_MATH_LEN:
        return False
    return None
