"""The accuracy checker's rules, one table per rule, on hand-written completions.

Strict (the default) scores one final answer: hedges score 0 with the reason "several answers";
lenient takes the last value. tests/engine/rewards/test_rewards.py has the older extraction and matching tests
and the reward set; tests/engine/rewards/test_answer_corpus.py scores the whole hand-graded corpus.
"""

from __future__ import annotations

import time

import pytest

from grpo_desktop.engine.config import RewardsConfig
from grpo_desktop.engine.rewards.exact import exact_form
from grpo_desktop.engine.rewards.functions import (
    RewardSet,
    _math_verify_equal,
    accuracy_reward,
    accuracy_verdicts,
    answers_match,
)


def _verdict(completion: str, answer: str, **kwargs):
    [verdict] = accuracy_verdicts([completion], [answer], **kwargs)
    return verdict


def _score(completion: str, answer: str, **kwargs) -> float | None:
    return _verdict(completion, answer, **kwargs).score


# ---------------------------------------------------------------- hedges


HEDGES = [  # every one offers several different values, the right one last
    ("It is 16 or 17 or 18.", "18", "16, 17, 18"),
    ("So the answer is 398 or 408.", "408", "398, 408"),
    ("\\boxed{17} \\boxed{18}", "18", "17, 18"),
    ("<answer>17</answer>\n<answer>18</answer>", "18", "17, 18"),
    ("<answer>\\boxed{17} \\boxed{18}</answer>", "18", "17, 18"),
    ("<answer>12, 15, 18</answer>", "18", "12, 15, 18"),
    ("<answer>16 17 18</answer>", "18", "16, 17, 18"),
    ("<answer>16\n17\n18</answer>", "18", "16, 17, 18"),
    ("<answer>x = 17 or x = 18</answer>", "18", "17, 18"),
    ("<answer>between 16 and 18</answer>", "18", "16, 18"),
    ("<answer>18, maybe 20</answer>", "20", "18, 20"),
    ("<answer>18 (or 20 with the popcorn)</answer>", "20", "18, 20"),
    ("The answer is 16, 17, or 18.", "18", "16, 17, 18"),
    ("The answer is 17 dollars or 18 dollars.", "18", "17, 18"),
    ("$\\boxed{17, 18}$", "18", "17, 18"),
    ("The answer is 17.\nThe answer is 18.", "18", "17, 18"),
    ("The final answer is \\(\\frac{1}{2}\\) or \\(\\frac{1}{4}\\).", "\\frac14", "\\frac{1}{2}"),
]


@pytest.mark.parametrize(("completion", "answer", "listed"), HEDGES)
def test_strict_scores_a_hedge_zero_and_says_why(completion, answer, listed):
    verdict = _verdict(completion, answer)
    assert (verdict.score, verdict.extracted) == (0.0, None)
    assert verdict.reason.startswith("several answers: " + listed)


@pytest.mark.parametrize(("completion", "answer", "listed"), HEDGES)
def test_lenient_rewards_the_same_hedge(completion, answer, listed):
    assert _score(completion, answer, checker="lenient") == 1.0  # the last value wins


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("<answer>18</answer> and again <answer>18.00</answer>", "18"),  # the same value twice
        ("\\boxed{18}. Final: $\\boxed{\\$18}$", "18"),
        ("The answer is 17. Wait, 9 × 2 = 18, so the answer is 18.", "18"),  # a correction
        ("<think>maybe \\boxed{17}?</think> The answer is \\boxed{18}.", "18"),  # a draft
        ("<answer>16 - 3 - 4 = 9 eggs, 9 \\times 2 = \\$18</answer>", "18"),  # a computation
        ("<answer>18 (9 \\times 2)</answer>", "18"),  # an explanation, not an alternative
        ("<answer>x = 1 or x = 4</answer>", "1, 4"),  # the gold asks for both roots
        ("So $x = 2$ or $x = -3$. The answer is $2, -3$.", "2, -3"),
        ("The answer is $\\frac{3}{4}$, which is $0.75$.", "0.75"),  # one value, two forms
        ("It is 18, not 17.", "18"),  # a rejected value after the answer
    ],
)
def test_not_a_hedge(completion, answer):
    assert _score(completion, answer) == 1.0


