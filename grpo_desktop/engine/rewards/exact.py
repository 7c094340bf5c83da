"""Exact values of simple closed forms: rationals times a square root times a power of π.

MATH-style answers are mostly of this shape ("\\frac{\\sqrt{3}}{2}", "2\\pi", "3\\sqrt{5}", "\\pi/4",
"\\frac{1}{\\sqrt{2}}"). Each has one canonical form c·√r·π^k (c a Fraction, r a square-free
integer, k an integer), so two of them are equal exactly when their forms are: the comparison is
decided by arithmetic on small integers, without a math-verify (sympy) call.

Not here: sums or differences ("1 + \\sqrt{2}" is left to math-verify), variables, other
functions, roots other than square roots, or huge numbers (it gives up, returning None).
Pure Python.

Try it:
    python -c 'from grpo_desktop.engine.rewards.exact import exact_form as e; print(e("\\sqrt{8}"))'
"""

from __future__ import annotations

import re
from fractions import Fraction

Form = tuple[Fraction, int, int]  # c, r, k: c * sqrt(r) * pi**k
_MAX = 10**12  # radicands and numbers beyond this are left to math-verify
_TOKEN = re.compile(r"\\frac|\\sqrt|\\pi|\\cdot|\\times|\d+(?:\.\d+)?|\.\d+|[-+*/^(){}]")
_SKIP = re.compile(r"\s+|\\left|\\right|\\,|\\!|\\;")


def _square_free(n: int) -> tuple[int, int] | None:
    """n = a**2 * b with b square-free: (a, b); None if n is too large to factor quickly."""
    if n > _MAX:
        return None
    a, b, p = 1, n, 2
    while p * p <= b:
        while b % (p * p) == 0:
            b //= p * p
            a *= p
        p += 1
    return a, b


def _times(x: Form, y: Form) -> Form | None:
    split = _square_free(x[1] * y[1])
    if split is None:
        return None
    return x[0] * y[0] * split[0], split[1], x[2] + y[2]


def _inverse(x: Form) -> Form | None:
    if x[0] == 0:
        return None
    return 1 / (x[0] * x[1]), x[1], -x[2]  # 1/(c√r) = √r / (c r)


def _sqrt(x: Form) -> Form | None:
    c, r, k = x
    if r != 1 or k % 2 or c < 0 or c.numerator > _MAX or c.denominator > _MAX:
        return None
    split = _square_free(c.numerator * c.denominator)  # √(p/q) = √(pq) / q
    if split is None:
        return None
    return Fraction(split[0], c.denominator), split[1], k // 2


def _power(x: Form, n: int) -> Form | None:
    if abs(n) > 64:
        return None
    out: Form | None = (Fraction(1), 1, 0)
    for _ in range(abs(n)):
        out = _times(out, x) if out is not None else None
    return out if n >= 0 or out is None else _inverse(out)


class _Parser:
    def __init__(self, tokens: list[str]):
        self.tokens, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise ValueError(token)
        self.i += 1
        return token

    def expr(self) -> Form | None:
        sign = -1 if self.peek() == "-" else 1
        if self.peek() in ("-", "+"):
            self.take()
        x = self.term()
        return None if x is None else (sign * x[0], x[1], x[2])

    def term(self) -> Form | None:
        x = self.power()
        while x is not None and self.peek() not in (None, ")", "}", "+", "-"):
            op = self.peek()
            if op in ("*", "\\cdot", "\\times", "/"):
                self.take()
            y = self.power()
            if y is not None and op == "/":
                y = _inverse(y)
            if y is None:
                return None
            x = _times(x, y)
        return x

    def power(self) -> Form | None:
        x = self.atom()
        if x is not None and self.peek() == "^":
            self.take()
            e = self.atom()
            if e is None or e[1] != 1 or e[2] != 0 or e[0].denominator != 1:
                return None
            x = _power(x, int(e[0]))
        return x

    def group(self) -> Form | None:
        if self.peek() == "{":
            self.take()
            x = self.expr()
            self.take("}")
            return x
        token = self.take()  # \sqrt2: one digit
        if not (token.isdigit() and len(token) == 1):
            raise ValueError(token)
        return Fraction(int(token)), 1, 0

    def atom(self) -> Form | None:
        token = self.take()
        if token == "\\pi":
            return Fraction(1), 1, 1
        if token == "\\sqrt":
            inner = self.group()
            return None if inner is None else _sqrt(inner)
        if token == "\\frac":
            if (digits := self.peek() or "").isdigit() and len(digits) == 2:  # \frac34
                self.take()
                return (
                    (Fraction(int(digits[0]), int(digits[1])), 1, 0) if digits[1] != "0" else None
                )
            num, den = self.group(), self.group()
            if num is None or den is None or den[0] == 0:
                return None
            inv = _inverse(den)
            return None if inv is None else _times(num, inv)
        if token in ("(", "{"):
            x = self.expr()
            self.take(")" if token == "(" else "}")
            return x
        if token[0].isdigit() or token[0] == ".":
            value = Fraction(token)
            return (value, 1, 0) if value <= _MAX else None
        raise ValueError(token)


def exact_form(text: str) -> Form | None:
    """The canonical form c·√r·π^k of a closed-form value, or None if it is not one."""
    s = _SKIP.sub("", text).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    if not s or len(s) > 120:
        return None
    tokens = _TOKEN.findall(s)
    if "".join(tokens) != s:  # something this does not read: a variable, a sum's letters, …
        return None
    parser = _Parser(tokens)
    try:
        form = parser.expr()
    except (ValueError, ZeroDivisionError):
        return None
    return form if parser.peek() is None else None