def test_a_list_for_a_list_gold_must_be_the_same_list():
    assert _score("<answer>-3, 2</answer>", "2, -3") == 1.0  # any order
    assert _score("<answer>\\{3, 2, 1\\}</answer>", "\\{1,2,3\\}") == 1.0
    assert _score("<answer>2</answer>", "2, -3") == 0.0  # one root of two
    assert _score("<answer>1, 4, 5</answer>", "1, 4") == 0.0  # an extra one
    assert _score("<answer>1, 2, 4</answer>", "\\{1,2,3\\}") == 0.0


# ---------------------------------------------------------------- what used to be missed


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("The answer is 18. She sells each of the 9 eggs at 2 dollars.", "18"),
        ("#### 72\n\nNote: that is 48 in April and 24 in May.", "72"),
        ("Final answer: 5\n\nCheck: 5 × 4 = 20, 20 + 3 = 23.", "5"),
        ("**Answer: 624**\n\n(52 weeks × 12 = 624; in 3 years it is 1872.)", "624"),
        ("The answer is $18, which she makes from 9 eggs at $2 each.", "18"),
        ("The final answer is: **18**\n\nThe steps used 16, 7, 9 and 2.", "18"),
        ("Answer: 15 years old. In 5 years she will be 20.", "15"),
        ("So the answer is 12 apples; the other 8 go to her brother.", "12"),
    ],
)
def test_final_answer_followed_by_more_numbers(completion, answer):
    assert _score(completion, answer) == 1.0


@pytest.mark.parametrize(
    ("tag", "answer"),
    [
        ("18 dollars", "18"),
        ("$18.00", "18"),
        ("\\$18", "18"),
        ("320,000 people", "320000"),
        ("72 clips", "72"),
        ("She makes $18 every day.", "18"),
        ("12 km/h", "12"),
        ("54 square feet", "54"),
        ("25 cm^2", "25"),
        ("60°", "60"),
        ("8 \\text{ inches}", "8"),
        ("$1,250 per month", "1250"),
        ("x = 18 dollars", "18"),
        ("eighteen", "18"),
        ("75 percent", "75"),
        ("The answer is 42", "42"),
    ],
)
def test_units_and_words_in_the_answer_tag(tag, answer):
    assert _verdict(f"<think>…</think>\n<answer>{tag}</answer>", answer).score == 1.0


@pytest.mark.parametrize(
    "written",
    ["1,800", "1 800", "$1\\,800$", "1{,}800", "1\u202f800", "1\u2009800", "1\u00a0800"],
)
def test_thousands_separators(written):
    assert _score(f"<answer>{written}</answer>", "1800") == 1.0
    assert _score(f"In total: {written}.", "1800") == 1.0


@pytest.mark.parametrize(
    ("tag", "answer"),
    [
        ("\u22125", "-5"),  # minus sign U+2212
        ("\uff0d2", "-2"),  # fullwidth hyphen-minus
        ("\uff11\uff18", "18"),  # fullwidth digits
        ("\u0661\u0668", "18"),  # Arabic-Indic digits
        ("\u06f1\u06f2", "12"),  # Persian digits
        ("\u0967\u0968", "12"),  # Devanagari digits
        ("\u200b18\u200b", "18"),  # zero-width spaces
        ("\ufeff42", "42"),  # byte-order mark
        ("18\u00a0dollars", "18"),  # no-break space
        ("3\u00d710\u2075", "300000"),  # × and a superscript exponent
        ("x\u00b2 + 2x + 1", "(x+1)^2"),  # superscript square
    ],
)
def test_unicode_digits_signs_and_spaces(tag, answer):
    assert _score(f"<answer>{tag}</answer>", answer) == 1.0


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("So she has 3/4 of the pizza left.", "\\frac{3}{4}"),
        ("The probability is $\\frac{3}{4}$.", "\\frac34"),
        ("Therefore the diagonal is $\\sqrt{2}$.", "\\sqrt{2}"),
        ("The circumference is $2\\pi r = 2\\pi$.", "2\\pi"),
        ("The hypotenuse is \u221a2.", "\\sqrt{2}"),
        ("So the area is 9\u03c0 square units.", "9\\pi"),
        ("The angle is \u03c0/4 radians.", "\\frac{\\pi}{4}"),
        ("The height is 2\u221a3 cm.", "2\\sqrt{3}"),
        ("Hence the distance is $3\\sqrt{5}$ units.", "\\sqrt{45}"),
        ("Solving, x = \u22123/4.", "-\\frac{3}{4}"),
        ("The answer is \\( \\frac{2}{9} \\).", "\\frac{2}{9}"),
    ],
)
def test_untagged_fractions_roots_and_pi(completion, answer):
    assert _score(completion, answer) == 1.0


def test_integers_compare_exactly_and_other_numbers_with_the_tolerance():
    assert _score("<answer>1000001</answer>", "1000000") == 0.0  # used to be within 1e-6
    assert _score("<answer>1000000.0</answer>", "1000000") == 1.0
    assert _score("<answer>18.01</answer>", "18") == 0.0
    assert _score("<answer>0.7500001</answer>", "0.75") == 1.0  # 1.3e-7 relative
    assert _score("<answer>0.751</answer>", "0.75") == 0.0
    assert _score("<answer>0.7500001</answer>", "0.75", tolerance=0.0) == 0.0
    assert _score("<answer>0.33</answer>", "\\frac{1}{3}") == 0.0  # rounded is not exact


def test_references_are_read_as_a_dataset_gives_them():
    gsm8k = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n48+24 = <<48+24=72>>72\n#### 1,072"
    assert _score("<answer>1072</answer>", gsm8k) == 1.0
    math = "The probability is $\\frac{6}{8} = \\boxed{\\frac{3}{4}}$."
    assert _score("<answer>0.75</answer>", math) == 1.0
    assert _verdict("<answer>18</answer>", "").score is None  # nothing to compare with
    assert _verdict("<answer>18</answer>", None).score is None


# ---------------------------------------------------------------- verdicts in the reward set


def test_verdicts_give_the_extracted_answer_and_reasons():
    completions = [
        "<answer>18 dollars</answer>",
        "It is 17 or 18.",
        "I am not sure.",
        "<answer>20</answer>",
    ]
    verdicts = accuracy_verdicts(completions, ["18"] * 4)
    assert [v.score for v in verdicts] == [1.0, 0.0, 0.0, 0.0]
    assert [v.extracted for v in verdicts] == ["18", None, None, "20"]
    assert [v.reason for v in verdicts] == [
        None,
        "several answers: 17, 18",
        "no final answer found",
        None,  # a plain wrong answer needs no explanation
    ]
    assert accuracy_reward(completions, ["18"] * 4) == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="unknown answer checker"):
        accuracy_verdicts(completions, ["18"] * 4, checker="sloppy")


def test_reward_set_fills_extracted_and_reasons_per_checker():
    completions = ["<answer>18 dollars</answer>", "It is 17 or 18.", "I am not sure."]
    with RewardSet(RewardsConfig(format_weight=0.0)) as strict:
        batch = strict.score(["p"] * 3, completions, ["18"] * 3)
    assert batch.values == {"accuracy": [1.0, 0.0, 0.0]}
    assert batch.extracted == ["18", None, None]
    assert batch.reasons == [
        {},
        {"accuracy": "several answers: 17, 18"},
        {"accuracy": "no final answer found"},
    ]
    with RewardSet(RewardsConfig(format_weight=0.0, answer_checker="lenient")) as lenient:
        batch = lenient.score(["p"] * 3, completions, ["18"] * 3)
    assert batch.values == {"accuracy": [1.0, 1.0, 0.0]}  # the hedge wins
    assert batch.extracted == ["18", "18", None]
    assert batch.reasons == [{}, {}, {"accuracy": "no final answer found"}]
    with RewardSet(RewardsConfig(accuracy_weight=0.0)) as format_only:
        batch = format_only.score(["p"], ["It is 17 or 18."], ["18"])
    assert (batch.extracted, batch.reasons) == ([None], [{}])


def test_reward_set_passes_the_think_tag():
    cfg = RewardsConfig(think_tag="reasoning", format_weight=0.0)
    text = "<reasoning>draft \\boxed{17}</reasoning> so \\boxed{18}"  # only the box after it
    with RewardSet(cfg) as rewards:
        assert rewards.score(["p"], [text], ["18"]).values["accuracy"] == [1.0]


# ---------------------------------------------------------------- fast paths


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", True),
        ("\\sqrt{45}", "3\\sqrt{5}", True),
        ("\\pi/4", "\\frac{\\pi}{4}", True),
        ("\\sqrt{\\frac{1}{2}}", "\\frac{\\sqrt2}{2}", True),
        ("(2\\sqrt{3})^2", "12", True),
        ("\\frac{9\\pi}{2}", "4.5\\pi", True),
        ("2\\pi", "\\pi", False),
        ("\\sqrt{3}", "\\sqrt{2}", False),
        ("-\\sqrt{2}", "\\sqrt{2}", False),
    ],
)
def test_exact_closed_forms(a, b, same):
    assert exact_form(a) is not None and exact_form(b) is not None
    assert (exact_form(a) == exact_form(b)) is same
    assert answers_match(a, b) is same


@pytest.mark.parametrize("text", ["1+\\sqrt{2}", "x", "\\sqrt{-1}", "\\frac{1}{0}", "\\sqrt23"])
def test_exact_forms_leave_the_rest_to_math_verify(text):
    assert exact_form(text) is None


def test_common_answers_never_need_math_verify():
    # Numbers, fractions, closed forms and intervals are decided without sympy (10-200 ms each).
    pairs = [
        ("<answer>0.75</answer>", "\\frac{3}{4}"),
        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}"),
        ("The area is $4\\pi$.", "2\\pi"),
        ("\\boxed{(-\\infty, 3]}", "(-\\infty,3)"),
        ("<answer>[-2, 7]</answer>", "[-2,7]"),
        ("\\boxed{\\{3, 2, 1\\}}", "\\{1,2,3\\}"),
        ("<answer>3 \\times 10^{8}</answer>", "300000000"),
        ("<answer>25%</answer>", "25"),
    ]
    before = _math_verify_equal.cache_info()
    scores = accuracy_reward([c for c, _ in pairs], [a for _, a in pairs])
    after = _math_verify_equal.cache_info()
    assert scores == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert (after.hits, after.misses) == (before.hits, before.misses)


@pytest.mark.parametrize(
    "text",
    [
        "<answer>" + "1 " * 20_000 + "</answer>",
        "The answer is " * 20_000,
        "$" * 100_000,
        "\\boxed{" * 20_000 + "5" + "}" * 20_000,
        "<answer>" + "x = 1, " * 20_000 + "</answer>",
        "\\[" * 30_000,
        "\u0661\u0662 " * 20_000,
    ],
    ids=["dump", "markers", "dollars", "nested-boxes", "assignments", "brackets", "unicode"],
)
def test_degenerate_completions_are_scored_quickly(text):
    start = time.perf_counter()
    assert accuracy_reward([text], ["12345"]) == [0.0]
    assert time.perf_counter() - start < 2.0


# ---------------------------------------------------------------- other ways to write a value

# (completion, reference, score, reason): right, wrong, and a hedge that still scores 0.
LEADING_DOT = [
    ("<answer>.75</answer>", "0.75", 1.0, None),
    ("The answer is .75.", "\\frac{3}{4}", 1.0, None),
    ("<answer>-.5</answer>", "-0.5", 1.0, None),
    ("<answer>.7</answer>", "0.75", 0.0, None),
    ("<answer>.75</answer>", "75", 0.0, None),  # the point is not dropped
    ("The answer is .5 or .75.", "0.75", 0.0, "several answers: .5, .75"),
]


@pytest.mark.parametrize(("completion", "answer", "score", "reason"), LEADING_DOT)
def test_leading_dot_decimals(completion, answer, score, reason):
    verdict = _verdict(completion, answer)
    assert (verdict.score, verdict.reason) == (score, reason)


# "2,5" (one comma, one or two digits after it) is 2.5 when that is the reference; otherwise it
# is read as the list 2, 5 it may also be, so it never rewards a hedge. "1,500" stays 1500.
DECIMAL_COMMA = [
    ("<answer>2,5</answer>", "2.5", 1.0, None),
    ("The answer is 0,75.", "\\frac{3}{4}", 1.0, None),
    ("So each share is 2,5 kg.", "2.5", 1.0, None),
    ("<answer>-2,5</answer>", "-2.5", 1.0, None),
    ("<answer>1,500</answer>", "1500", 1.0, None),  # a thousands separator, as before
    ("<answer>2,5</answer>", "2, 5", 1.0, None),  # a list reference: the list reading
    ("<answer>2,5</answer>", "2.4", 0.0, "several answers: 2, 5"),
    ("<answer>2,5</answer>", "25", 0.0, "several answers: 2, 5"),
    ("<answer>1,2,3</answer>", "1.2", 0.0, "several answers: 1, 2, 3"),
    ("<answer>2,5 or 3</answer>", "2.5", 0.0, "several answers: 2, 5, 3"),
    ("<answer>17,18</answer>", "18", 0.0, "several answers: 17, 18"),
]


@pytest.mark.parametrize(("completion", "answer", "score", "reason"), DECIMAL_COMMA)
def test_decimal_commas_where_unambiguous(completion, answer, score, reason):
    verdict = _verdict(completion, answer)
    assert (verdict.score, verdict.reason) == (score, reason)


def test_a_decimal_comma_reference_is_a_list():
    assert _score("<answer>1, 2</answer>", "1,2") == 1.0  # a dataset's "1,2" lists two values
    assert _score("<answer>1.2</answer>", "1,2") == 0.0
    assert _score("\\boxed{(2,5)}", "(2,5)") == 1.0  # an interval is never a decimal


def test_a_decimal_comma_at_the_end_of_a_sentence():
    assert _score("Chaque part vaut 3 / 4, donc la réponse est 0,75.", "\\frac{3}{4}") == 1.0
    assert _score("<answer>2,5.</answer>", "2.5") == 1.0


# Spelled quantities in the answer region: "two and a half", "three quarters", "2 and a half";
# "3 quarters" may be coins and stays 3. With a hedge word, number words count as values.
SPELLED = [
    ("<answer>three quarters</answer>", "0.75", 1.0, None),
    ("<answer>two and a half</answer>", "\\frac{5}{2}", 1.0, None),
    ("The answer is 2 and a half hours.", "2.5", 1.0, None),
    ("<answer>one half</answer>", "\\frac12", 1.0, None),
    ("<answer>two thirds of the cake</answer>", "\\frac{2}{3}", 1.0, None),
    ("<answer>3 quarters</answer>", "3", 1.0, None),  # coins, not 3/4
    ("<answer>three quarters</answer>", "3", 0.0, None),
    ("<answer>two and a half</answer>", "3", 0.0, None),
    ("<answer>two and a half or three</answer>", "2.5", 0.0, "several answers: 5/2, 3"),
    ("<answer>eighteen or nineteen</answer>", "19", 0.0, "several answers: 18, 19"),
    ("<answer>18, maybe twenty</answer>", "20", 0.0, "several answers: 18, 20"),
]


@pytest.mark.parametrize(("completion", "answer", "score", "reason"), SPELLED)
def test_spelled_and_mixed_quantities(completion, answer, score, reason):
    verdict = _verdict(completion, answer)
    assert (verdict.score, verdict.reason) == (score, reason)


# A sentence for a word reference (\\text{even}, Monday): the reference's words, whole and in any
# case, with no negation or hedge beside them. Untagged, the last sentence is read.
TEXT_ANSWERS = [
    ("The function is even.", "\\text{even}", 1.0, None),
    ("<answer>The function is even.</answer>", "\\text{even}", 1.0, None),
    ("<think>f(-x) = f(x)</think>\nSo the function is EVEN.", "even", 1.0, None),
    ("It is Monday.", "\\text{Monday}", 1.0, None),
    ("The function is odd.", "\\text{even}", 0.0, None),
    ("<answer>The function is uneven</answer>", "\\text{even}", 0.0, None),  # a whole word
    ("The function is not even.", "\\text{even}", 0.0, "the answer says 'even' with 'not'"),
    ("<answer>even or odd</answer>", "\\text{even}", 0.0, "the answer says 'even' with 'or'"),
    ("It is both even and odd.", "\\text{even}", 0.0, "the answer says 'even' with 'both'"),
]


@pytest.mark.parametrize(("completion", "answer", "score", "reason"), TEXT_ANSWERS)
def test_text_answers_for_word_references(completion, answer, score, reason):
    verdict = _verdict(completion, answer)
    assert (verdict.score, verdict.reason) == (score, reason)


def test_a_sentence_is_read_only_for_a_word_reference():
    assert _verdict("I am not sure.", "18").reason == "no final answer found"


# A closing "… in total." sentence followed only by remarks ("That is …", "Check: …") is the final
# answer; a sentence that goes on computing ("Then …") is not a remark, so its last value counts.
TOTAL_THEN_REMARKS = [
    ("Natalia sold 72 clips in total. That is 24 fewer than 96.", "72", 1.0, None),
    ("She sold 48 + 24 = 72 clips altogether.\nThat's 24 more than in May.", "72", 1.0, None),
    ("In all she sold 72 clips. Check: 48 + 24 = 72.", "72", 1.0, None),
    ("She has 48 in total. Then she gives away 24, leaving 24.", "24", 1.0, None),
    ("She sold 70 clips in total. That is 26 fewer than 96.", "72", 0.0, None),
    ("She sold 71 or 72 clips in total. That is 24 fewer than 96.", "72", 0.0,
     "several answers: 71, 72"),
]  # fmt: skip


@pytest.mark.parametrize(("completion", "answer", "score", "reason"), TOTAL_THEN_REMARKS)
def test_a_total_followed_by_remarks(completion, answer, score, reason):
    verdict = _verdict(completion, answer)
    assert (verdict.score, verdict.reason) == (score, reason)


# Units that convert: hours and minutes are the reference in hours or in minutes, cents in cents
# or in dollars; neither: 0, saying what they read as. Other units are dropped as before.
_NEITHER = "2 hours 30 minutes is 2.5 or 150 in the units it converts to, not the reference"
UNITS_THAT_CONVERT = [
    ("<answer>2 hours 30 minutes</answer>", "2.5", 1.0, None),
    ("<answer>2 hours and 30 minutes</answer>", "150", 1.0, None),
    ("The answer is 2 h 30 min.", "2.5", 1.0, None),
    ("It takes 2 hours 30 minutes.", "2.5", 1.0, None),
    ("<answer>75 cents</answer>", "0.75", 1.0, None),
    ("The answer is 75 cents.", "75", 1.0, None),
    ("<answer>2 hours 30 minutes</answer>", "2", 0.0, _NEITHER),  # used to read as 2
    ("<answer>2 hours 30 minutes</answer>", "2.3", 0.0, _NEITHER),
    ("<answer>75 cents</answer>", "7.5", 0.0,
     "75 cents is 75 or 0.75 in the units it converts to, not the reference"),
    ("<answer>75 cents or 80 cents</answer>", "0.8", 0.0, "several answers: 75 cents, 80 cents"),
    ("<answer>2 hours 30 minutes or 3 hours</answer>", "3", 0.0,
     "several answers: 2 hours 30 minutes, 3"),
]  # fmt: skip


@pytest.mark.parametrize(("completion", "answer", "score", "reason"), UNITS_THAT_CONVERT)
def test_units_that_convert(completion, answer, score, reason):
    verdict = _verdict(completion, answer)
    assert (verdict.score, verdict.reason) == (score, reason)


def test_number_words_count_as_values_only_beside_a_hedge_word():
    tag = "<answer>She has 18 apples, one for each friend or neighbour</answer>"
    assert _score(tag, "18") == 1.0  # "one" is not an alternative to 18
